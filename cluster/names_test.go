package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

func waitName(t testing.TB, ms []member, space, name string, want gotp.PID) {
	t.Helper()
	gotptest.EventuallyWithin(t, 10*time.Second, fmt.Sprintf("%s held by %v everywhere", name, want), func() bool {
		for _, m := range ms {
			pid, ok := m.c.Names(space).Whereis(name)
			if want.IsZero() {
				if ok {
					return false
				}
			} else if !ok || pid != want {
				return false
			}
		}
		return true
	})
}

func TestNames(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	a, b, c := ms[0], ms[1], ms[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p1, _ := sinkOf(t, a.n)
	gotptest.Must(t, a.c.Names("").Register(ctx, "one", p1))
	waitName(t, ms, "", "one", p1)
	// Taken anywhere: refused everywhere, naming the holder.
	p2, _ := sinkOf(t, c.n)
	err := c.c.Names("").Register(ctx, "one", p2)
	if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); !ok || e.Owner != p1 {
		t.Fatalf("a taken name: %v", err)
	}
	// Spaces are apart.
	gotptest.Must(t, c.c.Names("users").Register(ctx, "one", p2))
	waitName(t, ms, "users", "one", p2)
	if got := b.c.Names("users").Registered(); len(got) != 1 || got[0] != "one" {
		t.Fatalf("registered in users: %v", got)
	}
	// Only a node's own processes.
	if err := b.c.Names("").Register(ctx, "x", p1); err != ErrNotLocal {
		t.Fatalf("registering another node's process: %v", err)
	}
	// The holder's exit frees the name everywhere.
	a.n.Exit(p1, gotp.ErrKill)
	waitName(t, ms, "", "one", gotp.PID{})
	// Unregister from another node than the holder's.
	if !a.c.Names("users").Unregister("one") {
		t.Fatal("unregister of a held name said false")
	}
	waitName(t, ms, "users", "one", gotp.PID{})
	// A lost node's names go.
	p3, _ := sinkOf(t, c.n)
	gotptest.Must(t, c.c.Names("").Register(ctx, "three", p3))
	waitName(t, ms, "", "three", p3)
	crash(c)
	waitName(t, ms[:2], "", "three", gotp.PID{})
}

// Concurrent registrations of one name on every node: exactly one wins,
// the others are refused with the winner, and every node agrees.
func TestNamesRace(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	for round := range 10 {
		name := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []gotp.PID
		var refused []gotp.PID
		for _, m := range ms {
			for range 3 {
				pid, _ := sinkOf(t, m.n)
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					err := m.c.Names("").Register(ctx, name, pid)
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						won = append(won, pid)
					} else if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok {
						refused = append(refused, e.Owner)
					} else {
						t.Errorf("register: %v", err)
					}
				})
			}
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d winners", round, len(won))
		}
		for _, o := range refused {
			if o != won[0] {
				t.Fatalf("round %d: refused naming %v, winner %v", round, o, won[0])
			}
		}
		waitName(t, ms, "", name, won[0])
	}
}

type named struct {
	server.Defaults
	tag string
}

func (s named) HandleCall(*gotp.Process, server.From, any) (any, error) { return s.tag, nil }

// A server started under a cluster-wide name: server.Start, server.Call
// and server.Cast from any node by the name, with no network to resolve
// it; a second start anywhere is already_started.
func TestNamesVia(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, err := server.Start(ctx, a.n, named{tag: "on a"}, server.WithVia(a.c.Names("").Via("kv")))
	gotptest.Must(t, err)
	waitName(t, ms, "", "kv", pid)
	got, err := server.Call[string](ctx, b.n, b.c.Names("").Via("kv"), "who")
	if err != nil || got != "on a" {
		t.Fatalf("call by global name from b: %q, %v", got, err)
	}
	_, err = server.Start(ctx, b.n, named{tag: "on b"}, server.WithVia(b.c.Names("").Via("kv")))
	if e, ok := errors.AsType[*server.AlreadyStartedError](err); !ok || e.PID != pid {
		t.Fatalf("second start under the name: %v", err)
	}
	gotptest.Must(t, server.Stop(ctx, b.n, b.c.Names("").Via("kv"), nil))
	waitName(t, ms, "", "kv", gotp.PID{})
}

