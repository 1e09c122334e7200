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
	"io"
	"log"
	"os"
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
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run is the tour, writing what happens to w.
func run(w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	n := gotp.NewNode(gotp.Options{Name: "counter"})
	defer n.Stop(ctx)

	if _, err := server.Start(ctx, n, &counter{}, server.Named("counter")); err != nil {
		return err
	}

	// Three workers add to the counter, one after another; the third fails
	// after its call. Each waits for a go-ahead, so that its monitor is in
	// place before it can end (a monitor of a process that has already
	// ended reports gotp.ErrNoProc, not why it ended).
	downs := make(chan gotp.Down, 1)
	for i := 1; i <= 3; i++ {
		pid, err := n.Spawn(func(p *gotp.Process) error {
			if _, err := p.Receive(p.Context()); err != nil {
				return err
			}
			total, err := server.Call[int](p.Context(), n, gotp.Name("counter"), add{i})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "worker %d added %d, total now %d\n", i, i, total)
			if i == 3 {
				return errors.New("worker 3 gave up")
			}
			return nil
		})
		if err != nil {
			return err
		}
		n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
		n.Send(pid, "go")
		if d := <-downs; d.Reason == nil {
			fmt.Fprintf(w, "worker %d ended normally\n", i)
		} else {
			fmt.Fprintf(w, "worker %d failed alone: %v\n", i, d.Reason)
		}
	}
	total, err := server.Call[int](ctx, n, gotp.Name("counter"), add{0})
	fmt.Fprintln(w, "the counter is still running, total:", total, err)
	return n.Stop(ctx)
}
