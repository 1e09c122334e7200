package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// online is a stand-in for the chat's online registry.
type online struct{ server.Defaults }

// connection is a stand-in for one user's connection process.
func connection(user string) func(p *gotp.Process) error {
	return func(p *gotp.Process) error {
		<-p.Context().Done() // serve the user until stopped
		return nil
	}
}

// The supervision tree of a chat service: a one_for_one root over an
// online registry and a dynamic supervisor of temporary connections.
func Example_supervisionTree() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Logger: slog.New(slog.DiscardHandler)})
	defer n.Stop(ctx)

	conns := supervisor.DynamicSpec[string]{
		Restart: supervisor.Temporary, // a dead connection means the user left
		Start: func(ctx context.Context, sup *gotp.Process, user string) (gotp.PID, error) {
			return sup.SpawnLink(connection(user))
		},
	}
	root, err := supervisor.Start(ctx, n, supervisor.Spec{
		Strategy: supervisor.OneForOne,
		Children: []supervisor.ChildSpec{
			supervisor.Server("online", func() server.Behaviour { return online{} }, server.Named("online")),
			conns.ChildSpec("conns", server.Named("conns")),
		},
	}, server.Named("root"))
	if err != nil {
		panic(err)
	}
	alice, _ := supervisor.StartDynamicChild(ctx, n, gotp.Name("conns"), "alice")
	supervisor.StartDynamicChild(ctx, n, gotp.Name("conns"), "bob")

	// Alice's connection crashes: it is not restarted.
	n.Exit(alice, gotp.ErrKill)
	k, _ := supervisor.CountChildren(ctx, n, gotp.Name("conns"))
	fmt.Println("connections:", k.Active)

	// The online registry crashes: it is restarted.
	before, _ := n.Whereis("online")
	n.Exit(before, errors.New("bug"))
	which, _ := supervisor.WhichChildren(ctx, n, root)
	for _, c := range which {
		fmt.Println(c.ID, c.Type, c.State, c.Restarts)
	}
	// Output:
	// connections: 1
	// online worker running 1
	// conns supervisor running 0
}

// A child that fails more often than the intensity allows makes its
// supervisor give up with ErrMaxIntensity, a shutdown its parent sees.
func ExampleSpec_intensity() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Logger: slog.New(slog.DiscardHandler)})
	defer n.Stop(ctx)

	sup, _ := supervisor.Start(ctx, n, supervisor.Spec{
		Intensity: 2, // at most 2 restarts in the default 5 s period
		Children:  []supervisor.ChildSpec{supervisor.Func("flaky", connection("flaky"))},
	})
	down := make(chan error, 1)
	n.MonitorFunc(sup, func(d gotp.Down) { down <- d.Reason })
	for range 3 {
		which, _ := supervisor.WhichChildren(ctx, n, sup)
		n.Exit(which[0].PID, gotp.ErrKill)
	}
	reason := <-down
	fmt.Println(errors.Is(reason, supervisor.ErrMaxIntensity), errors.Is(reason, gotp.ErrShutdown))
	// Output: true true
}

// Inspect and Tree read a tree's shape without calling the supervisors.
func ExampleTree() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Logger: slog.New(slog.DiscardHandler)})
	defer n.Stop(ctx)

	leaf := supervisor.Spec{Children: []supervisor.ChildSpec{supervisor.Func("worker", connection("w"))}}
	root, _ := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{leaf.ChildSpec("leaf")}})

	tree, _ := supervisor.Tree(n, root)
	var show func(in supervisor.Info, depth int)
	show = func(in supervisor.Info, depth int) {
		for _, c := range in.Children {
			fmt.Printf("%*s%s (%v, %v)\n", 2*depth, "", c.ID, c.Type, c.State)
			if c.Sub != nil {
				show(*c.Sub, depth+1)
			}
		}
	}
	show(tree, 0)
	// Output:
	// leaf (supervisor, running)
	//   worker (worker, running)
}
