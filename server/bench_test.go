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
