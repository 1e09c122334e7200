package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/server"
)

type Greet struct{ Name string }

type greeter struct{ server.Defaults }

func (greeter) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	return "olá, " + req.(Greet).Name, nil
}

// Two nodes in one program, each with its own embedded NATS server, the
// second routed to the first; a call crosses from one to the other.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	join := func(name string, peers ...string) (*gotp.Node, *cluster.Cluster) {
		codec := cluster.NewCodec()
		if err := cluster.Register[Greet](codec, "example.Greet"); err != nil {
			panic(err)
		}
		n := gotp.NewNode(gotp.Options{Name: name, Logger: quiet})
		c, err := cluster.Join(ctx, n, cluster.Options{Peers: peers, Codec: codec, Logger: quiet})
		if err != nil {
			panic(err)
		}
		return n, c
	}
	a, ca := join("a")
	b, cb := join("b", ca.RouteURL())
	defer a.Stop(ctx)
	defer b.Stop(ctx)
	if err := cb.WaitFor(ctx, "a"); err != nil {
		panic(err)
	}
	srv, _ := server.Start(ctx, a, greeter{})
	reply, err := server.Call[string](ctx, b, srv, Greet{Name: "mundo"})
	fmt.Println(reply, err)
	fmt.Println(cb.Nodes()[0].Name)
	// Output:
	// olá, mundo <nil>
	// a
}
