package server_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// These tests port cases of OTP's gen_server_SUITE: timeouts in replies
// (call/cast/info with {reply, R, S, T} and {noreply, S, T}), hibernate,
// get_state and replace_state, a crash in terminate, the start timeout
// (start with {timeout, T} and an init that sleeps) and calling self; and
// go beyond it with call cycles.

// timed is a server whose callbacks ask for the timeout they are told,
// and which reports every Timeout it receives, with the time it came.
type timed struct {
	server.Defaults
	initTimeout time.Duration // asked by Init if not zero
	timeouts    chan time.Time
	hibernate   bool
}

// askTimeout is a call or a cast that asks for a timeout d (none if d is
// negative) and replies "ok".
type askTimeout struct{ d time.Duration }

// askStop is a cast that asks for a timeout and stops the server.
type askStop struct{ d time.Duration }

func newTimed() *timed { return &timed{timeouts: make(chan time.Time, 16)} }

func (s *timed) Init(_ context.Context, p *gotp.Process) error {
	if s.initTimeout != 0 {
		server.SetTimeout(p, s.initTimeout)
	}
	return nil
}

func (s *timed) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if r, ok := req.(askTimeout); ok {
		server.SetTimeout(p, r.d)
		if s.hibernate {
			p.Hibernate()
		}
		return "ok", nil
	}
	return "other", nil
}

func (s *timed) HandleCast(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case askTimeout:
		server.SetTimeout(p, m.d)
	case askStop:
		server.SetTimeout(p, m.d)
		return server.StopReason(nil)
	}
	return nil
}

func (s *timed) HandleInfo(p *gotp.Process, msg any) error {
	if _, ok := msg.(server.Timeout); ok {
		s.timeouts <- time.Now()
	}
	return nil
}

// The timing tests run in a synctest bubble: its clock moves only when
// every goroutine in it waits, so "no Timeout before d" and "a Timeout
// at d" are exact, however loaded the machine.
func TestReplyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n := gotp.NewNode(gotp.Options{Name: "t"})
		defer n.Stop(ctx)
		s := newTimed()
		pid, err := server.Start(ctx, n, s)
		gotptest.Must(t, err)

		// {reply, ok, State, 1000}: a Timeout a second after the reply.
		start := time.Now()
		if r, err := server.Call[string](ctx, n, pid, askTimeout{time.Second}); err != nil || r != "ok" {
			t.Fatalf("call = %q, %v", r, err)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("Timeout before its time")
		}
		if at := <-s.timeouts; at.Sub(start) != time.Second {
			t.Fatalf("Timeout after %v, want 1s", at.Sub(start))
		}

		// {noreply, State, 1000} from a cast: the same.
		start = time.Now()
		server.Cast(n, pid, askTimeout{time.Second})
		if at := <-s.timeouts; at.Sub(start) != time.Second {
			t.Fatalf("cast's Timeout after %v, want 1s", at.Sub(start))
		}

		// A message before the time cancels it; the callback that handles
		// it asks for nothing, so nothing comes.
		server.Cast(n, pid, askTimeout{time.Second})
		time.Sleep(500 * time.Millisecond)
		n.Send(pid, "a message")
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("a Timeout although a message came first")
		}

		// A new request replaces the running one.
		server.Cast(n, pid, askTimeout{time.Second})
		time.Sleep(500 * time.Millisecond)
		start = time.Now()
		server.Cast(n, pid, askTimeout{2 * time.Second})
		if at := <-s.timeouts; at.Sub(start) != 2*time.Second {
			t.Fatalf("replaced Timeout after %v, want 2s", at.Sub(start))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("the replaced timeout fired too")
		}

		// Introspection is not a message: it neither cancels nor restarts it.
		start = time.Now()
		server.Cast(n, pid, askTimeout{time.Second})
		time.Sleep(400 * time.Millisecond)
		if _, err := server.GetState[*timed](ctx, n, pid); err != nil {
			t.Fatal(err)
		}
		if _, err := server.FormatState(ctx, n, pid); err != nil {
			t.Fatal(err)
		}
		if at := <-s.timeouts; at.Sub(start) != time.Second {
			t.Fatalf("Timeout after %v with introspection between, want 1s", at.Sub(start))
		}

		// A negative duration withdraws the request.
		server.Cast(n, pid, askTimeout{-1})
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("a Timeout for a withdrawn request")
		}
	})
}

