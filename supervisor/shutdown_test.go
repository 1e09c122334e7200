package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// slowStop traps exits and, told to exit, takes d to stop.
func slowStop(d time.Duration) func(p *gotp.Process) error {
	return func(p *gotp.Process) error {
		p.TrapExit(true)
		for {
			msg, err := p.Receive(p.Context())
			if err != nil {
				return err
			}
			if _, ok := msg.(gotp.Exit); ok {
				select {
				case <-time.After(d):
				case <-p.Context().Done():
				}
				return gotp.ErrShutdown
			}
		}
	}
}

// TestShutdownTimeouts terminates one child per shutdown setting and
// checks how long it took (in fake time) and how the child ended.
func TestShutdownTimeouts(t *testing.T) {
	cases := []struct {
		name     string
		fn       func(p *gotp.Process) error
		typ      supervisor.ChildType
		shutdown time.Duration
		took     time.Duration
		reason   error
		killLog  bool
	}{
		{"stubborn/timeout", stubborn, supervisor.Worker, 2 * time.Second, 2 * time.Second, gotp.ErrKilled, true},
		{"stubborn/default-worker", stubborn, supervisor.Worker, 0, supervisor.DefaultShutdown, gotp.ErrKilled, true},
		{"stubborn/brutal", stubborn, supervisor.Worker, supervisor.BrutalKill, 0, gotp.ErrKilled, false},
		{"prompt/timeout", worker, supervisor.Worker, 2 * time.Second, 0, gotp.ErrShutdown, false},
		{"slow/within-timeout", slowStop(time.Second), supervisor.Worker, 2 * time.Second, time.Second, gotp.ErrShutdown, false},
		{"slow/infinity", slowStop(time.Minute), supervisor.Worker, supervisor.Infinity, time.Minute, gotp.ErrShutdown, false},
		{"slow/default-supervisor", slowStop(time.Minute), supervisor.Supervisor, 0, time.Minute, gotp.ErrShutdown, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := gotptest.NewLogRecorder()
				n := gotp.NewNode(gotp.Options{Name: "t", Logger: rec.Logger()})
				defer n.Stop(context.Background())
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				c := supervisor.Func("c", tc.fn)
				c.Shutdown, c.Type = tc.shutdown, tc.typ
				sup, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{c}})
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the child is waiting in Receive (it trapped exits)
				pid := pids(mustWhich(t, n, sup))["c"]
				down := gotptest.Watch(t, n, pid)
				start := time.Now()
				if err := supervisor.TerminateChild(ctx, n, sup, "c"); err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took != tc.took {
					t.Fatalf("TerminateChild took %v, want %v", took, tc.took)
				}
				if r := <-down; !errors.Is(r, tc.reason) {
					t.Fatalf("child exited with %v, want %v", r, tc.reason)
				}
				if got := len(rec.Find("supervisor: child did not shut down in time, killing it")); (got == 1) != tc.killLog {
					t.Fatalf("kill logged %d times", got)
				}
				w := mustWhich(t, n, sup)
				if w[0].State != supervisor.ChildNotRunning {
					t.Fatalf("after TerminateChild: %+v", w[0])
				}
			})
		})
	}
}

// TestStopKillsStubbornChildren: stopping a supervisor stops children in
// reverse start order, killing the one that ignores shutdown when its
// time is up, and then exits with the stop reason.
func TestStopKillsStubbornChildren(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
		defer n.Stop(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		rec := &recorder{}
		s := supervisor.Func("s", stubborn, gotp.TrapExit(true)) // trapping before any signal can arrive
		s.Shutdown = 3 * time.Second
		sup, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{
			recChild("a", rec), s, recChild("b", rec),
		}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sp := pids(mustWhich(t, n, sup))["s"]
		sDown := gotptest.Watch(t, n, sp)
		supDown := gotptest.Watch(t, n, sup)
		start := time.Now()
		if err := server.Stop(ctx, n, sup, errBoom); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("stop took %v, want the stubborn child's 3s", took)
		}
		if r := <-sDown; !errors.Is(r, gotp.ErrKilled) {
			t.Fatalf("stubborn child: %v", r)
		}
		if r := <-supDown; !errors.Is(r, errBoom) {
			t.Fatalf("supervisor exit reason %v, want the stop reason", r)
		}
		if got := rec.get(); !slices.Equal(got, []string{"start a", "start b", "stop b", "stop a"}) {
			t.Fatalf("events %v", got)
		}
	})
}

