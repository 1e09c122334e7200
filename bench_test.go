package gotp_test

// Benchmarks for W6 and W7 of ../shared/bench/WORKLOADS.md, each beside a
// bare-Go baseline measured in the same run. Targets are in
// ../shared/bench/ANCHORS.md. Run them with
//
//	go test -run '^$' -bench 'W6|W7|Baseline' -count 5 .
//
// The idle-memory benchmarks build 100,000 processes per iteration and
// report bytes per process as a metric; their ns/op is not meaningful.

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
)

func benchNode(b *testing.B) *gotp.Node {
	n := gotp.NewNode(gotp.Options{Name: "bench"})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			b.Error(err)
		}
	})
	return n
}

// waitEmpty waits until n has no processes left.
func waitEmpty(n *gotp.Node) {
	for n.ProcessCount() > 0 {
		runtime.Gosched()
	}
}

func noop(*gotp.Process) error { return nil }

// BenchmarkW6SpawnExit spawns b.N processes that return at once, and
// counts the time until every one of them has exited.
func BenchmarkW6SpawnExit(b *testing.B) {
	n := benchNode(b)
	b.ReportAllocs()
	start := time.Now()
	for range b.N {
		if _, err := n.Spawn(noop); err != nil {
			b.Fatal(err)
		}
	}
	waitEmpty(n)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "spawns/s")
}

// BenchmarkBaselineGoroutineSpawnExit is W6's baseline: a bare goroutine
// that returns at once, counted by a WaitGroup.
func BenchmarkBaselineGoroutineSpawnExit(b *testing.B) {
	var wg sync.WaitGroup
	b.ReportAllocs()
	start := time.Now()
	for range b.N {
		wg.Go(func() {})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "spawns/s")
}

const idleProcs = 100_000

// memNow returns heap-in-use plus stack-in-use, and Sys, after a GC.
func memNow() (inuse, sys uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, m.Sys
}

// idleBytes measures what count idle things cost: spawn builds them and
// returns once they are all idle, teardown ends them.
func idleBytes(b *testing.B, count int, spawn func(count int), teardown func()) {
	var inuse, sys float64
	for range b.N {
		b.StopTimer()
		in0, sys0 := memNow()
		b.StartTimer()
		spawn(count)
		b.StopTimer()
		in1, sys1 := memNow()
		inuse += float64(int64(in1)-int64(in0)) / float64(count)
		sys += float64(int64(sys1)-int64(sys0)) / float64(count)
		teardown()
		b.StartTimer()
	}
	b.ReportMetric(inuse/float64(b.N), "inuse-bytes/proc")
	b.ReportMetric(sys/float64(b.N), "sys-bytes/proc")
}

// BenchmarkW6IdleProcessBytes: 100,000 function processes waiting in
// Receive (with context.Background, as Erlang's receive without after).
func BenchmarkW6IdleProcessBytes(b *testing.B) {
	var n *gotp.Node
	idleBytes(b, idleProcs, func(count int) {
		n = gotp.NewNode(gotp.Options{Name: "bench"})
		var ready sync.WaitGroup
		ready.Add(count)
		for range count {
			_, err := n.Spawn(func(p *gotp.Process) error {
				ready.Done()
				_, err := p.Receive(context.Background())
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		ready.Wait()
		for _, pid := range n.Processes() { // every one parked in Receive
			for {
				if in, ok := n.ProcessInfo(pid); !ok || in.Status == gotp.StatusWaiting {
					break
				}
				runtime.Gosched()
			}
		}
	}, func() {
		if err := n.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkW6IdleHandlerBytes: 100,000 idle handler-mode processes, the
// shape of an idle gen_server.
func BenchmarkW6IdleHandlerBytes(b *testing.B) {
	var n *gotp.Node
	h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
	idleBytes(b, idleProcs, func(count int) {
		n = gotp.NewNode(gotp.Options{Name: "bench"})
		for range count {
			if _, err := n.SpawnHandler(h, nil); err != nil {
				b.Fatal(err)
			}
		}
	}, func() {
		if err := n.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkBaselineIdleGoroutineBytes: 100,000 bare goroutines parked on
// a channel receive.
func BenchmarkBaselineIdleGoroutineBytes(b *testing.B) {
	var stop chan struct{}
	var wg sync.WaitGroup
	idleBytes(b, idleProcs, func(count int) {
		stop = make(chan struct{})
		wg.Add(count)
		for range count {
			go func() {
				defer wg.Done()
				<-stop
			}()
		}
		for runtime.NumGoroutine() < count {
			runtime.Gosched()
		}
	}, func() {
		close(stop)
		wg.Wait()
	})
}

type ping struct{ from gotp.PID }

type pong struct{}

// BenchmarkW7PingPong: two processes exchange b.N round trips.
func BenchmarkW7PingPong(b *testing.B) {
	n := benchNode(b)
	ponger, err := n.Spawn(func(p *gotp.Process) error {
		var reply any = pong{}
		for {
			m, err := p.Receive(context.Background())
			if err != nil {
				return err
			}
			p.Send(m.(ping).from, reply)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	start := make(chan struct{})
	done := make(chan error)
	_, err = n.Spawn(func(p *gotp.Process) error {
		var req any = ping{p.Self()} // boxed once: the benchmark measures the runtime, not boxing
		<-start
		for range b.N {
			p.Send(ponger, req)
			if _, err := p.Receive(context.Background()); err != nil {
				done <- err
				return err
			}
		}
		done <- nil
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "roundtrips/s")
}

// BenchmarkBaselineChannelPingPong: two goroutines exchange b.N round trips
// over two unbuffered channels.
func BenchmarkBaselineChannelPingPong(b *testing.B) {
	req, resp := make(chan struct{}), make(chan struct{})
	go func() {
		for range req {
			resp <- struct{}{}
		}
	}()
	defer close(req)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for range b.N {
		req <- struct{}{}
		<-resp
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "roundtrips/s")
}

const fanInSenders = 8

type fanMsg struct{ n int }

// BenchmarkW7FanIn: 8 sender processes send b.N messages in all to one
// receiver process; the time runs until the receiver has taken them all.
func BenchmarkW7FanIn(b *testing.B) {
	n := benchNode(b)
	total := b.N / fanInSenders * fanInSenders
	if total == 0 {
		total = fanInSenders
	}
	done := make(chan struct{})
	sink, err := n.Spawn(func(p *gotp.Process) error {
		for range total {
			if _, err := p.Receive(context.Background()); err != nil {
				return err
			}
		}
		close(done)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	start := make(chan struct{})
	for range fanInSenders {
		_, err := n.Spawn(func(p *gotp.Process) error {
			var m any = fanMsg{1} // boxed once
			<-start
			for range total / fanInSenders {
				p.Send(sink, m)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	<-done
	b.ReportMetric(float64(total)/time.Since(t0).Seconds(), "msgs/s")
}

// BenchmarkBaselineChannelFanIn: 8 goroutines send b.N values in all on one
// buffered channel (capacity 1024) to one receiving goroutine.
func BenchmarkBaselineChannelFanIn(b *testing.B) {
	total := b.N / fanInSenders * fanInSenders
	if total == 0 {
		total = fanInSenders
	}
	ch := make(chan fanMsg, 1024)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range fanInSenders {
		wg.Go(func() {
			<-start
			for range total / fanInSenders {
				ch <- fanMsg{1}
			}
		})
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	for range total {
		<-ch
	}
	b.ReportMetric(float64(total)/time.Since(t0).Seconds(), "msgs/s")
	wg.Wait()
}
