package gotp_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// TestBatchDeliversToEveryKind: a Batch delivers to handler, resident and
// function processes and drops messages to dead or unknown PIDs; handler
// processes start only when the Batch's function has returned.
func TestBatchDeliversToEveryKind(t *testing.T) {
	n := gotptest.NewNode(t)
	got := make(chan string, 100)
	forward := func(name string) gotp.Handler {
		return gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			got <- fmt.Sprint(name, ":", msg)
			return false, nil
		})
	}
	var handlers []gotp.PID
	for i := range 5 {
		pid, err := n.SpawnHandler(forward(fmt.Sprint("h", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		handlers = append(handlers, pid)
	}
	resident, _ := n.SpawnHandler(forward("r"), nil, gotp.Resident())
	fn, _ := n.Spawn(func(p *gotp.Process) error {
		for {
			msg, err := p.Receive(p.Context())
			if err != nil {
				return nil
			}
			got <- fmt.Sprint("f:", msg)
		}
	})
	dead, _ := n.SpawnHandler(forward("dead"), nil)
	down := gotptest.Watch(t, n, dead)
	n.Exit(dead, gotp.ErrKill)
	gotptest.Recv(t, down)

	n.Batch(func(b *gotp.Batch) {
		for _, pid := range handlers {
			b.Send(pid, 1)
			b.Send(pid, 2)
		}
		b.Send(resident, 1)
		b.Send(fn, 1)
		b.Send(dead, 1)
		b.Send(gotp.NewPID(n.Name(), n.Creation(), 1<<60), 1)
		b.Send(gotp.PID{}, 1)
		// Function and resident processes may already have run; handler
		// processes wait for the end of the batch.
		for range 2 {
			if m := gotptest.Recv(t, got); m != "r:1" && m != "f:1" {
				t.Fatalf("%q handled before the batch ended", m)
			}
		}
	})
	want := map[string]bool{}
	for i := range handlers {
		want[fmt.Sprintf("h%d:1", i)] = true
		want[fmt.Sprintf("h%d:2", i)] = true
	}
	last := map[string]string{}
	for range len(want) {
		m := gotptest.Recv(t, got)
		if !want[m] {
			t.Fatalf("unexpected %q", m)
		}
		delete(want, m)
		name := m[:2]
		if m[3:] == "2" && last[name] != name+":1" {
			t.Fatalf("%s handled 2 before 1", name)
		}
		last[name] = m
	}
	select {
	case m := <-got:
		t.Fatalf("extra message %q", m)
	default:
	}
}

// TestBatchOrderAndExactlyOnce: concurrent batches and plain sends to the
// same handler processes; every message is handled exactly once, and each
// sender's messages to a process arrive in the order sent.
func TestBatchOrderAndExactlyOnce(t *testing.T) {
	n := gotptest.NewNode(t)
	const procs, senders, rounds = 300, 4, 40
	type seq struct{ sender, i int }
	var handled atomic.Int64
	var bad atomic.Value
	pids := make([]gotp.PID, procs)
	for j := range pids {
		last := make([]int, senders)
		for s := range last {
			last[s] = -1
		}
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			m := msg.(seq)
			if m.i != last[m.sender]+1 {
				bad.Store(fmt.Sprintf("sender %d: got %d after %d", m.sender, m.i, last[m.sender]))
			}
			last[m.sender] = m.i
			handled.Add(1)
			return false, nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
		pids[j] = pid
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range rounds {
				if s%2 == 0 || i%3 == 0 {
					n.Batch(func(b *gotp.Batch) {
						for _, pid := range pids {
							b.Send(pid, seq{s, i})
						}
					})
				} else {
					for _, pid := range pids {
						n.Send(pid, seq{s, i})
					}
				}
			}
		})
	}
	wg.Wait()
	want := int64(procs * senders * rounds)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for handled.Load() < want {
			runtime.Gosched()
		}
	}()
	gotptest.Recv(t, done)
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if h := handled.Load(); h != want {
		t.Fatalf("handled %d, want %d", h, want)
	}
}

