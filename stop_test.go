package gotp_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"go.uber.org/goleak"
)

func stopCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), gotptest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func TestStopEndsEveryProcessAndGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	n := gotp.NewNode(gotp.Options{})
	var reasons sync.Map
	track := func(pid gotp.PID) {
		n.MonitorFunc(pid, func(d gotp.Down) { reasons.Store(pid, d.Reason) })
	}
	for range 50 {
		track(waiter(t, n))
		pid, _ := n.Spawn(func(p *gotp.Process) error { <-p.Context().Done(); return nil })
		track(pid)
		pid, _ = n.Spawn(func(p *gotp.Process) error {
			for {
				m, err := p.Receive(context.Background())
				if err != nil {
					return err
				}
				if ex, ok := m.(gotp.Exit); ok && errors.Is(ex.Reason, gotp.ErrShutdown) {
					return ex.Reason
				}
			}
		}, gotp.TrapExit(true))
		track(pid)
		h, _ := n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil }), nil)
		track(h)
		n.Send(h, "busy")
	}
	// A chain of links, too: each dies of shutdown, from Stop or its link.
	prev := waiter(t, n)
	track(prev)
	for range 20 {
		prev = waiter(t, n, gotp.LinkTo(prev))
		track(prev)
	}
	count := n.ProcessCount()
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n.ProcessCount() != 0 || len(n.Processes()) != 0 {
		t.Fatalf("after Stop: %d processes, %v", n.ProcessCount(), n.Processes())
	}
	seen := 0
	reasons.Range(func(k, v any) bool {
		seen++
		if v != gotp.ErrShutdown {
			t.Errorf("%v ended with %v, want ErrShutdown", k, v)
		}
		return true
	})
	if seen != count {
		t.Errorf("%d of %d processes reported an exit", seen, count)
	}
}

