// Command counter is a small tour of gotp: a gen_server that keeps a
// count, workers that call it, and one worker that crashes alone while a
// monitor reports why.
//
//	go run ./examples/counter
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// counter is a gen_server holding a running total.
type counter struct {
	server.Defaults
	total int
}

type add struct{ n int }

func (c *counter) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case add:
		c.total += r.n
		return c.total, nil
	}
	return c.Defaults.HandleCall(p, from, req)
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	n := gotp.NewNode(gotp.Options{Name: "counter"})
	defer func() {
		if err := n.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	if _, err := server.Start(ctx, n, &counter{}, server.Named("counter")); err != nil {
		log.Fatal(err)
	}

	// Three workers add to the counter; the third one fails after its call.
	downs := make(chan gotp.Down, 3)
	for i := 1; i <= 3; i++ {
		pid, err := n.Spawn(func(p *gotp.Process) error {
			total, err := server.Call[int](p.Context(), n, gotp.Name("counter"), add{i})
			if err != nil {
				return err
			}
			fmt.Printf("worker %v added %d, total now %d\n", p.Self(), i, total)
			if i == 3 {
				return errors.New("worker 3 gave up")
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
	}
	for range 3 {
		d := <-downs
		if d.Reason == nil {
			fmt.Printf("%v ended normally\n", d.PID)
		} else {
			fmt.Printf("%v failed alone: %v\n", d.PID, d.Reason)
		}
	}
	total, err := server.Call[int](ctx, n, gotp.Name("counter"), add{0})
	fmt.Println("the counter is still running, total:", total, err)
}