// TestStopOrderTopDown: Node.Stop stops a tree top-down, each supervisor's
// children in reverse start order, subtrees completely before their elder
// siblings.
func TestStopOrderTopDown(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
	rec := &recorder{}
	ctx := gotptest.Context(t)
	sub := supervisor.Spec{Children: []supervisor.ChildSpec{recChild("x", rec), recChild("y", rec)}}
	dyn := supervisor.DynamicSpec[string]{
		Start: func(ctx context.Context, sup *gotp.Process, id string) (gotp.PID, error) {
			return server.StartLink(ctx, sup, &recServer{id: id, rec: rec})
		},
	}
	root, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{
		recChild("a", rec), sub.ChildSpec("sub"), dyn.ChildSpec("dyn", server.Named("dyn")), recChild("b", rec),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := supervisor.StartDynamicChild(ctx, n, gotp.Name("dyn"), "d1"); err != nil {
		t.Fatal(err)
	}
	rootDown := gotptest.Watch(t, n, root)
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"start a", "start x", "start y", "start b", "start d1", "stop b", "stop d1", "stop y", "stop x", "stop a"}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	if r := gotptest.Recv(t, rootDown); !errors.Is(r, gotp.ErrShutdown) {
		t.Fatalf("root exited with %v", r)
	}
	if c := n.ProcessCount(); c != 0 {
		t.Fatalf("%d processes left", c)
	}
}

// TestParentExitStopsSupervisor: an exit signal from the parent stops the
// children and the supervisor with the parent's reason.
func TestParentExitStopsSupervisor(t *testing.T) {
	n := gotptest.NewNode(t)
	rec := &recorder{}
	supCh := make(chan gotp.PID, 1)
	parent, err := n.Spawn(func(p *gotp.Process) error {
		sup, err := supervisor.StartLink(context.Background(), p, supervisor.Spec{
			Children: []supervisor.ChildSpec{recChild("a", rec), recChild("b", rec)},
		})
		if err != nil {
			return err
		}
		supCh <- sup
		msg, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		return msg.(exitWith).reason
	})
	if err != nil {
		t.Fatal(err)
	}
	sup := <-supCh
	down := gotptest.Watch(t, n, sup)
	n.Send(parent, exitWith{errBoom})
	if r := gotptest.Recv(t, down); !errors.Is(r, errBoom) {
		t.Fatalf("supervisor exited with %v, want the parent's reason", r)
	}
	if got := rec.get(); !slices.Equal(got, []string{"start a", "start b", "stop b", "stop a"}) {
		t.Fatalf("events %v", got)
	}
}

// TestNodeStopDeadlineWithInfiniteShutdown: a child that ignores shutdown
// under an Infinity shutdown holds Node.Stop until its context ends; Stop
// then kills everything, and the supervisor's goroutine, blocked waiting
// for that child, ends too (goleak checks it at the end of the package).
func TestNodeStopDeadlineWithInfiniteShutdown(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
	s := supervisor.Func("s", stubborn, gotp.TrapExit(true)) // trapping before any signal can arrive
	s.Shutdown = supervisor.Infinity
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{s}})
	if err != nil {
		t.Fatal(err)
	}
	mustWhich(t, n, sup)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	if err := n.Stop(gotptest.Context(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if c := n.ProcessCount(); c != 0 {
		t.Fatalf("%d processes left", c)
	}
}

// endsNormally traps exits, says so on trapping, and, told to exit, ends
// normally (reason nil): as a child that finished its work just as the
// shutdown reached it.
func endsNormally(trapping chan<- struct{}) func(p *gotp.Process) error {
	return func(p *gotp.Process) error {
		p.TrapExit(true)
		trapping <- struct{}{}
		return receiveUntilExit(p)
	}
}

func receiveUntilExit(p *gotp.Process) error {
	for {
		msg, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		if _, ok := msg.(gotp.Exit); ok {
			return nil
		}
	}
}

// TestShutdownNormalExit: a child that is not permanent may end normally
// instead of with the shutdown, and stopping its supervisor logs no error
// for it (OTP accepts normal from a temporary or transient child); a
// permanent child that does so is reported.
func TestShutdownNormalExit(t *testing.T) {
	for _, tc := range []struct {
		restart supervisor.Restart
		logged  bool
	}{{supervisor.Temporary, false}, {supervisor.Transient, false}, {supervisor.Permanent, true}} {
		t.Run(tc.restart.String(), func(t *testing.T) {
			for _, dynamic := range []bool{false, true} {
				rec := gotptest.NewLogRecorder()
				trapping := make(chan struct{}, 1)
				n := gotp.NewNode(gotp.Options{Name: "t", Logger: rec.Logger()})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var sup gotp.PID
				var err error
				if dynamic {
					spec := supervisor.DynamicSpec[int]{Restart: tc.restart, Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
						return sup.SpawnLink(endsNormally(trapping))
					}}
					sup, err = supervisor.StartDynamic(ctx, n, spec)
					if err == nil {
						_, err = supervisor.StartDynamicChild(ctx, n, sup, 0)
					}
				} else {
					c := supervisor.Func("c", endsNormally(trapping))
					c.Restart = tc.restart
					sup, err = supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{c}})
				}
				if err != nil {
					t.Fatal(err)
				}
				<-trapping
				if err := server.Stop(ctx, n, sup, gotp.ErrShutdown); err != nil {
					t.Fatal(err)
				}
				if got := len(rec.Find("supervisor: child shutdown error")); (got > 0) != tc.logged {
					t.Errorf("dynamic %v: %d shutdown errors logged, want logged %v", dynamic, got, tc.logged)
				}
				cancel()
				n.Stop(context.Background())
			}
		})
	}
}
