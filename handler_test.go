package gotp_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestProcessContextCancelledAtExit(t *testing.T) {
	n := gotptest.NewNode(t)
	ctxs := make(chan context.Context, 1)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		ctxs <- p.Context()
		<-p.Context().Done() // returns once killed
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := gotptest.Recv(t, ctxs)
	if ctx.Err() != nil {
		t.Fatal("context done while the process lives")
	}
	n.Exit(pid, errBoom)
	gotptest.Recv(t, ctx.Done())
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("ctx.Err = %v", ctx.Err())
	}

	// A process that returns normally cancels its context too, and a
	// Context asked for after the exit is already done.
	var proc *gotp.Process
	_, res := run(t, n, func(p *gotp.Process) context.Context { proc = p; return p.Context() })
	ctx = gotptest.Recv(t, res)
	gotptest.Recv(t, ctx.Done())
	gotptest.Recv(t, proc.Done())
	if proc.Context().Err() == nil {
		t.Fatal("Context after exit is not done")
	}

	// Handler mode.
	hctx := make(chan context.Context, 1)
	h, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		hctx <- p.Context()
		return false, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Send(h, "x")
	ctx = gotptest.Recv(t, hctx)
	n.Exit(h, gotp.ErrKill)
	gotptest.Recv(t, ctx.Done())
}

// recorder is a Handler that records what it sees.
type recorder struct {
	mu   sync.Mutex
	log  []any
	each func(p *gotp.Process, msg any) (bool, error)
}

func (r *recorder) HandleMessage(p *gotp.Process, msg any) (bool, error) {
	r.mu.Lock()
	r.log = append(r.log, msg)
	r.mu.Unlock()
	if r.each != nil {
		return r.each(p, msg)
	}
	return false, nil
}

func (r *recorder) snapshot() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.log...)
}

func TestSpawnHandlerRunsPerMessageInOrder(t *testing.T) {
	n := gotptest.NewNode(t)
	done := make(chan struct{})
	const count = 5000
	r := &recorder{each: func(p *gotp.Process, msg any) (bool, error) {
		if msg == count-1 {
			close(done)
		}
		return false, nil
	}}
	pid, err := n.SpawnHandler(r, nil, gotp.Behaviour("test"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		n.Send(pid, i)
	}
	gotptest.Recv(t, done)
	for i, m := range r.snapshot() {
		if m != i {
			t.Fatalf("message %d handled as %v", i, m)
		}
	}
	in, _ := n.ProcessInfo(pid)
	if in.Handled != count || !in.Handler || in.Behaviour != "test" {
		t.Fatalf("info = %+v", in)
	}
}

func TestSpawnHandlerInitRunsFirst(t *testing.T) {
	n := gotptest.NewNode(t)
	pids := make(chan gotp.PID)
	release := make(chan struct{})
	done := make(chan struct{})
	r := &recorder{each: func(p *gotp.Process, msg any) (bool, error) {
		if msg == "last" {
			close(done)
		}
		return false, nil
	}}
	go func() {
		pid := <-pids
		n.Send(pid, "from outside, during init")
		close(release)
	}()
	pid, err := n.SpawnHandler(r, func(p *gotp.Process) error {
		p.Send(p.Self(), "from init")
		pids <- p.Self()
		<-release
		r.mu.Lock()
		r.log = append(r.log, "init done")
		r.mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Send(pid, "last")
	gotptest.Recv(t, done)
	want := []any{"init done", "from init", "from outside, during init", "last"}
	if got := r.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order %q, want %q", got, want)
	}
}

func TestSpawnHandlerInitFailure(t *testing.T) {
	n := gotptest.NewNode(t)
	trapperSink := gotptest.NewSink(t, n, gotp.TrapExit(true))
	trapper, got := trapperSink.PID(), trapperSink.C()
	handled := make(chan any, 1)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { handled <- msg; return false, nil })
	for _, tc := range []struct {
		name string
		init func(p *gotp.Process) error
		is   func(error) bool
	}{
		{"error", func(p *gotp.Process) error { p.Send(p.Self(), "queued"); return errBoom }, func(err error) bool { return err == errBoom }},
		{"panic", func(p *gotp.Process) error { p.Send(p.Self(), "queued"); panic("init") }, func(err error) bool {
			pe, ok := errors.AsType[*gotp.PanicError](err)
			return ok && pe.Value == "init" && len(pe.Stack) > 0
		}},
	} {
		before := n.ProcessCount()
		var self gotp.PID
		pid, err := n.SpawnHandler(h, func(p *gotp.Process) error {
			self = p.Self()
			return tc.init(p)
		}, gotp.Named("h"), gotp.LinkTo(trapper))
		if !tc.is(err) || !pid.IsZero() {
			t.Fatalf("%s: SpawnHandler = %v, %v", tc.name, pid, err)
		}
		if n.ProcessCount() != before || n.IsAlive(self) {
			t.Fatalf("%s: a process is left behind", tc.name)
		}
		if _, ok := n.Whereis("h"); ok {
			t.Fatalf("%s: the name is still held", tc.name)
		}
		// The linked process learns of it as of any exit.
		if m := gotptest.Recv(t, got).(gotp.Exit); m.From != self || !tc.is(m.Reason) {
			t.Fatalf("%s: linked process got %#v", tc.name, m)
		}
	}
	select {
	case m := <-handled:
		t.Fatalf("the handler of a failed init ran with %v", m)
	default:
	}
}

func TestHandlerPanicAndStop(t *testing.T) {
	n := gotptest.NewNode(t)
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		switch m := msg.(type) {
		case string:
			panic(m)
		case error:
			return true, m
		case nil:
			return true, nil
		}
		return false, nil
	})
	for _, tc := range []struct {
		msg any
		is  func(error) bool
	}{
		{"handler bug", func(r error) bool {
			pe, ok := errors.AsType[*gotp.PanicError](r)
			return ok && pe.Value == "handler bug"
		}},
		{errBoom, func(r error) bool { return r == errBoom }},
		{nil, func(r error) bool { return r == nil }},
	} {
		pid, err := n.SpawnHandler(h, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := gotptest.Watch(t, n, pid)
		n.Send(pid, 1) // handled, does not stop
		n.Send(pid, tc.msg)
		n.Send(pid, 2) // never handled
		if r := gotptest.Recv(t, d); !tc.is(r) {
			t.Fatalf("after %v: reason %v", tc.msg, r)
		}
	}
}

