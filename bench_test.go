package gotp_test

// Benchmarks for W6 and W7 (docs/bench/workloads.md), each beside a
// bare-Go baseline measured in the same run; the targets and the BEAM's
// figures are in BENCHMARKS.md. Run them with
//
//	go test -run '^$' -bench 'W6|W7|Baseline' -count 5 .
//
// The idle-memory benchmarks build 100,000 processes per iteration, each in
// a fresh child process, and report bytes per process as metrics; their
// ns/op is not meaningful. -benchtime 3x runs three children.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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

// The idle-memory benchmarks measure in a fresh child process (this test
// binary, running TestIdleChild): Go never frees a goroutine's descriptor,
// and keeps dead goroutines' stacks for reuse, so what earlier benchmarks
// left behind would make the deltas here meaningless.
const idleChildEnv = "GOTP_BENCH_IDLE_CHILD"

// idleBytes runs the child b.N times and reports its figures.
func idleBytes(b *testing.B, kind string) {
	var inuse, heap, stack float64
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), idleChildEnv+"="+kind)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		var h, s float64
		i := bytes.Index(out, []byte("idle-bytes "))
		if i < 0 {
			b.Fatalf("child printed no figures:\n%s", out)
		}
		if _, err := fmt.Sscanf(string(out[i:]), "idle-bytes %g %g", &h, &s); err != nil {
			b.Fatalf("child output: %v\n%s", err, out)
		}
		heap += h
		stack += s
		inuse += h + s
	}
	b.ReportMetric(inuse/float64(b.N), "bytes/proc")
	b.ReportMetric(heap/float64(b.N), "heap-bytes/proc")
	b.ReportMetric(stack/float64(b.N), "stack-bytes/proc")
}

// TestIdleChild is the child of the idle-memory benchmarks; it does nothing
// unless run by one of them. It builds idleProcs idle things of one kind
// and prints the growth of HeapInuse and StackInuse per thing.
func TestIdleChild(t *testing.T) {
	kind := os.Getenv(idleChildEnv)
	if kind == "" {
		t.Skip("run by the idle-memory benchmarks")
	}
	memNow := func() runtime.MemStats {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m
	}
	n := gotp.NewNode(gotp.Options{Name: "bench"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	m0 := memNow()
	switch kind {
	case "process": // function processes waiting in Receive, as Erlang's receive without after
		for range idleProcs {
			if _, err := n.Spawn(func(p *gotp.Process) error {
				_, err := p.Receive(context.Background())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, pid := range n.Processes() { // every one parked in Receive
			for {
				if in, ok := n.ProcessInfo(pid); !ok || in.Status == gotp.StatusWaiting {
					break
				}
				runtime.Gosched()
			}
		}
	case "process-ctx": // the same, receiving with the process's own context
		for range idleProcs {
			if _, err := n.Spawn(func(p *gotp.Process) error {
				_, err := p.Receive(p.Context())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, pid := range n.Processes() {
			for {
				if in, ok := n.ProcessInfo(pid); !ok || in.Status == gotp.StatusWaiting {
					break
				}
				runtime.Gosched()
			}
		}
	case "handler": // idle handler-mode processes, the shape of an idle gen_server
		h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
		for range idleProcs {
			if _, err := n.SpawnHandler(h, nil); err != nil {
				t.Fatal(err)
			}
		}
	case "handler-monitored", "handler-was-monitored":
		// Idle handler-mode processes each watched by a MonitorFunc, as a
		// registry watches the processes that hold its keys; or watched
		// once and no longer, as a server is after a call.
		h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
		down := func(gotp.Down) {}
		for range idleProcs {
			pid, err := n.SpawnHandler(h, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref := n.MonitorFunc(pid, down)
			if kind == "handler-was-monitored" && !n.Demonitor(ref, pid) {
				t.Fatal("the monitor was not active")
			}
		}
	case "goroutine": // bare goroutines parked on a channel receive
		base := runtime.NumGoroutine()
		for range idleProcs {
			wg.Go(func() { <-stop })
		}
		for runtime.NumGoroutine() < base+idleProcs {
			runtime.Gosched()
		}
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	m1 := memNow()
	heap := float64(int64(m1.HeapInuse)-int64(m0.HeapInuse)) / idleProcs
	stack := float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / idleProcs
	fmt.Printf("idle-bytes %.1f %.1f\n", heap, stack)
	close(stop)
	wg.Wait()
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkW6IdleProcessBytes: 100,000 function processes waiting in
// Receive. bytes/proc is HeapInuse plus StackInuse growth per process.
func BenchmarkW6IdleProcessBytes(b *testing.B) { idleBytes(b, "process") }

// BenchmarkW6IdleProcessCtxBytes: the same, waiting in
// Receive(p.Context()), the usual form in examples: the context costs a
// cancelCtx and the wait a second channel case.
func BenchmarkW6IdleProcessCtxBytes(b *testing.B) { idleBytes(b, "process-ctx") }

// BenchmarkW6IdleHandlerBytes: 100,000 idle handler-mode processes.
func BenchmarkW6IdleHandlerBytes(b *testing.B) { idleBytes(b, "handler") }

// BenchmarkW6IdleMonitoredHandlerBytes: 100,000 idle handler-mode
// processes, each watched by one MonitorFunc (a registered process).
func BenchmarkW6IdleMonitoredHandlerBytes(b *testing.B) { idleBytes(b, "handler-monitored") }

// BenchmarkW6IdleWasMonitoredHandlerBytes: 100,000 idle handler-mode
// processes, each watched by one MonitorFunc that has since been removed
// (a server after a call).
func BenchmarkW6IdleWasMonitoredHandlerBytes(b *testing.B) {
	idleBytes(b, "handler-was-monitored")
}

// BenchmarkBaselineIdleGoroutineBytes: 100,000 bare goroutines parked on
// a channel receive.
func BenchmarkBaselineIdleGoroutineBytes(b *testing.B) { idleBytes(b, "goroutine") }

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

// BenchmarkHandlerRoundTrip: a function process and a handler-mode echo
// process exchange b.N round trips. The handler process goes idle after
// each message, so every round trip starts its goroutine again: this is
// the runtime's share of a gen_server call.
func BenchmarkHandlerRoundTrip(b *testing.B) {
	n := benchNode(b)
	echo, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		p.Send(msg.(ping).from, pong{})
		return false, nil
	}), nil)
	if err != nil {
		b.Fatal(err)
	}
	start := make(chan struct{})
	done := make(chan error)
	_, err = n.Spawn(func(p *gotp.Process) error {
		var req any = ping{p.Self()}
		<-start
		for range b.N {
			p.Send(echo, req)
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
