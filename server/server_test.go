package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }

// kv is a small server used throughout: calls get/put/wait/crash, casts
// set values, info messages are recorded.
type kv struct {
	server.Defaults
	m         map[string]int
	waiting   []server.From
	infos     chan any
	terminate chan error
	initErr   error
	trap      bool
}

type get struct{ key string }
type put struct {
	key string
	val int
}
type deferred struct{}
type release struct{}
type crash struct{ err error }
type stopWith struct {
	reply any
	err   error
}
type panicNow struct{}

func newKV() *kv {
	return &kv{m: map[string]int{}, infos: make(chan any, 16), terminate: make(chan error, 1)}
}

func (s *kv) Init(_ context.Context, p *gotp.Process) error {
	if s.trap {
		p.TrapExit(true)
	}
	return s.initErr
}

func (s *kv) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case get:
		v, ok := s.m[r.key]
		if !ok {
			return errNotFound, nil
		}
		return v, nil
	case put:
		s.m[r.key] = r.val
		return "ok", nil
	case deferred:
		s.waiting = append(s.waiting, from)
		return server.NoReply, nil
	case crash:
		return nil, r.err
	case stopWith:
		return r.reply, r.err
	case panicNow:
		panic("boom")
	}
	return s.Defaults.HandleCall(p, from, req)
}

func (s *kv) HandleCast(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case put:
		s.m[m.key] = m.val
	case release:
		for _, f := range s.waiting {
			server.Reply(f, "released")
		}
		s.waiting = nil
	case crash:
		return m.err
	}
	return nil
}

func (s *kv) HandleInfo(p *gotp.Process, msg any) error {
	s.infos <- msg
	return nil
}

func (s *kv) Terminate(p *gotp.Process, reason error) {
	s.terminate <- reason
}

var errNotFound = errors.New("not found")

func TestCallCastInfo(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	pid, err := server.Start(gotptest.Context(t), n, s)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := server.Call[string](gotptest.Context(t), n, pid, put{"a", 1}); err != nil || got != "ok" {
		t.Fatalf("put = %q, %v", got, err)
	}
	server.Cast(n, pid, put{"b", 2})
	if got, err := server.Call[int](gotptest.Context(t), n, pid, get{"b"}); err != nil || got != 2 {
		t.Fatalf("get b = %d, %v (cast must be handled before the later call)", got, err)
	}
	if _, err := server.Call[int](gotptest.Context(t), n, pid, get{"zz"}); !errors.Is(err, errNotFound) {
		t.Fatalf("error reply: got %v, want errNotFound", err)
	}
	var ce *server.CallError
	if _, err := server.Call[int](gotptest.Context(t), n, pid, get{"zz"}); errors.As(err, &ce) {
		t.Fatalf("an error reply must not be a CallError: %v", err)
	}
	n.Send(pid, "hello")
	if got := <-s.infos; got != "hello" {
		t.Fatalf("info = %v", got)
	}
	if !n.IsAlive(pid) {
		t.Fatal("server died")
	}
}

func TestCallTypedReplyMismatch(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, _ := server.Start(gotptest.Context(t), n, newKV())
	_, err := server.Call[int](gotptest.Context(t), n, pid, put{"a", 1})
	var te *server.ReplyTypeError
	if !errors.As(err, &te) || te.Reply != "ok" {
		t.Fatalf("got %v, want ReplyTypeError", err)
	}
	v, err := server.Call[any](gotptest.Context(t), n, pid, get{"a"})
	if err != nil || v != 1 {
		t.Fatalf("Call[any] = %v, %v", v, err)
	}
}

func TestUnhandledCallRepliesError(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, _ := server.Start(gotptest.Context(t), n, newKV())
	if _, err := server.Call[any](gotptest.Context(t), n, pid, 42); !errors.Is(err, server.ErrUnhandled) {
		t.Fatalf("got %v, want ErrUnhandled", err)
	}
	if !n.IsAlive(pid) {
		t.Fatal("an unhandled call must not stop the server")
	}
}

