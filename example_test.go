package gotp_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gotp/gotp"
)

type request struct {
	from gotp.PID
	text string
}

func Example() {
	n := gotp.NewNode(gotp.Options{Name: "demo"})
	defer n.Stop(context.Background())

	echo, _ := n.Spawn(func(p *gotp.Process) error {
		for {
			msg, err := p.Receive(p.Context())
			if err != nil {
				return err
			}
			req := msg.(request)
			p.Send(req.from, "echo: "+req.text)
		}
	})

	done := make(chan string)
	n.Spawn(func(p *gotp.Process) error {
		p.Send(echo, request{from: p.Self(), text: "hello"})
		ctx, cancel := context.WithTimeout(p.Context(), time.Second)
		defer cancel()
		reply, err := p.Receive(ctx)
		if err != nil {
			return err
		}
		done <- reply.(string)
		return nil
	})
	fmt.Println(<-done)
	// Output: echo: hello
}

func ExampleProcess_Monitor() {
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(context.Background())

	worker, _ := n.Spawn(func(p *gotp.Process) error {
		_, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		return errors.New("disk full")
	})
	downs := make(chan gotp.Down, 1)
	n.Spawn(func(p *gotp.Process) error {
		p.Monitor(worker)
		p.Send(worker, "go")
		msg, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		downs <- msg.(gotp.Down)
		return nil
	})
	d := <-downs
	fmt.Println(d.PID == worker, d.Reason)
	// Output: true disk full
}

func ExampleProcess_TrapExit() {
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(context.Background())

	exits := make(chan gotp.Exit, 1)
	n.Spawn(func(p *gotp.Process) error {
		p.TrapExit(true)
		p.SpawnLink(func(*gotp.Process) error { return errors.New("boom") })
		msg, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		exits <- msg.(gotp.Exit)
		return nil
	})
	fmt.Println((<-exits).Reason)
	// Output: boom
}
