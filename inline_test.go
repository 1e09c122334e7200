package gotp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// TestRunInlineRunsHandlerBeforeReturning: on an idle AllowInline process
// RunInline has handled the message when it returns true (the race
// detector checks that the handler's write happens before the read), and
// the process goes on as usual afterwards.
func TestRunInlineRunsHandlerBeforeReturning(t *testing.T) {
	n := gotptest.NewNode(t)
	var seen []any // written by the handler, read by the test: no lock
	later := make(chan any, 1)
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "later" {
			later <- msg
			return false, nil
		}
		seen = append(seen, msg)
		return false, nil
	}), nil, gotp.AllowInline())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if !n.RunInline(pid, i) {
			t.Fatalf("RunInline(%d) on an idle process = false", i)
		}
		if len(seen) != i+1 || seen[i] != i {
			t.Fatalf("after RunInline(%d): seen %v", i, seen)
		}
	}
	if in, _ := n.ProcessInfo(pid); in.Handled != 3 || in.Status != gotp.StatusWaiting {
		t.Fatalf("info after inline runs: handled %d, status %s", in.Handled, in.Status)
	}
	n.Send(pid, "later")
	gotptest.Recv(t, later)
}

// TestRunInlineDeclines: RunInline returns false, and delivers nothing,
// for a process that did not allow it, a function process, a process that
// is handling a message or has one waiting, a dead process and an unknown
// PID.
func TestRunInlineDeclines(t *testing.T) {
	n := gotptest.NewNode(t)
	got := make(chan any, 10)
	forward := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		got <- msg
		return false, nil
	})
	plain, _ := n.SpawnHandler(forward, nil)
	if n.RunInline(plain, "x") {
		t.Fatal("RunInline ran a process spawned without AllowInline")
	}
	fn, _ := n.Spawn(func(p *gotp.Process) error {
		_, err := p.Receive(p.Context())
		return err
	}, gotp.AllowInline())
	if n.RunInline(fn, "x") {
		t.Fatal("RunInline ran a function process")
	}

	// Busy: the handler blocks on release while handling "block".
	release := make(chan struct{})
	entered := make(chan struct{})
	busy, _ := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "block" {
			close(entered)
			<-release
		}
		got <- msg
		return false, nil
	}), nil, gotp.AllowInline())
	n.Send(busy, "block")
	gotptest.Recv(t, entered)
	if n.RunInline(busy, "inline") {
		t.Fatal("RunInline ran a process that is handling a message")
	}
	n.Send(busy, "queued")
	close(release)
	if a, b := gotptest.Recv(t, got), gotptest.Recv(t, got); a != "block" || b != "queued" {
		t.Fatalf("busy process handled %v, %v; want block, queued (and not the declined message)", a, b)
	}

	dead, _ := n.SpawnHandler(forward, nil, gotp.AllowInline())
	down := gotptest.Watch(t, n, dead)
	n.Exit(dead, errBoom)
	gotptest.Recv(t, down)
	if n.RunInline(dead, "x") {
		t.Fatal("RunInline ran a dead process")
	}
	if n.RunInline(gotp.NewPID(n.Name(), n.Creation(), 1<<60), "x") {
		t.Fatal("RunInline ran an unknown PID")
	}
	select {
	case m := <-got:
		t.Fatalf("a declined message was delivered: %v", m)
	default:
	}
}

// TestRunInlineMessagesArrivingMeanwhile: messages sent while the handler
// runs inline wait in the mailbox and are then handled in order by the
// process's own goroutine.
func TestRunInlineMessagesArrivingMeanwhile(t *testing.T) {
	for _, resident := range []bool{false, true} {
		n := gotptest.NewNode(t)
		got := make(chan any, 10)
		opts := []gotp.SpawnOption{gotp.AllowInline()}
		if resident {
			opts = append(opts, gotp.Resident())
		}
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			if msg == "first" {
				p.Send(p.Self(), "second")
				n.Send(p.Self(), "third")
			}
			got <- msg
			return false, nil
		}), nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if !n.RunInline(pid, "first") {
			t.Fatal("RunInline on an idle process = false")
		}
		for _, want := range []string{"first", "second", "third"} {
			if m := gotptest.Recv(t, got); m != want {
				t.Fatalf("resident=%v: handled %v, want %v", resident, m, want)
			}
		}
	}
}