func TestCallNoProc(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, _ := server.Start(gotptest.Context(t), n, newKV())
	if err := server.Stop(gotptest.Context(t), n, pid, nil); err != nil {
		t.Fatal(err)
	}
	_, err := server.Call[int](gotptest.Context(t), n, pid, get{"a"})
	var ce *server.CallError
	if !errors.As(err, &ce) || !errors.Is(err, gotp.ErrNoProc) || ce.Server != pid {
		t.Fatalf("got %v, want CallError noproc for %v", err, pid)
	}
	if _, err := server.Call[int](gotptest.Context(t), n, gotp.Name("nobody"), get{"a"}); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("unknown name: got %v", err)
	}
	if err := server.Stop(gotptest.Context(t), n, pid, nil); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("Stop of a dead server: got %v", err)
	}
}

func TestCallTimeoutAndLateReplyDropped(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	srv, _ := server.Start(gotptest.Context(t), n, s)

	result := make(chan error, 1)
	mailbox := make(chan int, 1)
	n.Spawn(func(p *gotp.Process) error {
		c, cancel := context.WithTimeout(p.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := server.Call[string](c, n, srv, deferred{})
		result <- err
		// Let the server answer now, then prove the late reply never
		// arrives in this process's mailbox.
		server.Cast(n, srv, release{})
		server.Call[string](p.Context(), n, srv, put{"sync", 1}) // the release is handled before this
		mailbox <- p.Info().MailboxLen
		return nil
	})
	err := <-result
	var ce *server.CallError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want CallError with DeadlineExceeded", err)
	}
	if got := <-mailbox; got != 0 {
		t.Fatalf("caller mailbox has %d messages after a late reply, want 0", got)
	}
}

func TestDeferredReply(t *testing.T) {
	n := gotptest.NewNode(t)
	srv, _ := server.Start(gotptest.Context(t), n, newKV())
	var wg sync.WaitGroup
	results := make(chan string, 3)
	for range 3 {
		wg.Go(func() {
			v, err := server.Call[string](gotptest.Context(t), n, srv, deferred{})
			if err != nil {
				t.Error(err)
			}
			results <- v
		})
	}
	// The calls are queued behind this one, so after it returns all three
	// deferred callers are waiting in the server.
	for {
		info, _ := n.ProcessInfo(srv)
		if info.Handled >= 3 && info.MailboxLen == 0 {
			break
		}
		time.Sleep(time.Millisecond) // polling the server's own counters: no signal to wait on
	}
	server.Cast(n, srv, release{})
	wg.Wait()
	close(results)
	for v := range results {
		if v != "released" {
			t.Fatalf("deferred reply = %q", v)
		}
	}
}

func TestServerDiesMidCall(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	srv, _ := server.Start(gotptest.Context(t), n, s)
	boom := errors.New("boom")
	_, err := server.Call[any](gotptest.Context(t), n, srv, crash{boom})
	var ce *server.CallError
	if !errors.As(err, &ce) || !errors.Is(err, boom) {
		t.Fatalf("got %v, want CallError wrapping the exit reason", err)
	}
	if r := <-s.terminate; !errors.Is(r, boom) {
		t.Fatalf("Terminate reason = %v", r)
	}

	// Killed while a call waits: the caller gets killed.
	s2 := newKV()
	srv2, _ := server.Start(gotptest.Context(t), n, s2)
	errc := make(chan error, 1)
	go func() {
		_, err := server.Call[string](gotptest.Context(t), n, srv2, deferred{})
		errc <- err
	}()
	for {
		if info, _ := n.ProcessInfo(srv2); info.Handled == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	n.Exit(srv2, gotp.ErrKill)
	if err := <-errc; !errors.Is(err, gotp.ErrKilled) {
		t.Fatalf("got %v, want killed", err)
	}
	select {
	case r := <-s2.terminate:
		t.Fatalf("Terminate ran on kill with %v", r)
	default:
	}
}

func TestStopWithReplySendsReplyFirst(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	srv, _ := server.Start(gotptest.Context(t), n, s)
	bye := errors.New("bye")
	got, err := server.Call[string](gotptest.Context(t), n, srv, stopWith{"last words", bye})
	if err != nil || got != "last words" {
		t.Fatalf("got %q, %v", got, err)
	}
	if r := <-s.terminate; r != bye {
		t.Fatalf("Terminate reason = %v", r)
	}
}

func TestPanicInCallback(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	srv, _ := server.Start(gotptest.Context(t), n, s)
	_, err := server.Call[any](gotptest.Context(t), n, srv, panicNow{})
	var pe *gotp.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("got %v, want PanicError with stack", err)
	}
	if r := <-s.terminate; !errors.As(r, &pe) {
		t.Fatalf("Terminate reason = %v, want the panic", r)
	}
}