// A zero timeout fires at once unless a message is already waiting, as
// OTP's {noreply, State, 0}; Init may ask for one too ({ok, State, T}); a
// callback that stops the server asks for nothing.
func TestReplyTimeoutZeroInitAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n := gotp.NewNode(gotp.Options{Name: "t"})
		defer n.Stop(ctx)
		s := newTimed()
		s.initTimeout = 3 * time.Second
		start := time.Now()
		pid, err := server.Start(ctx, n, s)
		gotptest.Must(t, err)
		if at := <-s.timeouts; at.Sub(start) != 3*time.Second {
			t.Fatalf("Init's Timeout after %v, want 3s", at.Sub(start))
		}

		start = time.Now()
		server.Cast(n, pid, askTimeout{0})
		if at := <-s.timeouts; at != start {
			t.Fatalf("zero Timeout after %v, want at once", at.Sub(start))
		}
		// With a message waiting behind the cast, the zero timeout is void.
		n.Batch(func(b *gotp.Batch) {
			b.Send(pid, server.CastMessage{Body: askTimeout{0}})
			b.Send(pid, "waiting")
		})
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("a zero Timeout although a message was waiting")
		}

		down := gotptest.Watch(t, n, pid)
		server.Cast(n, pid, askStop{time.Second})
		if r := <-down; r != nil {
			t.Fatalf("exit %v", r)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(s.timeouts) != 0 {
			t.Fatal("a Timeout after the server stopped")
		}
	})
}

// gen_server_SUITE's hibernate and call_within_hibernate: a server that
// hibernates keeps its state and answers calls as before.
func TestHibernateKeepsServing(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newTimed()
	s.hibernate = true
	pid, err := server.Start(gotptest.Context(t), n, s)
	gotptest.Must(t, err)
	for range 3 {
		if r, err := server.Call[string](gotptest.Context(t), n, pid, askTimeout{-1}); err != nil || r != "ok" {
			t.Fatalf("call after hibernating = %q, %v", r, err)
		}
		if in, _ := n.ProcessInfo(pid); in.Status != gotp.StatusWaiting {
			gotptest.Eventually(t, "the server is idle", func() bool {
				in, _ := n.ProcessInfo(pid)
				return in.Status == gotp.StatusWaiting
			})
		}
	}
	if got, err := server.GetState[*timed](gotptest.Context(t), n, pid); err != nil || got != s {
		t.Fatalf("state after hibernating: %v, %v", got, err)
	}
}

// tally is a server whose state is a count; it answers get with it.
type tally struct {
	server.Defaults
	n int
}

type getN struct{}

func (c *tally) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if _, ok := req.(getN); ok {
		return c.n, nil
	}
	return c.Defaults.HandleCall(p, server.From{}, req)
}

// get_state and replace_state: by PID and by name; a function that panics
// or returns no Behaviour leaves the state as it was; a wrong type is a
// *ReplyTypeError; a process that is not a server is refused.
func TestGetAndReplaceState(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	first := &tally{n: 1}
	pid, err := server.Start(ctx, n, first, server.Named("get_state"))
	gotptest.Must(t, err)
	for _, dest := range []gotp.Dest{pid, gotp.Name("get_state")} {
		if got, err := server.GetState[*tally](ctx, n, dest); err != nil || got != first {
			t.Fatalf("GetState(%v) = %v, %v; want the server's behaviour", dest, got, err)
		}
	}

	got, err := server.ReplaceState(ctx, n, gotp.Name("get_state"), func(c *tally) *tally {
		c.n++ // as the server: no race with its callbacks
		return c
	})
	if err != nil || got != first || first.n != 2 {
		t.Fatalf("ReplaceState in place = %v, %v", got, err)
	}
	second := &tally{n: 10}
	if got, err := server.ReplaceState(ctx, n, pid, func(*tally) *tally { return second }); err != nil || got != second {
		t.Fatalf("ReplaceState = %v, %v", got, err)
	}
	if v, err := server.Call[int](ctx, n, pid, getN{}); err != nil || v != 10 {
		t.Fatalf("the callbacks see the replaced state: %d, %v", v, err)
	}

	_, err = server.ReplaceState(ctx, n, pid, func(*tally) *tally { panic("fail") })
	var pe *gotp.PanicError
	if !errors.Is(err, server.ErrBadState) || !errors.As(err, &pe) || pe.Value != "fail" {
		t.Fatalf("a panicking state function: %v", err)
	}
	if _, err := server.ReplaceState(ctx, n, pid, func(*tally) *tally { return nil }); !errors.Is(err, server.ErrBadState) {
		t.Fatalf("a state function returning nil: %v", err)
	}
	if got, _ := server.GetState[*tally](ctx, n, pid); got != second || !n.IsAlive(pid) {
		t.Fatalf("state after failed replaces: %v (want it unchanged, the server alive)", got)
	}

	var te *server.ReplyTypeError
	if _, err := server.GetState[*timed](ctx, n, pid); !errors.As(err, &te) {
		t.Fatalf("GetState of another type: %v", err)
	}
	if _, err := server.ReplaceState(ctx, n, pid, func(s *timed) *timed { t.Error("fn ran"); return s }); !errors.As(err, &te) {
		t.Fatalf("ReplaceState of another type: %v", err)
	}
	plain := gotptest.NewSink(t, n)
	if _, err := server.GetState[any](ctx, n, plain.PID()); !errors.Is(err, server.ErrNotServer) {
		t.Fatalf("GetState of a function process: %v", err)
	}
	gotptest.Must(t, server.Stop(ctx, n, pid, nil))
	if _, err := server.GetState[any](ctx, n, pid); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("GetState of a stopped server: %v", err)
	}
}

