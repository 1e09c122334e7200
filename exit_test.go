package gotp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestNormalExitDoesNotKillLinkedProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	survivor := waiter(t, n)
	dying := waiter(t, n, gotp.LinkTo(survivor))
	down := gotptest.Watch(t, n, dying)
	n.Send(dying, "stop normally")
	if r := gotptest.Recv(t, down); r != nil {
		t.Fatalf("reason = %v, want nil", r)
	}
	if !n.IsAlive(survivor) {
		t.Fatal("a normal exit killed a linked process")
	}
	if in, _ := n.ProcessInfo(survivor); len(in.Links) != 0 {
		t.Errorf("link to the exited process remains: %v", in.Links)
	}
}

func TestAbnormalExitPropagatesAlongChain(t *testing.T) {
	for _, reason := range []error{errBoom, gotp.ErrShutdown, fmt.Errorf("wrapped: %w", io.EOF)} {
		t.Run(reason.Error(), func(t *testing.T) {
			n := gotptest.NewNode(t)
			a := waiter(t, n)
			b := waiter(t, n, gotp.LinkTo(a))
			c := waiter(t, n, gotp.LinkTo(b))
			bystander := waiter(t, n)
			downs := []<-chan error{gotptest.Watch(t, n, a), gotptest.Watch(t, n, b), gotptest.Watch(t, n, c)}
			n.Send(a, reason)
			for i, d := range downs {
				if r := gotptest.Recv(t, d); r != reason {
					t.Errorf("process %d exited with %v, want %v", i, r, reason)
				}
			}
			if !n.IsAlive(bystander) {
				t.Error("an unlinked process died")
			}
		})
	}
}

func TestTrapExitReceivesExitMessages(t *testing.T) {
	n := gotptest.NewNode(t)
	trapperSink := gotptest.NewSink(t, n, gotp.TrapExit(true))
	trapper, got := trapperSink.PID(), trapperSink.C()
	for _, reason := range []error{nil, errBoom, gotp.ErrShutdown} {
		child := waiter(t, n, gotp.LinkTo(trapper))
		n.Send(child, reason)
		m := gotptest.Recv(t, got)
		if m != (gotp.Exit{From: child, Reason: reason}) {
			t.Errorf("got %#v, want Exit{From: %v, Reason: %v}", m, child, reason)
		}
	}
	if !n.IsAlive(trapper) {
		t.Fatal("a trapping process died of an exit signal")
	}
	if in, _ := n.ProcessInfo(trapper); !in.TrapExit || len(in.Links) != 0 {
		t.Errorf("info = %+v, want TrapExit and no links", in)
	}
}

func TestTrapExitSwitchedAtRuntime(t *testing.T) {
	n := gotptest.NewNode(t)
	trapping := make(chan bool)
	pid, res := run(t, n, func(p *gotp.Process) any {
		if was := p.TrapExit(true); was {
			return "was trapping already"
		}
		trapping <- true
		m, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		if was := p.TrapExit(false); !was {
			return "TrapExit(false) reported it was not trapping"
		}
		trapping <- false
		_, err = p.Receive(context.Background())
		return []any{m, err}
	})
	gotptest.Recv(t, trapping)
	down := gotptest.Watch(t, n, pid)
	n.Exit(pid, errBoom)
	gotptest.Recv(t, trapping)
	n.Exit(pid, errBoom)
	if r := gotptest.Recv(t, down); r != errBoom {
		t.Fatalf("reason = %v", r)
	}
	got := gotptest.Recv(t, res).([]any)
	if got[0] != (gotp.Exit{Reason: errBoom}) || !errors.Is(got[1].(error), errBoom) {
		t.Errorf("got %v", got)
	}
}

func TestKillCannotBeTrapped(t *testing.T) {
	n := gotptest.NewNode(t)
	victim := gotptest.NewSink(t, n, gotp.TrapExit(true)).PID()
	trapLinkedSink := gotptest.NewSink(t, n, gotp.TrapExit(true), gotp.LinkTo(victim))
	trapLinked, trapGot := trapLinkedSink.PID(), trapLinkedSink.C()
	plainLinked := waiter(t, n, gotp.LinkTo(victim))
	downs := []<-chan error{gotptest.Watch(t, n, victim), gotptest.Watch(t, n, plainLinked)}

	n.Exit(victim, gotp.ErrKill)

	for i, d := range downs {
		if r := gotptest.Recv(t, d); r != gotp.ErrKilled {
			t.Errorf("process %d exited with %v, want ErrKilled", i, r)
		}
	}
	// Linked processes get killed, not kill: a trapping one traps it.
	if m := gotptest.Recv(t, trapGot); m != (gotp.Exit{From: victim, Reason: gotp.ErrKilled}) {
		t.Errorf("trapping linked process got %#v", m)
	}
	if !n.IsAlive(trapLinked) {
		t.Error("ErrKilled through a link was not trappable")
	}
}

