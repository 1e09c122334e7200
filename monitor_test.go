package gotp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// monitorer spawns a process that monitors target and forwards what it
// receives to the returned channel, with the monitor's Ref.
func monitorer(t *testing.T, n *gotp.Node, target gotp.PID) (gotp.PID, gotp.Ref, <-chan any) {
	t.Helper()
	refc := make(chan gotp.Ref, 1)
	ch := make(chan any, 16)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		refc <- p.Monitor(target)
		for {
			msg, err := p.Receive(context.Background())
			if err != nil {
				return nil
			}
			ch <- msg
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return pid, gotptest.Recv(t, refc), ch
}

type marker struct{}

func TestMonitorDownReasons(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(n *gotp.Node, pid gotp.PID)
		is   func(error) bool
	}{
		{"normal", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, nil) }, func(r error) bool { return r == nil }},
		{"error", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, errBoom) }, func(r error) bool { return r == errBoom }},
		{"panic", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, "panic") }, func(r error) bool {
			var pe *gotp.PanicError
			return errors.As(r, &pe) && pe.Value == "die"
		}},
		{"killed", func(n *gotp.Node, pid gotp.PID) { n.Exit(pid, gotp.ErrKill) }, func(r error) bool { return r == gotp.ErrKilled }},
		{"shutdown", func(n *gotp.Node, pid gotp.PID) { n.Exit(pid, gotp.ErrShutdown) }, func(r error) bool { return r == gotp.ErrShutdown }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := gotptest.NewNode(t)
			target, err := n.Spawn(func(p *gotp.Process) error {
				m, err := p.Receive(context.Background())
				if err != nil {
					return err
				}
				if m == "panic" {
					panic("die")
				}
				if e, ok := m.(error); ok {
					return e
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			w, ref, got := monitorer(t, n, target)
			w2, ref2, got2 := monitorer(t, n, target) // a second monitor, its own Down
			down := gotptest.Watch(t, n, target)
			tc.end(n, target)
			gotptest.Recv(t, down)
			for _, c := range []struct {
				w   gotp.PID
				ref gotp.Ref
				got <-chan any
			}{{w, ref, got}, {w2, ref2, got2}} {
				d, ok := gotptest.Recv(t, c.got).(gotp.Down)
				if !ok || d.Ref != c.ref || d.PID != target || !tc.is(d.Reason) {
					t.Fatalf("got %#v, want Down{Ref: %v, PID: %v} with the %s reason", d, c.ref, target, tc.name)
				}
				n.Send(c.w, marker{})
				if m := gotptest.Recv(t, c.got); m != (marker{}) {
					t.Fatalf("after the Down came %#v, not the marker", m)
				}
			}
			if in, _ := n.ProcessInfo(w); len(in.Monitors) != 0 {
				t.Errorf("a fired monitor is still listed: %v", in.Monitors)
			}
		})
	}
}

func TestMonitorDeadPIDDownAtOnce(t *testing.T) {
	n := gotptest.NewNode(t)
	dead := waiter(t, n)
	d0 := gotptest.Watch(t, n, dead)
	n.Send(dead, nil)
	gotptest.Recv(t, d0)
	for _, target := range []gotp.PID{
		dead,
		{},
		gotp.NewPID(n.Name(), n.Creation(), 1<<40),
		gotp.NewPID("elsewhere", 1, 1),
	} {
		_, res := run(t, n, func(p *gotp.Process) any {
			ref := p.Monitor(target)
			if in := p.Info(); in.MailboxLen != 1 {
				return in // the Down must be there when Monitor returns
			}
			m, err := p.Receive(context.Background())
			if err != nil {
				return err
			}
			if m != (gotp.Down{Ref: ref, PID: target, Reason: gotp.ErrNoProc}) {
				return m
			}
			return nil
		})
		if r := gotptest.Recv(t, res); r != nil {
			t.Errorf("Monitor(%v): got %#v", target, r)
		}
		// MonitorFunc calls fn before it returns.
		var got gotp.Down
		ref := n.MonitorFunc(target, func(d gotp.Down) { got = d })
		if got != (gotp.Down{Ref: ref, PID: target, Reason: gotp.ErrNoProc}) {
			t.Errorf("MonitorFunc(%v): fn got %#v", target, got)
		}
	}
}