// crashTerminate is a server whose Terminate panics.
type crashTerminate struct{ server.Defaults }

func (crashTerminate) Terminate(*gotp.Process, error) { panic("crash in terminate") }

// A crash in Terminate is the server's exit reason, as in OTP: monitors
// and linked processes see the *gotp.PanicError, whatever the server was
// stopping with, and a non-trapping linked process dies of it.
func TestTerminateCrashIsExitReason(t *testing.T) {
	for name, stop := range map[string]func(n *gotp.Node, pid gotp.PID){
		"Stop(nil)":         func(n *gotp.Node, pid gotp.PID) { go server.Stop(context.Background(), n, pid, nil) },
		"Stop(err)":         func(n *gotp.Node, pid gotp.PID) { go server.Stop(context.Background(), n, pid, errors.New("why")) },
		"parent's shutdown": func(n *gotp.Node, pid gotp.PID) { n.Exit(pid, gotp.ErrShutdown) },
	} {
		t.Run(name, func(t *testing.T) {
			n := gotptest.NewNode(t)
			trapper := gotptest.NewSink(t, n, gotp.TrapExit(true))
			pid, err := server.Start(gotptest.Context(t), n, crashTerminate{}, server.TrapExit(true))
			gotptest.Must(t, err)
			bystander := gotptest.NewSink(t, n)
			trapper.Do(t, func(p *gotp.Process) { gotptest.Must(t, p.Link(pid)) })
			bystander.Do(t, func(p *gotp.Process) { gotptest.Must(t, p.Link(pid)) })
			down := gotptest.Watch(t, n, pid)
			stop(n, pid)
			var pe *gotp.PanicError
			if r := gotptest.Recv(t, down); !errors.As(r, &pe) || pe.Value != "crash in terminate" {
				t.Fatalf("exit reason %v, want Terminate's panic", r)
			}
			if ex, ok := trapper.Next(t).(gotp.Exit); !ok || ex.From != pid || !errors.As(ex.Reason, &pe) {
				t.Fatalf("a linked process that traps got %#v, want the panic as Exit", ex)
			}
			gotptest.Recv(t, bystander.Done())
			if r, _ := bystander.Process().ExitReason(); !errors.As(r, &pe) {
				t.Fatalf("a linked process that does not trap died of %v, want the panic", r)
			}
		})
	}
}

// sleeper is a server whose Init ignores its context and blocks until
// released.
type sleeper struct {
	server.Defaults
	entered chan struct{}
	release chan struct{}
}

func (s *sleeper) Init(context.Context, *gotp.Process) error {
	close(s.entered)
	<-s.release
	return nil
}

func newSleeper(t *testing.T) *sleeper {
	s := &sleeper{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) }) // Init's goroutine ends with the test
	return s
}