func TestKillFromProcessAndSelf(t *testing.T) {
	n := gotptest.NewNode(t)
	victim := gotptest.NewSink(t, n, gotp.TrapExit(true)).PID()
	down := gotptest.Watch(t, n, victim)
	_, res := run(t, n, func(p *gotp.Process) bool {
		p.Exit(victim, gotp.ErrKill)
		return true
	})
	gotptest.Recv(t, res)
	if r := gotptest.Recv(t, down); r != gotp.ErrKilled {
		t.Fatalf("reason = %v, want ErrKilled", r)
	}

	// A process that sends itself an abnormal exit signal dies of it.
	gate := make(chan struct{})
	pid, _ := run(t, n, func(p *gotp.Process) error {
		<-gate
		p.Exit(p.Self(), errBoom)
		_, err := p.Receive(context.Background())
		return err
	})
	down = gotptest.Watch(t, n, pid)
	close(gate)
	if r := gotptest.Recv(t, down); r != errBoom {
		t.Fatalf("self exit reason = %v, want boom", r)
	}
}

func TestShutdownVersusKill(t *testing.T) {
	n := gotptest.NewNode(t)
	// Shutdown is trappable ...
	trapper, res := run(t, n, func(p *gotp.Process) any {
		m, _ := p.Receive(context.Background())
		return m
	}, gotp.TrapExit(true))
	n.Exit(trapper, gotp.ErrShutdown)
	if m := gotptest.Recv(t, res); m != (gotp.Exit{Reason: gotp.ErrShutdown}) {
		t.Fatalf("got %#v, want Exit{Reason: shutdown} from the zero PID", m)
	}
	// ... and kills a process that does not trap, with reason shutdown.
	plain := waiter(t, n)
	down := gotptest.Watch(t, n, plain)
	n.Exit(plain, gotp.ErrShutdown)
	if r := gotptest.Recv(t, down); r != gotp.ErrShutdown {
		t.Fatalf("reason = %v, want ErrShutdown", r)
	}
	if !gotp.IsNormal(gotp.ErrShutdown) || !gotp.IsNormal(nil) || !gotp.IsNormal(fmt.Errorf("x: %w", gotp.ErrShutdown)) {
		t.Error("IsNormal does not count nil and shutdown as normal")
	}
	for _, r := range []error{errBoom, gotp.ErrKilled, gotp.ErrKill, &gotp.PanicError{Value: 1}} {
		if gotp.IsNormal(r) {
			t.Errorf("IsNormal(%v) = true", r)
		}
	}
}

func TestExitNilSignal(t *testing.T) {
	n := gotptest.NewNode(t)
	plain := waiter(t, n)
	n.Exit(plain, nil)
	if !n.IsAlive(plain) {
		t.Fatal("a normal exit signal killed a process that does not trap")
	}
	trapperSink := gotptest.NewSink(t, n, gotp.TrapExit(true))
	trapper, got := trapperSink.PID(), trapperSink.C()
	n.Exit(trapper, nil)
	if m := gotptest.Recv(t, got); m != (gotp.Exit{}) {
		t.Fatalf("got %#v, want Exit{} (zero From, nil Reason)", m)
	}
	// From a process, From is that process.
	_, res := run(t, n, func(p *gotp.Process) gotp.PID {
		p.Exit(trapper, nil)
		return p.Self()
	})
	from := gotptest.Recv(t, res)
	if m := gotptest.Recv(t, got); m != (gotp.Exit{From: from}) {
		t.Fatalf("got %#v, want Exit{From: %v}", m, from)
	}
}

