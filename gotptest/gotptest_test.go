package gotptest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

var errBoom = errors.New("boom")

func TestNewNodeStopsAtCleanup(t *testing.T) {
	var n *gotp.Node
	var pid gotp.PID
	f := runFake(func(f *fakeT) {
		n = NewNode(f, Name("a"))
		if n.Name() != "a" {
			f.Errorf("name %q, want a", n.Name())
		}
		var err error
		pid, err = n.Spawn(func(p *gotp.Process) error {
			_, err := p.Receive(p.Context())
			return err
		})
		Must(f, err)
	})
	wantPass(t, f)
	if n.IsAlive(pid) {
		t.Fatal("process alive after the test's cleanup")
	}
	if _, err := n.Spawn(func(*gotp.Process) error { return nil }); !errors.Is(err, gotp.ErrNodeStopped) {
		t.Fatalf("Spawn after cleanup: %v, want ErrNodeStopped", err)
	}
}

func TestNewNodeDefaultName(t *testing.T) {
	if got := NewNode(t).Name(); got != "test" {
		t.Fatalf("name %q, want test", got)
	}
}

// A process that ignores its context and its mailbox cannot be stopped
// gracefully: NewNode's cleanup reports it.
func TestNewNodeReportsAStopThatTimesOut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := runFake(func(f *fakeT) {
		n := NewNode(f, StopWithin(50*time.Millisecond), Logger(slog.New(slog.DiscardHandler)))
		started := make(chan struct{})
		_, err := n.Spawn(func(p *gotp.Process) error { close(started); <-release; return nil })
		Must(f, err)
		Recv(f, started)
	})
	_, errs, _ := f.reports()
	if len(errs) == 0 || !strings.Contains(errs[0], "stopping node test") {
		t.Fatalf("errors %q, want a report of the failed Stop", errs)
	}
}

func TestNewNodeLogsToTheTest(t *testing.T) {
	f := runFake(func(f *fakeT) {
		n := NewNode(f)
		n.Logger().Info("hello from the node", "k", 1)
	})
	wantPass(t, f)
	logs, _, _ := f.reports()
	all := strings.Join(logs, "\n")
	if !strings.Contains(all, "hello from the node") || !strings.Contains(all, "k=1") {
		t.Fatalf("test log %q lacks the node's log line", all)
	}
}

// After the test's cleanup a late log line must not reach the test (its
// log is closed by then); it is dropped.
func TestNewNodeLogClosesAtCleanup(t *testing.T) {
	var n *gotp.Node
	f := runFake(func(f *fakeT) { n = NewNode(f) })
	before, _, _ := f.reports()
	n.Logger().Info("too late")
	after, _, _ := f.reports()
	if len(after) != len(before) {
		t.Fatalf("log written after cleanup: %q", after[len(before):])
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, ch); got != 7 {
		t.Fatalf("Recv = %d", got)
	}
	done := make(chan struct{})
	close(done)
	Recv(t, done) // a closed channel gives its zero value at once

	f := runFake(func(f *fakeT) { RecvWithin(f, 10*time.Millisecond, make(chan gotp.Down)) })
	wantFatal(t, f, "no gotp.Down received within 10ms")
}

func TestNoRecv(t *testing.T) {
	ch := make(chan string, 1)
	NoRecv(t, ch)
	ch <- "x"
	wantFatal(t, runFake(func(f *fakeT) { NoRecv(f, ch) }), `unexpected "x"`)
	closed := make(chan string)
	close(closed)
	wantFatal(t, runFake(func(f *fakeT) { NoRecv(f, closed) }), "closed")
}

func TestEventually(t *testing.T) {
	var calls atomic.Int32
	Eventually(t, "three calls", func() bool { return calls.Add(1) >= 3 })
	if calls.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", calls.Load())
	}
	f := runFake(func(f *fakeT) {
		EventuallyWithin(f, 20*time.Millisecond, "the impossible", func() bool { return false })
	})
	wantFatal(t, f, "waiting for the impossible")
}

func TestContext(t *testing.T) {
	var ctx context.Context
	f := runFake(func(f *fakeT) {
		ctx = Context(f)
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > Timeout {
			f.Errorf("deadline %v, %v; want within %v", dl, ok, Timeout)
		}
	})
	wantPass(t, f)
	if ctx.Err() == nil {
		t.Fatal("context not cancelled when the test ended")
	}
}