func TestHandlerTrapsExits(t *testing.T) {
	n := gotptest.NewNode(t)
	r := &recorder{}
	done := make(chan struct{})
	r.each = func(p *gotp.Process, msg any) (bool, error) {
		if _, ok := msg.(gotp.Exit); ok {
			close(done)
		}
		return false, nil
	}
	h, err := n.SpawnHandler(r, nil, gotp.TrapExit(true))
	if err != nil {
		t.Fatal(err)
	}
	child := waiter(t, n, gotp.LinkTo(h))
	n.Send(child, errBoom)
	gotptest.Recv(t, done)
	if got := r.snapshot(); len(got) != 1 || got[0] != (gotp.Exit{From: child, Reason: errBoom}) {
		t.Fatalf("handled %v", got)
	}
	// ErrKill still kills it, and a killed idle handler needs no goroutine to die.
	d := gotptest.Watch(t, n, h)
	n.Exit(h, gotp.ErrKill)
	if r := gotptest.Recv(t, d); r != gotp.ErrKilled {
		t.Fatalf("reason %v", r)
	}
}

func TestIdleHandlerProcessesHoldNoGoroutine(t *testing.T) {
	n := gotptest.NewNode(t)
	const count = 1000
	var wg sync.WaitGroup
	h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { wg.Done(); return false, nil })
	before := runtime.NumGoroutine()
	pids := make([]gotp.PID, count)
	for i := range pids {
		pid, err := n.SpawnHandler(h, func(*gotp.Process) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
	}
	if g := runtime.NumGoroutine() - before; g > count/10 {
		t.Fatalf("%d idle handler processes added %d goroutines", count, g)
	}
	// Each handles a message, then goes idle again and lets its goroutine go.
	wg.Add(count)
	for _, pid := range pids {
		n.Send(pid, "work")
	}
	wg.Wait()
	gotptest.Eventually(t, "handlers to go idle", func() bool {
		for _, pid := range pids {
			if in, _ := n.ProcessInfo(pid); in.Status != gotp.StatusWaiting || in.Handled != 1 {
				return false
			}
		}
		return true
	})
	gotptest.Eventually(t, "handler goroutines to end", func() bool { return runtime.NumGoroutine()-before <= count/10 })
	if n.ProcessCount() < count {
		t.Fatalf("ProcessCount = %d", n.ProcessCount())
	}
}