func TestStopWaitsForTerminate(t *testing.T) {
	n := gotptest.NewNode(t)
	order := make(chan string, 2)
	s := &orderSrv{order: order}
	srv, _ := server.Start(gotptest.Context(t), n, s)
	if err := server.Stop(gotptest.Context(t), n, srv, gotp.ErrShutdown); err != nil {
		t.Fatal(err)
	}
	order <- "stop returned"
	if a, b := <-order, <-order; a != "terminate" || b != "stop returned" {
		t.Fatalf("order = %q, %q", a, b)
	}
	if n.IsAlive(srv) {
		t.Fatal("server alive after Stop")
	}
	if s.reason != gotp.ErrShutdown {
		t.Fatalf("Terminate reason %v", s.reason)
	}
}

type orderSrv struct {
	server.Defaults
	order  chan string
	reason error
}

func (s *orderSrv) Terminate(p *gotp.Process, reason error) {
	time.Sleep(20 * time.Millisecond) // a slow terminate: Stop must wait for it
	s.reason = reason
	s.order <- "terminate"
}

func TestTerminateOnParentExitWhenTrapping(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	s.trap = true
	started := make(chan gotp.PID, 1)
	parent, _ := n.Spawn(func(p *gotp.Process) error {
		pid, err := server.StartLink(p.Context(), p, s)
		if err != nil {
			return err
		}
		started <- pid
		_, err = p.Receive(p.Context())
		return err
	})
	srv := <-started
	oops := errors.New("parent failed")
	n.Exit(parent, oops)
	if r := <-s.terminate; r != oops {
		t.Fatalf("Terminate reason = %v, want the parent's", r)
	}

	// An Exit from a process that is not the parent goes to HandleInfo.
	s2 := newKV()
	s2.trap = true
	srv2, _ := server.Start(gotptest.Context(t), n, s2)
	other, _ := n.Spawn(func(p *gotp.Process) error {
		if err := p.Link(srv2); err != nil {
			return err
		}
		return errors.New("other died")
	})
	msg := <-s2.infos
	if e, ok := msg.(gotp.Exit); !ok || e.From != other {
		t.Fatalf("info = %#v, want Exit from %v", msg, other)
	}
	_ = srv
}