func TestMust(t *testing.T) {
	Must(t, nil)
	wantFatal(t, runFake(func(f *fakeT) { Must(f, errBoom) }), "boom")
}

func TestWatch(t *testing.T) {
	n := NewNode(t)
	for _, reason := range []error{nil, errBoom} {
		release := make(chan struct{})
		pid, err := n.Spawn(func(p *gotp.Process) error { <-release; return reason })
		Must(t, err)
		exited := Watch(t, n, pid)
		close(release)
		if got := Recv(t, exited); got != reason {
			t.Fatalf("Watch = %v, want %v", got, reason)
		}
	}
}

func TestWatchNotAlive(t *testing.T) {
	n := NewNode(t)
	pid, err := n.Spawn(func(*gotp.Process) error { return nil })
	Must(t, err)
	Eventually(t, "the process gone", func() bool { return !n.IsAlive(pid) })
	if got := Recv(t, Watch(t, n, pid)); !errors.Is(got, gotp.ErrNoProc) {
		t.Fatalf("Watch of a dead process = %v, want ErrNoProc", got)
	}
}

// When Watch's channel says a process has exited, its links have been
// signalled: a linked process that traps exits already has the Exit.
func TestWatchAfterLinks(t *testing.T) {
	n := NewNode(t)
	for range 50 {
		linked := NewSink(t, n, gotp.TrapExit(true))
		release := make(chan struct{})
		pid, err := n.Spawn(func(p *gotp.Process) error { <-release; return errBoom }, gotp.LinkTo(linked.PID()))
		Must(t, err)
		exited := Watch(t, n, pid)
		close(release)
		Recv(t, exited)
		in, ok := n.ProcessInfo(linked.PID())
		if !ok {
			t.Fatal("linked sink gone")
		}
		// The Exit is in the sink's mailbox or already handed over.
		if in.MailboxLen == 0 && in.Handled == 0 {
			t.Fatal("Watch reported the exit before the link's exit signal was delivered")
		}
		if e := linked.Next(t).(gotp.Exit); e.From != pid || e.Reason != errBoom {
			t.Fatalf("linked got %+v", e)
		}
	}
}

// Watch reports the exit of a process that Node.Stop ends, though Stop
// ends Watch's own process too.
func TestWatchThroughStop(t *testing.T) {
	n := NewNode(t)
	for _, trap := range []bool{false, true} {
		sink := NewSink(t, n, gotp.TrapExit(trap))
		exited := Watch(t, n, sink.PID())
		_ = exited
		defer func() {
			if got := Recv(t, exited); !errors.Is(got, gotp.ErrShutdown) {
				t.Errorf("trap %v: Watch = %v, want shutdown", trap, got)
			}
		}()
	}
	Must(t, n.Stop(Context(t)))
}

func TestSink(t *testing.T) {
	n := NewNode(t)
	s := NewSink(t, n)
	s.None(t)
	for i := range 100 {
		n.Send(s.PID(), i)
	}
	for i := range 100 {
		if got := s.Next(t); got != i {
			t.Fatalf("message %d is %v", i, got)
		}
	}
	s.None(t)
	wantFatal(t, runFake(func(f *fakeT) { s.NextWithin(f, 10*time.Millisecond) }), "no interface {} received")
}

func TestSinkDo(t *testing.T) {
	n := NewNode(t)
	s := NewSink(t, n)
	other := NewSink(t, n)
	var self gotp.PID
	s.Do(t, func(p *gotp.Process) {
		self = p.Self()
		p.Monitor(other.PID())
	})
	if self != s.PID() {
		t.Fatalf("Do ran as %v, want %v", self, s.PID())
	}
	other.Kill(t)
	if d := s.Next(t).(gotp.Down); d.PID != other.PID() || !errors.Is(d.Reason, gotp.ErrKilled) {
		t.Fatalf("Down %+v", d)
	}
	s.Kill(t)
	if reason, _ := s.Process().ExitReason(); !errors.Is(reason, gotp.ErrKilled) {
		t.Fatalf("exit reason %v", reason)
	}
	wantFatal(t, runFake(func(f *fakeT) { s.Do(f, func(*gotp.Process) {}) }), "exited")
}