func TestStopOldestFirstWaitingForTrappingProcesses(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	events := make(chan string, 10)
	release := make(chan struct{})
	trapping := func(name string, hold bool) gotp.PID {
		pid, err := n.Spawn(func(p *gotp.Process) error {
			m, err := p.Receive(context.Background())
			if err != nil {
				return err
			}
			if m != (gotp.Exit{Reason: gotp.ErrShutdown}) {
				events <- name + " got something else"
			}
			events <- name
			if hold {
				<-release
			}
			return gotp.ErrShutdown
		}, gotp.TrapExit(true))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	trapping("old", true)
	young := trapping("young", false)
	stopped := make(chan error)
	go func() { stopped <- n.Stop(stopCtx(t)) }()
	if e := gotptest.Recv(t, events); e != "old" {
		t.Fatalf("first to hear of shutdown: %q", e)
	}
	// old is still running: young must not have been signalled yet.
	if in, ok := n.ProcessInfo(young); !ok || in.MailboxLen != 0 || len(events) != 0 {
		t.Fatalf("young signalled before old ended: %+v, %d events", in, len(events))
	}
	close(release)
	if e := gotptest.Recv(t, events); e != "young" {
		t.Fatalf("second: %q", e)
	}
	if err := gotptest.Recv(t, stopped); err != nil {
		t.Fatal(err)
	}
}

func TestStopIdempotentAndRefusesSpawn(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	waiter(t, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := n.Stop(stopCtx(t)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatalf("Stop again: %v", err)
	}
	if _, err := n.Spawn(func(*gotp.Process) error { return nil }); !errors.Is(err, gotp.ErrNodeStopped) {
		t.Fatalf("Spawn after Stop = %v", err)
	}
	h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
	if _, err := n.SpawnHandler(h, nil); !errors.Is(err, gotp.ErrNodeStopped) {
		t.Fatalf("SpawnHandler after Stop = %v", err)
	}
	// Everything else is a harmless no-op on a stopped node.
	n.Send(gotp.NewPID(n.Name(), n.Creation(), 1), "x")
	n.Exit(gotp.NewPID(n.Name(), n.Creation(), 1), errBoom)
	if n.ProcessCount() != 0 {
		t.Fatal("processes after Stop")
	}
}

// A process spawned by a trapping process while it shuts down is refused.
func TestSpawnDuringStop(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	res := make(chan error, 1)
	_, err := n.Spawn(func(p *gotp.Process) error {
		if _, err := p.Receive(context.Background()); err != nil {
			return err
		}
		_, err := p.Spawn(func(*gotp.Process) error { return nil })
		res <- err
		return nil
	}, gotp.TrapExit(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := gotptest.Recv(t, res); !errors.Is(err, gotp.ErrNodeStopped) {
		t.Fatalf("Spawn during Stop = %v", err)
	}
}

func TestStopDeadlineWithTrappingProcessIgnoringShutdown(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	stubborn, err := n.Spawn(func(p *gotp.Process) error {
		for {
			if _, err := p.Receive(context.Background()); err != nil {
				return err // only a kill gets through
			}
		}
	}, gotp.TrapExit(true))
	if err != nil {
		t.Fatal(err)
	}
	d := gotptest.Watch(t, n, stubborn)
	start := time.Now() // before the deadline is set, so that it is at least 50ms after start
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("Stop gave up before its deadline")
	}
	if r := gotptest.Recv(t, d); r != gotp.ErrKilled {
		t.Fatalf("stubborn process ended with %v, want ErrKilled", r)
	}
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopDeadlineWithGoroutineIgnoringShutdown(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	release, started := make(chan struct{}), make(chan struct{})
	_, err := n.Spawn(func(*gotp.Process) error {
		close(started)
		<-release // neither receives nor watches its context
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gotptest.Recv(t, started)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	if n.ProcessCount() != 0 {
		t.Fatal("the process is still listed")
	}
	close(release)
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatalf("Stop after the goroutine returned: %v", err)
	}
}

func TestTwoNodesAreIndependent(t *testing.T) {
	a := gotp.NewNode(gotp.Options{Name: "a"})
	b := gotp.NewNode(gotp.Options{Name: "b"})
	defer b.Stop(context.Background())
	pa := waiter(t, a, gotp.Named("svc"))
	pbSink := gotptest.NewSink(t, b, gotp.Named("svc")) // the same name on each node
	pb, got := pbSink.PID(), pbSink.C()
	if wa, _ := a.Whereis("svc"); wa != pa {
		t.Fatal("a's name")
	}
	if wb, _ := b.Whereis("svc"); wb != pb {
		t.Fatal("b's name")
	}
	if pa.Node() != "a" || pb.Node() != "b" {
		t.Fatalf("PIDs %v %v", pa, pb)
	}
	if _, ok := a.ProcessInfo(pb); ok {
		t.Fatal("a knows b's process")
	}
	if err := a.Stop(stopCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !b.IsAlive(pb) || b.ProcessCount() != 1 {
		t.Fatal("stopping a disturbed b")
	}
	b.Send(pb, "still here")
	if m := gotptest.Recv(t, got); m != "still here" {
		t.Fatal(m)
	}
	if _, err := b.Spawn(func(*gotp.Process) error { return nil }); err != nil {
		t.Fatalf("b refuses spawns after a stopped: %v", err)
	}

	// Same name, different creation: PIDs of one never reach the other.
	c := gotp.NewNode(gotp.Options{Name: "b", Creation: b.Creation() + 1})
	defer c.Stop(context.Background())
	pcSink := gotptest.NewSink(t, c)
	pc, gotc := pcSink.PID(), pcSink.C()
	b.Send(pc, "cross")
	c.Send(pb, "cross")
	if pc == pb || len(got) != 0 || len(gotc) != 0 {
		t.Fatalf("a message crossed incarnations (pc %v, pb %v)", pc, pb)
	}
}

// Spawns, sends and timers racing Stop: every spawn either fails with
// ErrNodeStopped or makes a process that Stop ends, and nothing is left.
func TestSpawnRacingStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 20 {
		n := gotp.NewNode(gotp.Options{})
		h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for {
					var pid gotp.PID
					var err error
					if g%2 == 0 {
						pid, err = n.Spawn(func(p *gotp.Process) error {
							_, err := p.Receive(context.Background())
							return err
						}, gotp.TrapExit(g == 2))
					} else {
						pid, err = n.SpawnHandler(h, nil)
					}
					if errors.Is(err, gotp.ErrNodeStopped) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					n.Send(pid, "work")
					n.SendAfter(time.Millisecond, pid, "later")
				}
			})
		}
		if err := n.Stop(stopCtx(t)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := n.Stop(stopCtx(t)); err != nil {
			t.Fatal(err)
		}
		if c := n.ProcessCount(); c != 0 {
			t.Fatalf("%d processes outlived Stop", c)
		}
	}
}
