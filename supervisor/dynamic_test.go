package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// conns is a dynamic spec whose children are workers; it records the
// argument of every start.
type conns struct {
	mu   sync.Mutex
	args []string
}

func (c *conns) spec(restart supervisor.Restart) supervisor.DynamicSpec[string] {
	return supervisor.DynamicSpec[string]{
		Restart:   restart,
		Intensity: 100,
		Start: func(_ context.Context, sup *gotp.Process, user string) (gotp.PID, error) {
			c.mu.Lock()
			c.args = append(c.args, user)
			c.mu.Unlock()
			switch user {
			case "ignore":
				return gotp.PID{}, server.ErrIgnore
			case "fail":
				return gotp.PID{}, errBoom
			}
			return sup.SpawnLink(worker)
		},
	}
}

func (c *conns) started() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.args)
}

func startConns(t *testing.T, n *gotp.Node, sup gotp.PID, users ...string) []gotp.PID {
	t.Helper()
	var out []gotp.PID
	for _, u := range users {
		pid, err := supervisor.StartDynamicChild(gotptest.Context(t), n, sup, u)
		if err != nil {
			t.Fatalf("StartDynamicChild(%s): %v", u, err)
		}
		out = append(out, pid)
	}
	return out
}

// TestDynamicTemporary: a dead connection is not brought back, whatever
// the reason; the count goes down.
func TestDynamicTemporary(t *testing.T) {
	for _, ec := range exitCases {
		t.Run(ec.name, func(t *testing.T) {
			n := gotptest.NewNode(t)
			c := &conns{}
			sup, err := supervisor.StartDynamic(gotptest.Context(t), n, c.spec(supervisor.Temporary))
			if err != nil {
				t.Fatal(err)
			}
			ps := startConns(t, n, sup, "alice", "bob", "carol")
			wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 3, Workers: 3})
			down := gotptest.Watch(t, n, ps[1])
			ec.cause(n, ps[1])
			gotptest.Recv(t, down)
			which := mustWhich(t, n, sup)
			got := []gotp.PID{which[0].PID, which[1].PID}
			if len(which) != 2 || !slices.Equal(got, []gotp.PID{ps[0], ps[2]}) || which[0].ID != "" || which[0].Restart != supervisor.Temporary {
				t.Fatalf("which %+v", which)
			}
			wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 2, Workers: 2})
			if s := c.started(); !slices.Equal(s, []string{"alice", "bob", "carol"}) {
				t.Fatalf("starts %v: a temporary child was restarted", s)
			}
		})
	}
}

// TestDynamicRestartTypes: permanent children come back with their own
// argument; transient ones only after an abnormal exit.
func TestDynamicRestartTypes(t *testing.T) {
	for _, restart := range []supervisor.Restart{supervisor.Permanent, supervisor.Transient} {
		for _, ec := range exitCases {
			t.Run(restart.String()+"/"+ec.name, func(t *testing.T) {
				n := gotptest.NewNode(t)
				c := &conns{}
				sup, err := supervisor.StartDynamic(gotptest.Context(t), n, c.spec(restart))
				if err != nil {
					t.Fatal(err)
				}
				ps := startConns(t, n, sup, "alice", "bob")
				down := gotptest.Watch(t, n, ps[1])
				ec.cause(n, ps[1])
				gotptest.Recv(t, down)
				which := mustWhich(t, n, sup)
				restarted := restart == supervisor.Permanent || ec.abnormal
				if !restarted {
					if len(which) != 1 || which[0].PID != ps[0] {
						t.Fatalf("which %+v", which)
					}
					return
				}
				if len(which) != 2 || which[0].PID != ps[0] || which[1].PID == ps[1] || which[1].Restarts != 1 {
					t.Fatalf("which %+v", which)
				}
				if s := c.started(); !slices.Equal(s, []string{"alice", "bob", "bob"}) {
					t.Fatalf("starts %v, want bob restarted with its argument", s)
				}
			})
		}
	}
}

func TestDynamicManagement(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	c := &conns{}
	spec := c.spec(supervisor.Permanent)
	spec.MaxChildren = 2
	sup, err := supervisor.StartDynamic(ctx, n, spec)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := supervisor.StartDynamicChild(ctx, n, sup, "ignore"); err != nil || !pid.IsZero() {
		t.Fatalf("ignore: %v, %v", pid, err)
	}
	if _, err := supervisor.StartDynamicChild(ctx, n, sup, "fail"); !errors.Is(err, errBoom) || !errors.As(err, new(*supervisor.ChildStartError)) {
		t.Fatalf("fail: %v", err)
	}
	if _, err := supervisor.StartDynamicChild(ctx, n, sup, 42); !errors.As(err, new(*supervisor.ArgTypeError)) {
		t.Fatalf("wrong argument type: %v", err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1}) // OTP counts the template
	ps := startConns(t, n, sup, "a", "b")
	if _, err := supervisor.StartDynamicChild(ctx, n, sup, "c"); !errors.Is(err, supervisor.ErrMaxChildren) {
		t.Fatalf("beyond MaxChildren: %v", err)
	}
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, ps[0]); err != nil {
		t.Fatal(err)
	}
	if n.IsAlive(ps[0]) {
		t.Fatal("terminated child alive")
	}
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, ps[0]); err != nil {
		t.Fatalf("terminate twice: %v, want nil (OTP's ok for a pid that is not alive)", err)
	}
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, sup); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("terminate a live process that is no child: %v", err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})
	if _, err := supervisor.StartChild(ctx, n, sup, supervisor.Func("x", worker)); !errors.Is(err, supervisor.ErrDynamic) {
		t.Fatalf("StartChild on a dynamic supervisor: %v", err)
	}
	for _, f := range []func() error{
		func() error { return supervisor.TerminateChild(ctx, n, sup, "x") },
		func() error { _, err := supervisor.RestartChild(ctx, n, sup, "x"); return err },
		func() error { return supervisor.DeleteChild(ctx, n, sup, "x") },
	} {
		if err := f(); !errors.Is(err, supervisor.ErrDynamic) {
			t.Fatalf("id call on a dynamic supervisor: %v", err)
		}
	}
	if in, ok := supervisor.Inspect(n, sup); !ok || !in.Dynamic || len(in.Children) != 1 || in.Children[0].PID != ps[1] {
		t.Fatalf("Inspect %+v", in)
	}
}

// TestDynamicStopAllAtOnce: a dynamic supervisor stops its children
// together: ten children that ignore shutdown take one shutdown time, not
// ten.
func TestDynamicStopAllAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
		defer n.Stop(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[bool]{
			Shutdown: 2 * time.Second,
			Start: func(_ context.Context, sup *gotp.Process, stub bool) (gotp.PID, error) {
				if stub {
					return sup.SpawnLink(stubborn)
				}
				return sup.SpawnLink(worker)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var downs []<-chan error
		for i := range 20 {
			pid, err := supervisor.StartDynamicChild(ctx, n, sup, i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			downs = append(downs, gotptest.Watch(t, n, pid))
		}
		synctest.Wait()
		start := time.Now()
		if err := server.Stop(ctx, n, sup, nil); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("stop took %v, want one shutdown time", took)
		}
		for i, d := range downs {
			want := gotp.ErrShutdown
			if i%2 == 0 {
				want = gotp.ErrKilled
			}
			if r := <-d; !errors.Is(r, want) {
				t.Fatalf("child %d: %v, want %v", i, r, want)
			}
		}
	})
}