func TestPanicBecomesPanicError(t *testing.T) {
	n := gotptest.NewNode(t)
	trapperSink := gotptest.NewSink(t, n, gotp.TrapExit(true))
	trapper, got := trapperSink.PID(), trapperSink.C()
	gate := make(chan struct{})
	pid, err := n.Spawn(func(p *gotp.Process) error {
		<-gate
		panicHere()
		return nil
	}, gotp.LinkTo(trapper))
	if err != nil {
		t.Fatal(err)
	}
	down := gotptest.Watch(t, n, pid)
	close(gate)
	m := gotptest.Recv(t, got).(gotp.Exit)
	r := gotptest.Recv(t, down)
	var pe *gotp.PanicError
	if !errors.As(r, &pe) || m.From != pid || m.Reason != r {
		t.Fatalf("reason %v, Exit %#v; want the same *PanicError in both", r, m)
	}
	if pe.Value != "deliberate" || pe.Error() != "panic: deliberate" {
		t.Errorf("panic value %v, Error %q", pe.Value, pe.Error())
	}
	if !bytes.Contains(pe.Stack, []byte("panicHere")) {
		t.Errorf("stack does not show the panicking function:\n%s", pe.Stack)
	}
	if pe.Unwrap() != nil {
		t.Error("a non-error panic value unwraps to something")
	}

	// panic(err) unwraps to err.
	gate2 := make(chan struct{})
	pid2, _ := n.Spawn(func(p *gotp.Process) error { <-gate2; panic(io.ErrUnexpectedEOF) })
	down2 := gotptest.Watch(t, n, pid2)
	close(gate2)
	r = gotptest.Recv(t, down2)
	if !errors.Is(r, io.ErrUnexpectedEOF) {
		t.Errorf("panic(io.ErrUnexpectedEOF) reason %v does not unwrap to it", r)
	}
	if !n.IsAlive(trapper) {
		t.Error("panics disturbed another process")
	}
}

//go:noinline
func panicHere() { panic("deliberate") }

func TestLinkIdempotentAndUnlink(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n)
	cmd := make(chan string)
	b, res := run(t, n, func(p *gotp.Process) error {
		for c := range cmd {
			switch c {
			case "link":
				if err := p.Link(a); err != nil {
					return err
				}
			case "unlink":
				p.Unlink(a)
			case "self":
				if err := p.Link(p.Self()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	defer close(cmd)
	links := func(pid gotp.PID) []gotp.PID { in, _ := n.ProcessInfo(pid); return in.Links }
	for range 3 {
		cmd <- "link"
	}
	cmd <- "self"
	cmd <- "" // the previous commands are done once this one is taken
	if fmt.Sprint(links(a)) != fmt.Sprint([]gotp.PID{b}) || fmt.Sprint(links(b)) != fmt.Sprint([]gotp.PID{a}) {
		t.Fatalf("links after 3 Links: a %v, b %v", links(a), links(b))
	}
	cmd <- "unlink"
	cmd <- ""
	if len(links(a)) != 0 || len(links(b)) != 0 {
		t.Fatalf("one Unlink left links: a %v, b %v", links(a), links(b))
	}
	down := gotptest.Watch(t, n, a)
	n.Send(a, errBoom)
	gotptest.Recv(t, down)
	if !n.IsAlive(b) {
		t.Fatal("an unlinked process received the exit signal")
	}
	select {
	case err := <-res:
		t.Fatal(err)
	default:
	}
}

func TestUnlinkFromTheOtherSide(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n)
	b := waiter(t, n, gotp.LinkTo(a))
	unlinked := make(chan struct{})
	c, _ := run(t, n, func(p *gotp.Process) error {
		if err := p.Link(b); err != nil {
			return err
		}
		p.Unlink(b)
		close(unlinked)
		_, err := p.Receive(context.Background())
		return err
	})
	gotptest.Recv(t, unlinked)
	down := gotptest.Watch(t, n, b)
	n.Send(a, errBoom)
	if r := gotptest.Recv(t, down); r != errBoom {
		t.Fatalf("b exited with %v", r)
	}
	if !n.IsAlive(c) {
		t.Fatal("a process that unlinked was killed through the link")
	}
}

func TestLinkToDeadOrUnknownPID(t *testing.T) {
	n := gotptest.NewNode(t)
	dead := waiter(t, n)
	down := gotptest.Watch(t, n, dead)
	n.Send(dead, nil)
	gotptest.Recv(t, down)
	_, res := run(t, n, func(p *gotp.Process) []error {
		return []error{
			p.Link(dead),
			p.Link(gotp.PID{}),
			p.Link(gotp.NewPID(n.Name(), n.Creation(), 1<<40)),
			p.Link(gotp.NewPID("elsewhere", 1, 1)),
		}
	})
	for i, err := range gotptest.Recv(t, res) {
		if !errors.Is(err, gotp.ErrNoProc) {
			t.Errorf("Link %d = %v, want ErrNoProc", i, err)
		}
	}
}

func TestLinkToSpawnOption(t *testing.T) {
	n := gotptest.NewNode(t)
	dead := waiter(t, n)
	down := gotptest.Watch(t, n, dead)
	n.Send(dead, nil)
	gotptest.Recv(t, down)

	before := n.ProcessCount()
	ran := make(chan struct{}, 1)
	_, err := n.Spawn(func(*gotp.Process) error { ran <- struct{}{}; return nil }, gotp.LinkTo(dead), gotp.Named("linked"))
	if !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("Spawn LinkTo dead = %v, want ErrNoProc", err)
	}
	_, err = n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil }), nil, gotp.LinkTo(dead))
	if !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("SpawnHandler LinkTo dead = %v, want ErrNoProc", err)
	}
	if n.ProcessCount() != before {
		t.Errorf("a failed spawn left a process: count %d, want %d", n.ProcessCount(), before)
	}
	if _, ok := n.Whereis("linked"); ok {
		t.Error("a failed spawn kept its name")
	}
	select {
	case <-ran:
		t.Error("the function of a failed spawn ran")
	default:
	}

	// The link exists before the child runs: a child that dies at once
	// always takes its non-trapping parent with it.
	for i := range 200 {
		parent := waiter(t, n)
		pdown := gotptest.Watch(t, n, parent)
		reason := fmt.Errorf("child %d", i)
		if _, err := n.Spawn(func(*gotp.Process) error { return reason }, gotp.LinkTo(parent)); err != nil {
			t.Fatal(err)
		}
		if r := gotptest.Recv(t, pdown); r != reason {
			t.Fatalf("parent exited with %v, want %v", r, reason)
		}
	}
}