// gen_server_SUITE's start with {timeout, T}: an Init that does not return
// by ctx's deadline fails Start with ErrStartTimeout; the half-started
// server is killed, its name freed, and a parent that started it linked
// (not trapping exits) lives on.
func TestStartTimeout(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newSleeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := server.Start(ctx, n, s, server.Named("sleeper"))
	if !errors.Is(err, server.ErrStartTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want ErrStartTimeout and the deadline", err)
	}
	gotptest.Recv(t, s.entered)
	gotptest.Eventually(t, "the name is free", func() bool { _, ok := n.Whereis("sleeper"); return !ok })
	if pid, err := server.Start(gotptest.Context(t), n, newTimed(), server.Named("sleeper")); err != nil || pid.IsZero() {
		t.Fatalf("Start under the freed name: %v", err)
	}

	// StartLink from a process that does not trap exits: it survives.
	parent := gotptest.NewSink(t, n)
	var startErr error
	parent.Do(t, func(p *gotp.Process) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, startErr = server.StartLink(ctx, p, newSleeper(t))
	})
	if !errors.Is(startErr, server.ErrStartTimeout) {
		t.Fatalf("StartLink = %v", startErr)
	}
	if in, _ := n.ProcessInfo(parent.PID()); !n.IsAlive(parent.PID()) || len(in.Links) != 0 {
		t.Fatalf("the parent after a timed-out StartLink: alive %v, links %v", n.IsAlive(parent.PID()), in.Links)
	}

	// A deadline met: the bounded start works as any.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	pid, err := server.Start(ctx2, n, &tally{n: 7})
	gotptest.Must(t, err)
	if v, err := server.Call[int](ctx2, n, pid, getN{}); err != nil || v != 7 {
		t.Fatalf("call after a bounded start: %v, %v", v, err)
	}
}

// The supervisor's StartChild with a deadline: the child's Init that hangs
// fails the start, and the supervisor goes on.
func TestStartTimeoutUnderSupervisor(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Logger(slog.New(slog.DiscardHandler)))
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{})
	gotptest.Must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	s := newSleeper(t)
	_, err = supervisor.StartChild(ctx, n, sup, supervisor.Server("hang", func() server.Behaviour { return s }))
	if !errors.Is(err, server.ErrStartTimeout) {
		t.Fatalf("StartChild = %v, want ErrStartTimeout", err)
	}
	if w, err := supervisor.WhichChildren(gotptest.Context(t), n, sup); err != nil || len(w) != 0 {
		t.Fatalf("children after a timed-out start: %+v, %v", w, err)
	}
}

// A process that calls itself fails at once (OTP's calling_self), whether
// it names itself by PID or by name, a server or a function process.
func TestCallingSelf(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t) // a long deadline: a call that waited for it would fail the test
	selfCaller := &relay{}
	pid, err := server.Start(ctx, n, selfCaller, server.Named("me"))
	gotptest.Must(t, err)
	for _, to := range []gotp.Dest{pid, gotp.Name("me")} {
		_, err := server.Call[string](ctx, n, pid, forward{to: to, req: "hello"})
		var ce *server.CallError
		if !errors.Is(err, server.ErrCallingSelf) || !errors.As(err, &ce) || ce.Server != pid {
			t.Fatalf("a server calling itself as %v: %v, want ErrCallingSelf", to, err)
		}
	}
	f := gotptest.NewSink(t, n)
	f.Do(t, func(p *gotp.Process) {
		if _, err := server.Call[any](ctx, p, p.Self(), "x"); !errors.Is(err, server.ErrCallingSelf) {
			t.Errorf("a function process calling itself: %v", err)
		}
	})
}

// relay is a server that, asked to forward, calls another server (as
// itself) and replies with what it got; asked anything else, it answers
// "from <its name>".
type relay struct {
	server.Defaults
	name string
}

// forward asks a relay to call to with req.
type forward struct {
	to  gotp.Dest
	req any
}

func (r *relay) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if m, ok := req.(meet); ok {
		m.met.Done()
		m.met.Wait()
		req = forward{to: m.to, req: "hi"}
	}
	if f, ok := req.(forward); ok {
		v, err := server.Call[any](context.Background(), p, f.to, f.req)
		if err != nil {
			return err, nil
		}
		return v, nil
	}
	return "from " + r.name, nil
}

