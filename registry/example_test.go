package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
)

// counter plays the Agent of Elixir's Registry examples: a server holding
// a number.
type counter struct {
	server.Defaults
	n int
}

type incr struct{}
type read struct{}

func (c *counter) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	if _, ok := req.(incr); ok {
		c.n++
	}
	return c.n, nil
}

// Naming a process by any key of a unique registry (Elixir's
// {:via, Registry, {Registry.ViaTest, "agent"}}).
func Example() {
	ctx := context.Background()
	node := gotp.NewNode(gotp.Options{})
	defer node.Stop(ctx)

	reg, _ := registry.Start[string, struct{}](ctx, node, registry.Options{}, gotp.Named("via_test"))
	name := reg.Via("agent")

	first, _ := server.Start(ctx, node, &counter{}, server.WithVia(name))
	v, _ := server.Call[int](ctx, node, name, read{})
	fmt.Println(v)
	server.Call[int](ctx, node, name, incr{})
	v, _ = server.Call[int](ctx, node, name, read{})
	fmt.Println(v)

	_, err := server.Start(ctx, node, &counter{}, server.WithVia(name))
	var started *server.AlreadyStartedError
	fmt.Println(errors.As(err, &started) && started.PID == first)
	// Output:
	// 0
	// 1
	// true
}

// A dispatcher: entries carry a handler, and the dispatch callback reports
// the handlers' failures instead of failing with them.
func Example_dispatcher() {
	ctx := context.Background()
	node := gotp.NewNode(gotp.Options{})
	defer node.Stop(ctx)

	type handler func(pid gotp.PID) error
	reg, _ := registry.Start[string, handler](ctx, node, registry.Options{Kind: registry.Duplicate})

	registered := make(chan struct{})
	node.Spawn(func(p *gotp.Process) error {
		reg.Register(p, "hello", func(gotp.PID) error { fmt.Println("inspected"); return nil })
		reg.Register(p, "hello", func(gotp.PID) error { return errors.New("bad handler") })
		reg.Register(p, "hello", func(gotp.PID) error { panic("worse handler") })
		close(registered)
		_, err := p.Receive(context.Background()) // stay registered
		return err
	})
	<-registered

	call := func(h handler, pid gotp.PID) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v", v)
			}
		}()
		return h(pid)
	}
	var failures []string
	reg.Dispatch("hello", func(entries []registry.Entry[handler]) {
		for _, e := range entries {
			if err := call(e.Value, e.PID); err != nil {
				failures = append(failures, "dispatch failed: "+err.Error())
			}
		}
	})
	slices.Sort(failures)
	for _, f := range failures {
		fmt.Println(f)
	}
	// Output:
	// inspected
	// dispatch failed: bad handler
	// dispatch failed: panic: worse handler
}

// Publish/subscribe across partitions: subscribers (handler-mode
// processes, which hold no goroutine while idle) register under a topic,
// each in the partition of its process; a publisher dispatches a message
// to every one of them, with one call per partition holding subscribers,
// made in parallel, each sending through a gotp.Batch so that the
// subscribers it wakes are handled together.
func Example_pubSub() {
	ctx := context.Background()
	node := gotp.NewNode(gotp.Options{})
	defer node.Stop(ctx)

	type broadcast struct{ text string }
	reg, _ := registry.Start[string, struct{}](ctx, node, registry.Options{
		Kind:       registry.Duplicate,
		Partitions: 4,
	})

	got := make(chan string)
	for i := range 4 {
		node.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, m any) (bool, error) {
			got <- fmt.Sprintf("subscriber %d got %q", i, m.(broadcast).text)
			return false, nil
		}), func(p *gotp.Process) error {
			return reg.Register(p, "hello", struct{}{})
		})
	}

	reg.Dispatch("hello", func(entries []registry.Entry[struct{}]) {
		node.Batch(func(b *gotp.Batch) {
			for _, e := range entries {
				b.Send(e.PID, broadcast{"world"})
			}
		})
	})
	var lines []string
	for range 4 {
		lines = append(lines, <-got)
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// subscriber 0 got "world"
	// subscriber 1 got "world"
	// subscriber 2 got "world"
	// subscriber 3 got "world"
}

// Matching values by shape: the examples of Elixir's Registry.match/4.
func ExampleRegistry_Match() {
	ctx := context.Background()
	node := gotp.NewNode(gotp.Options{})
	defer node.Stop(ctx)

	type value struct {
		N    int
		Atom string
		M    int
	}
	reg, _ := registry.Start[string, value](ctx, node, registry.Options{Kind: registry.Duplicate})
	done := make(chan struct{})
	node.Spawn(func(p *gotp.Process) error {
		reg.Register(p, "hello", value{1, "atom", 1})
		reg.Register(p, "hello", value{2, "atom", 2})
		reg.Register(p, "hello", value{3, "atom", 4})
		show := func(es []registry.Entry[value]) {
			var vs []string
			for _, e := range es {
				vs = append(vs, fmt.Sprint(e.Value))
			}
			slices.Sort(vs)
			fmt.Println(vs)
		}
		show(reg.Match("hello", registry.Tuple(registry.Eq(1), registry.Any(), registry.Any())))
		show(reg.Match("hello", registry.Tuple(registry.Any(), registry.Eq("atom"), registry.Any())))
		show(reg.Match("hello", registry.Tuple(registry.Var("x"), registry.Any(), registry.Var("x"))))
		show(reg.MatchFunc("hello", func(v value) bool { return v.N > 1 }))
		fmt.Println(reg.Keys(p.Self()))
		close(done)
		return nil
	})
	<-done
	// Output:
	// [{1 atom 1}]
	// [{1 atom 1} {2 atom 2} {3 atom 4}]
	// [{1 atom 1} {2 atom 2}]
	// [{2 atom 2} {3 atom 4}]
	// [hello hello hello]
}

// Elixir's update_value: the new and the old value.
func ExampleRegistry_UpdateValue() {
	ctx := context.Background()
	node := gotp.NewNode(gotp.Options{})
	defer node.Stop(ctx)

	reg, _ := registry.Start[string, int](ctx, node, registry.Options{})
	done := make(chan struct{})
	node.Spawn(func(p *gotp.Process) error {
		defer close(done)
		reg.Register(p, "hello", 1)
		newV, oldV, err := reg.UpdateValue(p, "hello", func(v int) int { return v + 1 })
		fmt.Println(newV, oldV, err)
		fmt.Println(reg.Lookup("hello")[0].Value)
		_, _, err = reg.UpdateValue(p, "world", func(v int) int { return v + 1 })
		fmt.Println(err)
		return nil
	})
	<-done
	// Output:
	// 2 1 <nil>
	// 2
	// registry: key not held by this process
}