func TestDemonitor(t *testing.T) {
	n := gotptest.NewNode(t)
	target := waiter(t, n)
	cmd := make(chan func(p *gotp.Process) any)
	out := make(chan any)
	w, err := n.Spawn(func(p *gotp.Process) error {
		for f := range cmd {
			out <- f(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(cmd)
	do := func(f func(p *gotp.Process) any) any { cmd <- f; return gotptest.Recv(t, out) }

	ref := do(func(p *gotp.Process) any { return p.Monitor(target) }).(gotp.Ref)
	if in, _ := n.ProcessInfo(target); len(in.MonitoredBy) != 1 || in.MonitoredBy[0] != w {
		t.Fatalf("MonitoredBy = %v, want [%v]", in.MonitoredBy, w)
	}
	if got := do(func(p *gotp.Process) any { return p.Demonitor(ref, false) }); got != true {
		t.Fatalf("Demonitor of an active monitor = %v, want true", got)
	}
	if got := do(func(p *gotp.Process) any { return p.Demonitor(ref, false) }); got != false {
		t.Fatalf("second Demonitor = %v, want false", got)
	}
	if in, _ := n.ProcessInfo(target); len(in.MonitoredBy) != 0 {
		t.Fatalf("MonitoredBy after Demonitor = %v", in.MonitoredBy)
	}
	// A second monitor that fires; the first must not.
	ref2 := do(func(p *gotp.Process) any { return p.Monitor(target) }).(gotp.Ref)
	n.Exit(target, errBoom) // synchronous: every Down is delivered when it returns
	if got := do(func(p *gotp.Process) any { return p.Info().MailboxLen }); got != 1 {
		t.Fatalf("mailbox holds %v messages, want the one Down", got)
	}
	got := do(func(p *gotp.Process) any { m, _ := p.Receive(context.Background()); return m })
	if got != (gotp.Down{Ref: ref2, PID: target, Reason: errBoom}) {
		t.Fatalf("got %#v", got)
	}
	if got := do(func(p *gotp.Process) any { return p.Demonitor(ref2, false) }); got != false {
		t.Fatalf("Demonitor after its Down = %v, want false", got)
	}
}

func TestDemonitorFlush(t *testing.T) {
	n := gotptest.NewNode(t)
	cmd := make(chan func(p *gotp.Process) any)
	out := make(chan any)
	_, err := n.Spawn(func(p *gotp.Process) error {
		for f := range cmd {
			out <- f(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(cmd)
	do := func(f func(p *gotp.Process) any) any { cmd <- f; return gotptest.Recv(t, out) }

	for _, buffered := range []bool{false, true} {
		a, b := waiter(t, n), waiter(t, n)
		refs := do(func(p *gotp.Process) any { return []gotp.Ref{p.Monitor(a), p.Monitor(b)} }).([]gotp.Ref)
		self := do(func(p *gotp.Process) any { return p.Self() }).(gotp.PID)
		n.Send(self, "before")
		n.Exit(a, errBoom)
		n.Exit(b, errBoom)
		n.Send(self, "after")
		if buffered {
			// Receiving "before" moves the rest of the mailbox into the
			// receiver's buffer: the flush must look there too.
			if got := do(func(p *gotp.Process) any { m, _ := p.Receive(context.Background()); return m }); got != "before" {
				t.Fatalf("got %v", got)
			}
		}
		if got := do(func(p *gotp.Process) any { return p.Demonitor(refs[0], true) }); got != false {
			t.Errorf("Demonitor(flush) of a fired monitor = %v, want false", got)
		}
		var rest []any
		do(func(p *gotp.Process) any {
			for p.Info().MailboxLen > 0 {
				m, _ := p.Receive(context.Background())
				rest = append(rest, m)
			}
			return nil
		})
		want := []any{gotp.Down{Ref: refs[1], PID: b, Reason: errBoom}, "after"}
		if !buffered {
			want = append([]any{"before"}, want...)
		}
		if len(rest) != len(want) {
			t.Fatalf("buffered=%v: mailbox after flush %v, want %v", buffered, rest, want)
		}
		for i := range want {
			if rest[i] != want[i] {
				t.Fatalf("buffered=%v: mailbox after flush %v, want %v", buffered, rest, want)
			}
		}
	}
}

func TestMonitorFuncAndNodeDemonitor(t *testing.T) {
	n := gotptest.NewNode(t)
	target := waiter(t, n)
	called := 0
	ref := n.MonitorFunc(target, func(gotp.Down) { called++ })
	if !n.Demonitor(ref, target) {
		t.Fatal("Node.Demonitor of an active monitor = false")
	}
	if n.Demonitor(ref, target) {
		t.Fatal("second Node.Demonitor = true")
	}
	var got []gotp.Down
	ref2 := n.MonitorFunc(target, func(d gotp.Down) { got = append(got, d) })
	n.Exit(target, errBoom) // fires the monitors before it returns
	if called != 0 {
		t.Errorf("a demonitored fn was called %d times", called)
	}
	if len(got) != 1 || got[0] != (gotp.Down{Ref: ref2, PID: target, Reason: errBoom}) {
		t.Errorf("fn got %v, want one Down with boom", got)
	}
	if n.Demonitor(ref2, target) {
		t.Error("Node.Demonitor after the Down = true")
	}
	if in, ok := n.ProcessInfo(target); ok {
		t.Errorf("dead target still listed: %+v", in)
	}
}

// A watcher that dies drops its monitors: the target no longer lists it.
func TestWatcherExitDropsItsMonitors(t *testing.T) {
	n := gotptest.NewNode(t)
	target := waiter(t, n)
	w, _, _ := monitorer(t, n, target)
	if in, _ := n.ProcessInfo(target); len(in.MonitoredBy) != 1 {
		t.Fatalf("MonitoredBy = %v", in.MonitoredBy)
	}
	n.Exit(w, gotp.ErrKill)
	if in, _ := n.ProcessInfo(target); len(in.MonitoredBy) != 0 {
		t.Fatalf("MonitoredBy after the watcher died = %v", in.MonitoredBy)
	}
}

// Once Demonitor(ref, true) returns, no Down of ref may reach the mailbox,
// even when the target was exiting at that moment. A MonitorFunc that
// blocks holds the target's exit in the middle of firing its monitors, so
// that (depending on map order) the watcher's Down is still to come when
// the watcher demonitors.
func TestDemonitorFlushWhileTargetExits(t *testing.T) {
	n := gotptest.NewNode(t)
	cmd := make(chan func(p *gotp.Process) any)
	out := make(chan any)
	_, err := n.Spawn(func(p *gotp.Process) error {
		for f := range cmd {
			out <- f(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(cmd)
	do := func(f func(p *gotp.Process) any) any { cmd <- f; return gotptest.Recv(t, out) }

	for i := range 40 {
		target := waiter(t, n)
		ref := do(func(p *gotp.Process) any { return p.Monitor(target) }).(gotp.Ref)
		firing, release := make(chan struct{}), make(chan struct{})
		n.MonitorFunc(target, func(gotp.Down) { close(firing); <-release })
		exited := make(chan struct{})
		go func() { n.Exit(target, errBoom); close(exited) }()
		gotptest.Recv(t, firing)
		flush := i%2 == 0
		active := do(func(p *gotp.Process) any { return p.Demonitor(ref, flush) }).(bool)
		close(release)
		gotptest.Recv(t, exited)
		want := 0 // flushed, or demonitored before the Down was delivered
		if !flush && !active {
			want = 1 // reported as fired: its Down is in the mailbox
		}
		if got := do(func(p *gotp.Process) any { return p.Info().MailboxLen }); got != want {
			t.Fatalf("round %d: Demonitor(flush=%v) returned %v, then the mailbox held %v messages, want %d", i, flush, active, got, want)
		}
		if want == 1 {
			m := do(func(p *gotp.Process) any { m, _ := p.Receive(context.Background()); return m })
			if d, ok := m.(gotp.Down); !ok || d.Ref != ref {
				t.Fatalf("round %d: got %#v", i, m)
			}
		}
	}
}

// MonitorFunc callbacks run before the process's links are signalled and
// before any Down message is delivered, so what they do is visible to
// every process that learns of the exit.
func TestMonitorFuncRunsBeforeLinksAndDowns(t *testing.T) {
	n := gotptest.NewNode(t)
	target := waiter(t, n)
	linked := waiter(t, n, gotp.LinkTo(target))
	w, _, got := monitorer(t, n, target)
	seen := make(chan []any, 1)
	n.MonitorFunc(target, func(gotp.Down) {
		in, _ := n.ProcessInfo(w)
		seen <- []any{n.IsAlive(linked), in.MailboxLen, len(got)}
	})
	done := gotptest.Watch(t, n, target)
	n.Send(target, errBoom)
	if s := gotptest.Recv(t, seen); s[0] != true || s[1] != 0 || s[2] != 0 {
		t.Fatalf("when fn ran: linked alive %v, watcher mailbox %v, Downs forwarded %v", s[0], s[1], s[2])
	}
	gotptest.Recv(t, done)
	if n.IsAlive(linked) {
		t.Fatal("the linked process survived")
	}
	if d := gotptest.Recv(t, got).(gotp.Down); d.Reason != errBoom {
		t.Fatalf("Down %v", d)
	}
}