// TestBatchBlockedHandlersDoNotHoldBackOthers: more processes block in
// their handlers than a batch has workers; the others are still handled
// (the stall check adds workers), and then the blocked ones finish.
func TestBatchBlockedHandlersDoNotHoldBackOthers(t *testing.T) {
	n := gotptest.NewNode(t)
	blockers := runtime.GOMAXPROCS(0) + 2
	const chunk = 32 // at least the batch's chunk: one blocker per chunk
	total := blockers * chunk * 2
	release := make(chan struct{})
	var others sync.WaitGroup
	var blocked sync.WaitGroup
	pids := make([]gotp.PID, total)
	for i := range pids {
		isBlocker := i%chunk == 0 && i/chunk < blockers
		if isBlocker {
			blocked.Add(1)
		} else {
			others.Add(1)
		}
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			if isBlocker {
				<-release
				blocked.Done()
			} else {
				others.Done()
			}
			return false, nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
	}
	n.Batch(func(b *gotp.Batch) {
		for _, pid := range pids {
			b.Send(pid, "go")
		}
	})
	othersDone := make(chan struct{})
	go func() { others.Wait(); close(othersDone) }()
	gotptest.Recv(t, othersDone)
	close(release)
	blockedDone := make(chan struct{})
	go func() { blocked.Wait(); close(blockedDone) }()
	gotptest.Recv(t, blockedDone)
}

// TestBatchFunctionPanics: messages sent before the function panicked are
// still handled, and the panic goes on to the caller; a Batch kept past
// its function panics when used.
func TestBatchFunctionPanics(t *testing.T) {
	n := gotptest.NewNode(t)
	got := make(chan any, 10)
	pids := make([]gotp.PID, 4)
	for i := range pids {
		pids[i], _ = n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			got <- msg
			return false, nil
		}), nil)
	}
	var kept *gotp.Batch
	func() {
		defer func() {
			if v := recover(); v != "stop here" {
				t.Fatalf("recovered %v", v)
			}
		}()
		n.Batch(func(b *gotp.Batch) {
			kept = b
			for _, pid := range pids {
				b.Send(pid, "sent")
			}
			panic("stop here")
		})
	}()
	for range pids {
		if m := gotptest.Recv(t, got); m != "sent" {
			t.Fatalf("got %v", m)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a Batch used after its function returned did not panic")
		}
	}()
	kept.Send(pids[0], "late")
}

// TestBatchSameProcessManyTimes: a batch that sends to the same handler
// processes many times each handles every message once, in order, and
// never runs one process's handler on two goroutines at once.
func TestBatchSameProcessManyTimes(t *testing.T) {
	n := gotptest.NewNode(t)
	const procs, sends = 70, 200 // more than two chunks of processes
	var handled sync.WaitGroup
	handled.Add(procs * sends)
	var bad atomic.Value
	pids := make([]gotp.PID, procs)
	for j := range pids {
		next := 0
		var busy atomic.Bool
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			if busy.Swap(true) {
				bad.Store(fmt.Sprintf("process %d: handler entered twice at once", j))
			}
			if msg != next {
				bad.Store(fmt.Sprintf("process %d: got %v, want %d", j, msg, next))
			}
			next++
			busy.Store(false)
			handled.Done()
			return false, nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
		pids[j] = pid
	}
	n.Batch(func(b *gotp.Batch) {
		for i := range sends {
			for _, pid := range pids {
				b.Send(pid, i)
			}
		}
	})
	done := make(chan struct{})
	go func() { handled.Wait(); close(done) }()
	gotptest.Recv(t, done)
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	for _, pid := range pids {
		if in, _ := n.ProcessInfo(pid); in.Handled != sends {
			t.Fatalf("%v handled %d, want %d", pid, in.Handled, sends)
		}
	}
}