func TestNoTerminateWhenNotTrapping(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	srv, _ := server.Start(gotptest.Context(t), n, s)
	n.Exit(srv, errors.New("external"))
	if n.IsAlive(srv) {
		t.Fatal("non-trapping server survived an exit signal")
	}
	select {
	case r := <-s.terminate:
		t.Fatalf("Terminate ran with %v", r)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestInitErrorAndIgnore(t *testing.T) {
	n := gotptest.NewNode(t)
	before := n.ProcessCount()
	s := newKV()
	s.initErr = errors.New("no db")
	if _, err := server.Start(gotptest.Context(t), n, s); err != s.initErr {
		t.Fatalf("got %v", err)
	}
	s2 := newKV()
	s2.initErr = server.ErrIgnore
	if _, err := server.Start(gotptest.Context(t), n, s2, server.Named("ig")); !errors.Is(err, server.ErrIgnore) {
		t.Fatalf("got %v", err)
	}
	if n.ProcessCount() != before {
		t.Fatalf("a failed start left %d processes", n.ProcessCount()-before)
	}
	if _, ok := n.Whereis("ig"); ok {
		t.Fatal("failed start kept its name")
	}
}

func TestNamedAlreadyStarted(t *testing.T) {
	n := gotptest.NewNode(t)
	first, err := server.Start(gotptest.Context(t), n, newKV(), server.Named("kv"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = server.Start(gotptest.Context(t), n, newKV(), server.Named("kv"))
	var ae *server.AlreadyStartedError
	if !errors.As(err, &ae) || ae.PID != first || !errors.Is(err, server.ErrAlreadyStarted) {
		t.Fatalf("got %v, want already started as %v", err, first)
	}
	if v, err := server.Call[string](gotptest.Context(t), n, gotp.Name("kv"), put{"x", 1}); err != nil || v != "ok" {
		t.Fatalf("call by name: %v %v", v, err)
	}
}

// names is a minimal via name service for the test.
type names struct {
	mu sync.Mutex
	m  map[string]gotp.PID
}

type viaName struct {
	s   *names
	key string
}

func (v viaName) Resolve(*gotp.Node) (gotp.PID, bool) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	p, ok := v.s.m[v.key]
	return p, ok
}

func (v viaName) RegisterName(n *gotp.Node, pid gotp.PID) error {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if p, ok := v.s.m[v.key]; ok {
		return &gotp.AlreadyRegisteredError{Name: v.key, Owner: p}
	}
	v.s.m[v.key] = pid
	n.MonitorFunc(pid, func(gotp.Down) { v.UnregisterName(n) })
	return nil
}

func (v viaName) UnregisterName(*gotp.Node) {
	v.s.mu.Lock()
	delete(v.s.m, v.key)
	v.s.mu.Unlock()
}

func TestViaName(t *testing.T) {
	n := gotptest.NewNode(t)
	reg := &names{m: map[string]gotp.PID{}}
	name := viaName{reg, "agent"}
	first, err := server.Start(gotptest.Context(t), n, newKV(), server.WithVia(name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Call[string](gotptest.Context(t), n, name, put{"a", 1}); err != nil {
		t.Fatal(err)
	}
	_, err = server.Start(gotptest.Context(t), n, newKV(), server.WithVia(name))
	var ae *server.AlreadyStartedError
	if !errors.As(err, &ae) || ae.PID != first {
		t.Fatalf("got %v, want already started as %v", err, first)
	}
	server.Cast(n, name, crash{errors.New("x")})
	for {
		if _, ok := name.Resolve(n); !ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := server.Start(gotptest.Context(t), n, newKV(), server.WithVia(name)); err != nil {
		t.Fatalf("restart under a freed via name: %v", err)
	}
}

func TestIdleServerHoldsNoGoroutine(t *testing.T) {
	n := gotptest.NewNode(t)
	srv, _ := server.Start(gotptest.Context(t), n, newKV())
	server.Call[string](gotptest.Context(t), n, srv, put{"a", 1})
	info, _ := n.ProcessInfo(srv)
	if !info.Handler {
		t.Fatal("a server must be a handler-mode process")
	}
	for info.Status != gotp.StatusWaiting {
		time.Sleep(time.Millisecond)
		info, _ = n.ProcessInfo(srv)
	}
}

type quitter struct {
	server.Defaults
	terminated chan error
}

func (q *quitter) HandleCast(p *gotp.Process, msg any) error { return server.StopReason(nil) }
func (q *quitter) Terminate(p *gotp.Process, reason error)   { q.terminated <- reason }

func TestStopReasonNormal(t *testing.T) {
	n := gotptest.NewNode(t)
	q := &quitter{terminated: make(chan error, 1)}
	pid, _ := server.Start(gotptest.Context(t), n, q)
	downs := make(chan gotp.Down, 1)
	n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
	server.Cast(n, pid, "bye")
	if d := <-downs; d.Reason != nil {
		t.Fatalf("exit reason %v, want nil (normal)", d.Reason)
	}
	if r := <-q.terminated; r != nil {
		t.Fatalf("Terminate reason %v, want nil", r)
	}
}