// TestRunInlineStopAndPanic: a handler that stops or panics inline ends
// the process (monitors see the reason), never the caller.
func TestRunInlineStopAndPanic(t *testing.T) {
	n := gotptest.NewNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		switch msg {
		case "stop":
			return true, errBoom
		case "panic":
			panic("inline panic")
		}
		return false, nil
	})
	stopper, _ := n.SpawnHandler(h, nil, gotp.AllowInline())
	down := gotptest.Watch(t, n, stopper)
	if !n.RunInline(stopper, "stop") {
		t.Fatal("RunInline = false")
	}
	if r := gotptest.Recv(t, down); !errors.Is(r, errBoom) {
		t.Fatalf("stopped with %v", r)
	}
	if n.IsAlive(stopper) {
		t.Fatal("alive after its handler stopped it inline")
	}

	panicker, _ := n.SpawnHandler(h, nil, gotp.AllowInline(), gotp.Resident())
	down = gotptest.Watch(t, n, panicker)
	if !n.RunInline(panicker, "panic") {
		t.Fatal("RunInline = false")
	}
	var pe *gotp.PanicError
	if r := gotptest.Recv(t, down); !errors.As(r, &pe) || pe.Value != "inline panic" {
		t.Fatalf("panicked inline, exited with %v", r)
	}
}

// TestResidentProcess: a resident handler process handles every message on
// one goroutine of its own, is not reported as goroutine-less, and its
// goroutine ends with it however it ends (goleak checks at the end of the
// package).
func TestResidentProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	got := make(chan any, 100)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "stop" {
			return true, nil
		}
		got <- msg
		return false, nil
	})
	started := false
	pid, err := n.SpawnHandler(h, func(p *gotp.Process) error {
		started = true
		return nil
	}, gotp.Resident())
	if err != nil || !started {
		t.Fatalf("SpawnHandler: %v (init ran: %v)", err, started)
	}
	if in, _ := n.ProcessInfo(pid); in.Handler {
		t.Fatal("a resident process is reported as holding no goroutine")
	}
	for round := range 5 { // bursts, each drained before the next
		for i := range 10 {
			n.Send(pid, round*10+i)
		}
		for i := range 10 {
			if m := gotptest.Recv(t, got); m != round*10+i {
				t.Fatalf("handled %v, want %d", m, round*10+i)
			}
		}
	}
	down := gotptest.Watch(t, n, pid)
	n.Send(pid, "stop")
	if r := gotptest.Recv(t, down); r != nil {
		t.Fatalf("stopped with %v", r)
	}

	// Killed while idle, and failing in init.
	idle, _ := n.SpawnHandler(h, nil, gotp.Resident())
	down = gotptest.Watch(t, n, idle)
	n.Exit(idle, gotp.ErrKill)
	gotptest.Recv(t, down)
	if _, err := n.SpawnHandler(h, func(*gotp.Process) error { return errBoom }, gotp.Resident()); !errors.Is(err, errBoom) {
		t.Fatalf("init error: %v", err)
	}
}

// TestStopWaitsForInlineHandler: a handler running inline is the process
// running, on a goroutine that is not its own: Stop waits for it as for a
// handler on the process's goroutine, and returns its context's error if
// it outlasts it (here, for both kinds), instead of returning while the
// process's code still runs.
func TestStopWaitsForInlineHandler(t *testing.T) {
	for _, inline := range []bool{false, true} {
		n := gotp.NewNode(gotp.Options{Name: "stop-inline"})
		entered := make(chan struct{})
		release := make(chan struct{})
		returned := make(chan struct{})
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			close(entered)
			<-release
			return false, nil
		}), nil, gotp.AllowInline())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(returned)
			if !inline || !n.RunInline(pid, "run") {
				n.Send(pid, "run")
			}
		}()
		gotptest.Recv(t, entered)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = n.Stop(ctx)
		cancel()
		close(release)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("inline=%v: Stop while the handler runs = %v, want %v", inline, err, context.DeadlineExceeded)
		}
		gotptest.Recv(t, returned)
		ctx, cancel = context.WithTimeout(context.Background(), gotptest.Timeout)
		if err := n.Stop(ctx); err != nil {
			t.Errorf("second Stop: %v", err)
		}
		cancel()
	}
}

// TestRunInlineResidentKilled: a resident process killed while its handler
// runs inline is dead at once; the inline handler finishes, RunInline
// returns true, later messages are dropped, and the resident goroutine
// ends (goleak checks at the end of the package).
func TestRunInlineResidentKilled(t *testing.T) {
	n := gotptest.NewNode(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	got := make(chan any, 10)
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "inline" {
			close(entered)
			<-release
		}
		got <- msg
		return false, nil
	}), nil, gotp.AllowInline(), gotp.Resident())
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan bool, 1)
	go func() { ran <- n.RunInline(pid, "inline") }()
	gotptest.Recv(t, entered)
	n.Send(pid, "queued") // waits for the inline run, then dropped by the kill
	down := gotptest.Watch(t, n, pid)
	n.Exit(pid, gotp.ErrKill)
	if r := gotptest.Recv(t, down); !errors.Is(r, gotp.ErrKilled) {
		t.Fatalf("killed with %v", r)
	}
	n.Send(pid, "after")
	close(release)
	if !gotptest.Recv(t, ran) {
		t.Fatal("RunInline = false")
	}
	if m := gotptest.Recv(t, got); m != "inline" {
		t.Fatalf("handled %v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), gotptest.Timeout)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("a killed process handled %v", m)
	default:
	}
}