// TestBatchToProcessRunningInline: a batch that sends to a process whose
// handler runs inline leaves it to RunInline's end, which hands the
// message to the process's own goroutine; the other processes of the batch
// are handled meanwhile.
func TestBatchToProcessRunningInline(t *testing.T) {
	for _, resident := range []bool{false, true} {
		n := gotptest.NewNode(t)
		entered := make(chan struct{})
		release := make(chan struct{})
		got := make(chan any, 10)
		opts := []gotp.SpawnOption{gotp.AllowInline()}
		if resident {
			opts = append(opts, gotp.Resident())
		}
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			if msg == "inline" {
				close(entered)
				<-release
			}
			got <- msg
			return false, nil
		}), nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		others := make(chan any, 10)
		var pids []gotp.PID
		for range 5 {
			q, _ := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
				others <- msg
				return false, nil
			}), nil)
			pids = append(pids, q)
		}
		ran := make(chan bool, 1)
		go func() { ran <- n.RunInline(pid, "inline") }()
		gotptest.Recv(t, entered)
		n.Batch(func(b *gotp.Batch) {
			b.Send(pid, "batch 1")
			for _, q := range pids {
				b.Send(q, "other")
			}
			b.Send(pid, "batch 2")
		})
		for range pids {
			gotptest.Recv(t, others)
		}
		if n.RunInline(pid, "second inline") {
			t.Fatal("RunInline ran a process that is already running inline")
		}
		close(release)
		if !gotptest.Recv(t, ran) {
			t.Fatal("RunInline = false")
		}
		for _, want := range []string{"inline", "batch 1", "batch 2"} {
			if m := gotptest.Recv(t, got); m != want {
				t.Fatalf("resident=%v: handled %v, want %v", resident, m, want)
			}
		}
	}
}

// TestBatchProcessesKilledBeforeFlush: processes a batch woke and that die
// before its function returns are not handled, and the batch's goroutines
// end (goleak checks at the end of the package).
func TestBatchProcessesKilledBeforeFlush(t *testing.T) {
	for _, procs := range []int{2, 100} {
		n := gotptest.NewNode(t)
		var handled atomic.Int64
		pids := make([]gotp.PID, procs)
		for i := range pids {
			pids[i], _ = n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
				handled.Add(1)
				return false, nil
			}), nil)
		}
		n.Batch(func(b *gotp.Batch) {
			for _, pid := range pids {
				b.Send(pid, "x")
			}
			for _, pid := range pids {
				n.Exit(pid, gotp.ErrKill)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), gotptest.Timeout)
		if err := n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if h := handled.Load(); h != 0 {
			t.Fatalf("%d messages of killed processes handled", h)
		}
	}
}

// TestBatchSendDoesNotYield: a Batch's Send never yields the processor, so
// a broadcast runs ahead of the receivers it wakes. With one processor, no
// function process woken by the batch runs before its function returns;
// then every one gets its message. The scheduler also preempts a goroutine
// that has run for 10ms (a broadcast under -race on a loaded machine may
// take that long), which lets receivers run too: the broadcast is tried a
// few times, and a Send that yields fails every try.
func TestBatchSendDoesNotYield(t *testing.T) {
	n := gotptest.NewNode(t)
	const procs = 600 // several times what the old yield interval woke
	const tries = 10
	var got atomic.Int64
	pids := make([]gotp.PID, procs)
	for i := range pids {
		pid, err := n.Spawn(func(p *gotp.Process) error {
			for {
				if _, err := p.Receive(context.Background()); err != nil {
					return nil
				}
				got.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var early []int64
	for try := 1; try <= tries; try++ {
		for _, pid := range pids { // every receiver parked in Receive
			for {
				if in, _ := n.ProcessInfo(pid); in.Status == gotp.StatusWaiting {
					break
				}
				runtime.Gosched()
			}
		}
		before := got.Load()
		var ran int64
		n.Batch(func(b *gotp.Batch) {
			for _, pid := range pids {
				b.Send(pid, "hello")
			}
			ran = got.Load() - before
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for got.Load() != int64(try*procs) {
				runtime.Gosched()
			}
		}()
		gotptest.Recv(t, done)
		if ran == 0 {
			return
		}
		early = append(early, ran)
	}
	t.Fatalf("receivers ran before the batch's function returned, in each of %d tries (%v): Send yielded", tries, early)
}
