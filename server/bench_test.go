package server_test

import (
	"context"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

type echo struct{ server.Defaults }

func (echo) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) { return req, nil }

// BenchmarkCallRoundTrip measures one Call to an idle server and back, from
// a plain goroutine.
func BenchmarkCallRoundTrip(b *testing.B) {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(ctx)
	pid, _ := server.Start(ctx, n, echo{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := server.Call[int](ctx, n, pid, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkCallRoundTripInline is BenchmarkCallRoundTrip to a server
// started with InlineCalls: HandleCall runs on the caller's goroutine.
func BenchmarkCallRoundTripInline(b *testing.B) {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(ctx)
	pid, _ := server.Start(ctx, n, echo{}, server.InlineCalls())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := server.Call[int](ctx, n, pid, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkCallBaselineChannel is the same round trip over two bare
// channels to a goroutine, the floor a call cannot beat.
func BenchmarkCallBaselineChannel(b *testing.B) {
	req, rep := make(chan int), make(chan int)
	go func() {
		for v := range req {
			rep <- v
		}
	}()
	defer close(req)
	b.ReportAllocs()
	for b.Loop() {
		req <- 1
		<-rep
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// fwd is a server that answers a call with its target's answer, calling
// it as itself (p) or through the node, as byNode says.
type fwd struct {
	server.Defaults
	to     gotp.PID
	byNode bool
}

func (f *fwd) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if f.byNode {
		return server.Call[int](context.Background(), p.Node(), f.to, req)
	}
	return server.Call[int](context.Background(), p, f.to, req)
}

// BenchmarkCallFromServer measures a call made by a server to another
// (the caller waits on the relay, which calls echo): with the relay
// passing itself as the caller ("process", which takes part in call-cycle
// detection) or its node ("node", which does not), so that the two differ
// by what the detection costs a call between servers. Both servers take
// inline calls in the inline variants.
func BenchmarkCallFromServer(b *testing.B) {
	for _, inline := range []bool{false, true} {
		for _, byNode := range []bool{true, false} {
			name := map[bool]string{true: "node", false: "process"}[byNode]
			if inline {
				name += "-inline"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				n := gotp.NewNode(gotp.Options{})
				defer n.Stop(ctx)
				var opts []server.Option
				if inline {
					opts = append(opts, server.InlineCalls())
				}
				target, _ := server.Start(ctx, n, echo{}, opts...)
				relay, _ := server.Start(ctx, n, &fwd{to: target, byNode: byNode}, opts...)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := server.Call[int](ctx, n, relay, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			})
		}
	}
}