// A name held on both sides of a healed partition: the earlier
// registration keeps it, the other holder gets an exit whose reason is a
// *NameConflictError, and every node agrees.
func TestNamesConflictAfterPartition(t *testing.T) {
	a, b, c, cut := partitionable(t)
	ms := []member{a, b, c}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, _ := a.c.Subscribe()
	defer sub.Close()
	cut(true)
	waitEvent(t, sub, NodeDown, "c", 2*a.c.opts.HeartbeatTimeout+3*time.Second)
	gotptest.EventuallyWithin(t, 10*time.Second, "c alone", func() bool { return len(c.c.Nodes()) == 0 })

	first, _ := sinkOf(t, a.n, gotp.TrapExit(true))
	gotptest.Must(t, a.c.Names("").Register(ctx, "solo", first))
	time.Sleep(2 * time.Millisecond)
	second, sch := sinkOf(t, c.n, gotp.TrapExit(true))
	gotptest.Must(t, c.c.Names("").Register(ctx, "solo", second)) // c cannot see a's
	// And one the other way round, to see the rule is about time, not
	// about which side: c's is earlier here.
	early, ech := sinkOf(t, c.n, gotp.TrapExit(true))
	gotptest.Must(t, c.c.Names("").Register(ctx, "duo", early))
	time.Sleep(2 * time.Millisecond)
	late, lch := sinkOf(t, b.n, gotp.TrapExit(true))
	gotptest.Must(t, b.c.Names("").Register(ctx, "duo", late))

	cut(false)
	waitEvent(t, sub, NodeUp, "c", 30*time.Second)
	waitName(t, ms, "", "solo", first)
	waitName(t, ms, "", "duo", early)
	for _, lost := range []struct {
		ch   <-chan any
		name string
		kept gotp.PID
	}{{sch, "solo", first}, {lch, "duo", early}} {
		e := gotptest.RecvWithin(t, 10*time.Second, lost.ch).(gotp.Exit)
		var nc *NameConflictError
		if !errors.Is(e.Reason, ErrNameConflict) || !errors.As(e.Reason, &nc) || nc.Name != lost.name || nc.Kept != lost.kept {
			t.Fatalf("the loser of %s got %+v", lost.name, e)
		}
	}
	select {
	case m := <-ech:
		t.Fatalf("the keeper of duo got %#v", m)
	case <-time.After(100 * time.Millisecond):
	}
}

// partitionable starts a, b and c where c reaches a and b only through
// proxies (routes and direct links) that cut can close and refuse.
func partitionable(t *testing.T) (a, b, c member, cut func(bool)) {
	t.Helper()
	oa := fastOpts(t)
	a = startNode(t, "a", oa)
	ob := fastOpts(t)
	ob.Peers = []string{a.c.RouteURL()}
	b = startNode(t, "b", ob)
	pa := newProxy(t, strings.TrimPrefix(a.c.RouteURL(), "nats-route://"))
	pb := newProxy(t, strings.TrimPrefix(b.c.RouteURL(), "nats-route://"))
	oc := fastOpts(t)
	oc.Peers = []string{pa.url(), pb.url()}
	oc.RouteAdvertise = unusedAddr(t)
	oc.DirectListen = unusedAddr(t)
	pd := newProxy(t, oc.DirectListen)
	oc.DirectAdvertise = strings.TrimPrefix(pd.url(), "nats-route://")
	c = startNode(t, "c", oc)
	waitMesh(t, []member{a, b, c})
	return a, b, c, func(on bool) {
		pa.setCut(on)
		pb.setCut(on)
		pd.setCut(on)
	}
}