func startRelays(t *testing.T, n *gotp.Node, opts []server.Option, names ...string) []gotp.PID {
	t.Helper()
	var out []gotp.PID
	for _, name := range names {
		pid, err := server.Start(gotptest.Context(t), n, &relay{name: name}, append(opts, server.Named(name))...)
		gotptest.Must(t, err)
		out = append(out, pid)
	}
	return out
}

// nest builds the request that makes relay names[0] call names[1], which
// calls names[2], and so on; the last one is asked last.
func nest(names []string, last any) any {
	req := last
	for i := len(names) - 1; i >= 1; i-- {
		req = forward{to: gotp.Name(names[i]), req: req}
	}
	return req
}

// A cycle of calls fails at the call that closes it, at once, with the
// servers of the cycle; the calls around it go on and are answered.
func TestCallCycle(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []server.Option
	}{
		{"plain", nil},
		{"inline", []server.Option{server.InlineCalls()}},
		{"dedicated", []server.Option{server.Dedicated()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			n := gotptest.NewNode(t)
			ctx := gotptest.Context(t)
			pids := startRelays(t, n, mode.opts, "a", "b", "c")

			// a calls b, which calls a: b's call fails, b replies with its
			// error to a, which replies with it to the test. Every server
			// is alive and answers.
			_, err := server.Call[any](ctx, n, gotp.Name("a"), nest([]string{"a", "b", "a"}, "hi"))
			var cyc *server.CallCycleError
			if !errors.As(err, &cyc) || !errors.Is(err, server.ErrCallCycle) {
				t.Fatalf("a -> b -> a: %v; want b's call to fail with a cycle", err)
			}
			if want := []gotp.PID{pids[1], pids[0]}; !equalPIDs(cyc.Cycle, want) {
				t.Fatalf("cycle %v, want %v", cyc.Cycle, want)
			}

			// a calls b, b calls c, c calls a.
			_, err = server.Call[any](ctx, n, gotp.Name("a"), nest([]string{"a", "b", "c", "a"}, "hi"))
			if !errors.As(err, &cyc) {
				t.Fatalf("a -> b -> c -> a: %v, want a cycle", err)
			}
			if want := []gotp.PID{pids[2], pids[0], pids[1]}; !equalPIDs(cyc.Cycle, want) {
				t.Fatalf("cycle %v, want %v", cyc.Cycle, want)
			}

			// A chain without a cycle goes through.
			if v, err := server.Call[any](ctx, n, gotp.Name("a"), nest([]string{"a", "b", "c"}, "hi")); err != nil || v != "from c" {
				t.Fatalf("a -> b -> c = %v, %v", v, err)
			}
		})
	}
}