func TestSpawnLink(t *testing.T) {
	n := gotptest.NewNode(t)
	_, res := run(t, n, func(p *gotp.Process) any {
		p.TrapExit(true)
		child, err := p.SpawnLink(func(*gotp.Process) error { return errBoom })
		if err != nil {
			return err
		}
		m, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		return m == gotp.Exit{From: child, Reason: errBoom}
	})
	if got := gotptest.Recv(t, res); got != true {
		t.Fatalf("got %v", got)
	}
}

// TestTrappingLinkHearsLast: when a process dies, the linked processes that
// die with it (they do not trap exits) are dead, names freed, by the time a
// linked process that traps exits (a supervisor) receives its Exit message.
func TestTrappingLinkHearsLast(t *testing.T) {
	n := gotptest.NewNode(t)
	for i := range 50 {
		heard := make(chan bool, 1)
		ready := make(chan gotp.PID, 1)
		n.Spawn(func(p *gotp.Process) error { // the trapping "supervisor"
			a, err := p.SpawnLink(func(p *gotp.Process) error {
				for range 5 {
					if _, err := p.SpawnLink(func(p *gotp.Process) error {
						<-p.Context().Done()
						return nil
					}, gotp.Named(fmt.Sprintf("child-%d-%d", i, len(p.Info().Links)))); err != nil {
						return err
					}
				}
				ready <- p.Self()
				<-p.Context().Done()
				return nil
			})
			if err != nil {
				return err
			}
			for {
				msg, err := p.Receive(p.Context())
				if err != nil {
					return nil
				}
				if e, ok := msg.(gotp.Exit); ok && e.From == a {
					held := false
					for _, name := range n.Registered() {
						if strings.HasPrefix(name, fmt.Sprintf("child-%d-", i)) {
							held = true
						}
					}
					heard <- !held
					return nil
				}
			}
		}, gotp.TrapExit(true))
		n.Exit(gotptest.Recv(t, ready), errBoom)
		if !gotptest.Recv(t, heard) {
			t.Fatalf("round %d: the trapping process heard of the exit before the linked children were gone", i)
		}
	}
}