func TestSinkStopAndExit(t *testing.T) {
	n := NewNode(t)
	a, b := NewSink(t, n), NewSink(t, n)
	n.Send(a.PID(), "before")
	a.Stop(t)
	if reason, _ := a.Process().ExitReason(); reason != nil {
		t.Fatalf("Stop: exit reason %v, want nil", reason)
	}
	if got := a.Next(t); got != "before" {
		t.Fatalf("got %v, want the message sent before Stop", got)
	}
	b.Exit(t, errBoom)
	if reason, _ := b.Process().ExitReason(); reason != errBoom {
		t.Fatalf("Exit: exit reason %v, want boom", reason)
	}
}

// A Sink that traps exits hands over every Exit, and ends at Node.Stop's.
func TestSinkTrapping(t *testing.T) {
	n := NewNode(t)
	s := NewSink(t, n, gotp.TrapExit(true))
	n.Exit(s.PID(), errBoom)
	if e := s.Next(t); e != (gotp.Exit{Reason: errBoom}) {
		t.Fatalf("got %#v", e)
	}
	Must(t, n.Stop(Context(t)))
	if e := s.Next(t); e != (gotp.Exit{Reason: gotp.ErrShutdown}) {
		t.Fatalf("got %#v", e)
	}
	Recv(t, s.Done())
}

func TestLogRecorder(t *testing.T) {
	r := NewLogRecorder()
	l := r.Logger().With("node", "a").WithGroup("child").With("id", "w")
	l.Warn("restarted", "reason", errBoom, slog.Group("g", "x", 1), slog.Group("", "inline", true))
	r.Logger().Info("other")

	recs := r.Records()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	got := r.Find("restarted")
	if len(got) != 1 {
		t.Fatalf("Find = %v", got)
	}
	rec := got[0]
	if rec.Level != slog.LevelWarn || rec.Time.IsZero() {
		t.Fatalf("record %+v", rec)
	}
	want := map[string]any{"node": "a", "child.id": "w", "child.g.x": int64(1), "child.inline": true}
	for k, v := range want {
		if rec.Attrs[k] != v {
			t.Errorf("Attrs[%q] = %#v, want %#v (all: %v)", k, rec.Attrs[k], v, rec.Attrs)
		}
	}
	if err, _ := rec.Attrs["child.reason"].(error); !errors.Is(err, errBoom) {
		t.Errorf("Attrs[child.reason] = %#v, want errBoom", rec.Attrs["child.reason"])
	}
	if len(rec.Attrs) != len(want)+1 {
		t.Errorf("Attrs %v has extra keys", rec.Attrs)
	}
}

func TestLogRecorderWait(t *testing.T) {
	r := NewLogRecorder()
	n := NewNode(t, Logger(r.Logger()))
	go n.Logger().Info("later")
	if rec := r.Wait(t, "later"); rec.Message != "later" {
		t.Fatalf("Wait = %+v", rec)
	}
	f := &fakeT{}
	done := make(chan struct{})
	go func() { defer close(done); r.Wait(f, "never") }()
	select {
	case <-done:
		t.Fatal("Wait returned before any record")
	case <-time.After(20 * time.Millisecond):
	}
	n.Logger().Info("never")
	Recv(t, done)
	wantPass(t, f)
}

func TestNoLeaks(t *testing.T) {
	stop := make(chan struct{})
	f := runFake(func(f *fakeT) {
		noLeaks(f)
		go func() { <-stop }()
	})
	close(stop)
	_, errs, _ := f.reports()
	if len(errs) != 1 || !strings.Contains(errs[0], "goroutines left running") {
		t.Fatalf("errors %q, want a leak report", errs)
	}
	if f.env["GOTPTEST_NOLEAKS"] != "fake" {
		t.Fatalf("env %v: NoLeaks must call Setenv to refuse parallel tests", f.env)
	}
	wantPass(t, runFake(func(f *fakeT) {
		noLeaks(f)
		n := NewNode(f)
		NewSink(f, n)
	}))
}

// A Node.Stop whose deadline runs out kills Watch's process too; the
// reason still arrives, from a MonitorFunc.
func TestWatchThroughStopDeadline(t *testing.T) {
	n := NewNode(t)
	stubborn, err := n.Spawn(func(p *gotp.Process) error {
		for {
			if _, err := p.Receive(context.Background()); err != nil {
				return err // only a kill gets through
			}
		}
	}, gotp.TrapExit(true))
	Must(t, err)
	exited := Watch(t, n, stubborn)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	if got := Recv(t, exited); !errors.Is(got, gotp.ErrKilled) {
		t.Fatalf("Watch = %v, want killed", got)
	}
}