func equalPIDs(a, b []gotp.PID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A calls B while B calls A, at the same moment (both callbacks are
// running when either calls): at least one of the two calls fails with a
// cycle instead of both waiting for their deadline, and the other is
// answered.
func TestCallCycleClosedAtOnce(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	startRelays(t, n, nil, "a", "b")
	for range 50 {
		var met sync.WaitGroup // both callbacks have begun
		met.Add(2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, pair := range [][2]string{{"a", "b"}, {"b", "a"}} {
			wg.Go(func() {
				_, errs[i] = server.Call[any](ctx, n, gotp.Name(pair[0]), meet{met: &met, to: gotp.Name(pair[1])})
			})
		}
		wg.Wait()
		cycles := 0
		for i, err := range errs {
			switch {
			case errors.Is(err, server.ErrCallCycle):
				cycles++
			case err != nil:
				t.Fatalf("call %d: %v, want an answer or a cycle", i, err)
			}
		}
		if cycles == 0 {
			t.Fatal("both calls answered: they cannot both have been waiting")
		}
	}
}

// meet asks a relay to wait until another callback has begun too, and
// then to call to.
type meet struct {
	met *sync.WaitGroup
	to  gotp.Dest
}

// No false cycle: a server that answered a call, and at once calls back
// the caller it answered (which has its answer but may not have woken up
// yet), is not refused.
func TestCallBackAfterAnswerIsNoCycle(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	startRelays(t, n, nil, "a")
	back := make(chan any, 1)
	cb := &castCaller{to: gotp.Name("a"), got: back}
	cbPID, err := server.Start(ctx, n, cb, server.Named("cb"))
	gotptest.Must(t, err)
	for range 200 {
		// a calls cb; cb answers, then calls a back.
		if v, err := server.Call[any](ctx, n, gotp.Name("a"), forward{to: cbPID, req: "hi"}); err != nil || v != "answered" {
			t.Fatalf("a -> cb = %v, %v", v, err)
		}
		if got := gotptest.Recv(t, back); got != "from a" {
			t.Fatalf("cb's call back to a: %v, want a's answer", got)
		}
	}
}

// castCaller answers a call at once and then, from its next callback,
// calls to and reports the result on got.
type castCaller struct {
	server.Defaults
	to  gotp.Dest
	got chan any
}

func (c *castCaller) HandleCall(p *gotp.Process, _ server.From, _ any) (any, error) {
	server.Cast(p.Node(), p.Self(), "call back")
	return "answered", nil
}

func (c *castCaller) HandleCast(p *gotp.Process, _ any) error {
	v, err := server.Call[any](context.Background(), p, c.to, "back")
	if err != nil {
		c.got <- err
		return nil
	}
	c.got <- v
	return nil
}

// No false cycle: a call whose reply was deferred (NoReply) does not hold
// the caller to the server's mailbox; the server may call the waiting
// caller, whose answer comes from elsewhere.
func TestDeferredReplyIsNoCycle(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	aPID := startRelays(t, n, nil, "a")[0]
	d := &deferrer{n: n, a: aPID, done: make(chan any, 1)}
	dPID, err := server.Start(ctx, n, d)
	gotptest.Must(t, err)
	// a calls d; d defers its reply and calls a, which waits for d: a's
	// answer comes from the goroutine d handed its From to, once d's call
	// to a is in a's mailbox.
	v, err := server.Call[any](ctx, n, aPID, forward{to: dPID, req: "hi"})
	if err != nil || v != "deferred answer" {
		t.Fatalf("a -> d = %v, %v", v, err)
	}
	if got := gotptest.Recv(t, d.done); got != "from a" {
		t.Fatalf("d's call to the waiting a: %v, want a's answer", got)
	}
}

type deferrer struct {
	server.Defaults
	n    *gotp.Node
	a    gotp.PID
	done chan any
}

func (d *deferrer) HandleCall(p *gotp.Process, from server.From, _ any) (any, error) {
	go func() {
		// Reply once d's own call to a waits in a's mailbox (or after a
		// generous bound, so that a failing test does not hang).
		for deadline := time.Now().Add(gotptest.Timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if in, ok := d.n.ProcessInfo(d.a); !ok || in.MailboxLen > 0 {
				break
			}
		}
		server.Reply(from, "deferred answer")
	}()
	server.Cast(d.n, p.Self(), "call a")
	return server.NoReply, nil
}

func (d *deferrer) HandleCast(p *gotp.Process, _ any) error {
	v, err := server.Call[any](context.Background(), p, d.a, "x")
	if err != nil {
		d.done <- err
	} else {
		d.done <- v
	}
	return nil
}

// A server that waits for the Init of a server it starts linked, whose
// Init calls it back: the call fails at once with a cycle, and so does the
// start, instead of both waiting for the deadline.
func TestStartCycle(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	parent := &starter{}
	// It traps exits: the child whose Init fails is linked to it.
	pid, err := server.Start(ctx, n, parent, server.TrapExit(true))
	gotptest.Must(t, err)
	_, err = server.Call[gotp.PID](ctx, n, pid, "start")
	var cyc *server.CallCycleError
	if !errors.As(err, &cyc) || len(cyc.Cycle) != 2 || cyc.Cycle[1] != pid {
		t.Fatalf("start whose Init calls the parent: %v, want a cycle child -> parent", err)
	}
	// The parent serves on; a child that does not call back starts.
	if _, err := server.Call[gotp.PID](ctx, n, pid, "start quietly"); err != nil {
		t.Fatal(err)
	}
}

type starter struct{ server.Defaults }

type callsParent struct {
	server.Defaults
	parent gotp.PID
}

func (c *callsParent) Init(ctx context.Context, p *gotp.Process) error {
	_, err := server.Call[any](ctx, p, c.parent, "hello")
	return err
}

func (s *starter) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	var b server.Behaviour = &callsParent{parent: p.Self()}
	if req == "start quietly" {
		b = &tally{}
	}
	pid, err := server.StartLink(context.Background(), p, b)
	if err != nil {
		return err, nil
	}
	return pid, nil
}
