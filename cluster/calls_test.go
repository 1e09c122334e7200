package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// monitoredBy returns how many monitors the local process pid has on it.
func monitoredBy(t testing.TB, n *gotp.Node, pid gotp.PID) int {
	t.Helper()
	info, ok := n.ProcessInfo(pid)
	if !ok {
		t.Fatalf("no process %v", pid)
	}
	return len(info.MonitoredBy)
}

// Calls to another node: one signal each way and no process on the
// caller's node; the server's node drops the call's monitor with the
// reply, with the caller's cancel, and when the caller's node is lost.
func TestRemoteCallsLeaveNothing(t *testing.T) {
	for _, mode := range []struct {
		name     string
		noDirect bool
		busy     time.Duration
	}{{"direct", false, 0}, {"busypoll", false, 50 * time.Microsecond}, {"nats", true, 0}} {
		t.Run(mode.name, func(t *testing.T) {
			ms := startClusterWith(t, func(o *Options) { o.NoDirect, o.BusyPoll = mode.noDirect, mode.busy }, "a", "b")
			a, b := ms[0], ms[1]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			held := make(chan struct{}, 8)
			srv, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1), held: held}, server.Named("echo"))
			gotptest.Must(t, err)
			procs := a.n.ProcessCount()
			before := a.c.Stats()
			for i := range 100 {
				if v, err := server.Call[int](ctx, a.n, srv, i); err != nil || v != 2*i {
					t.Fatalf("call %d: %v, %v", i, v, err)
				}
			}
			st := a.c.Stats()
			// 100 requests out, 100 replies in (ticks aside: a tick every
			// 100 ms on a fast test).
			if out := st.MessagesOut - before.MessagesOut; out < 100 || out > 130 {
				t.Errorf("%d signals out for 100 calls", out)
			}
			if a.n.ProcessCount() != procs {
				t.Errorf("processes on the caller's node: %d, were %d", a.n.ProcessCount(), procs)
			}
			if k := monitoredBy(t, b.n, srv); k != 0 {
				t.Errorf("the server has %d monitors after its calls", k)
			}
			// By name on b, as {echo, b}.
			if got, err := server.Call[string](ctx, a.n, Remote{Node: "b", Name: "echo"}, "by name"); err != nil || got != "echo by name" {
				t.Fatalf("call by name: %q, %v", got, err)
			}
			_, err = server.Call[string](ctx, a.n, Remote{Node: "b", Name: "nobody"}, "x")
			if !errors.Is(err, gotp.ErrNoProc) {
				t.Fatalf("call to a name nobody holds: %v", err)
			}
			if pid, ok := (Remote{Node: "b", Name: "echo"}).Resolve(a.n); !ok || pid != srv {
				t.Fatalf("Resolve: %v, %v", pid, ok)
			}
			// A caller that gives up: the server's monitor goes with it.
			short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = server.Call[string](short, a.n, srv, "hold")
			cancelShort()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call past its deadline: %v", err)
			}
			<-held
			gotptest.EventuallyWithin(t, 5*time.Second, "the abandoned call's monitor dropped", func() bool { return monitoredBy(t, b.n, srv) == 0 })
			// A request the codec refuses fails at once, not at the deadline.
			start := time.Now()
			_, err = server.Call[string](ctx, a.n, srv, unregistered{1})
			var ute *UnregisteredTypeError
			if !errors.As(err, &ute) || time.Since(start) > time.Second {
				t.Fatalf("unregistered request: %v after %v", err, time.Since(start))
			}
			// A call in flight when the caller's node goes: the server's
			// monitor goes too.
			go func() { _, _ = server.Call[string](ctx, a.n, srv, "hold") }()
			<-held
			if k := monitoredBy(t, b.n, srv); k != 1 {
				t.Fatalf("the server has %d monitors during a call", k)
			}
			stopNode(t, a.n)
			gotptest.EventuallyWithin(t, 5*time.Second, "the lost caller's monitor dropped", func() bool { return monitoredBy(t, b.n, srv) == 0 })
		})
	}
}

type badReply struct{ server.Defaults }

func (badReply) HandleCall(*gotp.Process, server.From, any) (any, error) {
	return unregistered{7}, nil
}

func TestRemoteCallReplyRefused(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, b.n, badReply{})
	gotptest.Must(t, err)
	start := time.Now()
	_, err = server.Call[any](ctx, a.n, srv, "x")
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("a reply the codec refuses: %v after %v", err, time.Since(start))
	}
	t.Logf("error: %v", err)
}

// Barrier: when it returns, every connected node has applied what this
// node sent before (here a pg join), with no waiting loop.
func TestBarrier(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	scopes := replicatedScopes(t, ms, "bar")
	for i := range 50 {
		joinAs(t, scopes[0], "g", 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gotptest.Must(t, ms[0].c.Barrier(ctx))
		cancel()
		for _, s := range scopes[1:] {
			if got := countMembers(s.scope, "g"); got != i+1 {
				t.Fatalf("join %d: %s sees %d members after Barrier", i, s.m.n.Name(), got)
			}
		}
	}
}

// sinkOf starts a gotptest.Sink on n and returns its PID and channel.
func sinkOf(t testing.TB, n *gotp.Node, opts ...gotp.SpawnOption) (gotp.PID, <-chan any) {
	t.Helper()
	s := gotptest.NewSink(t, n, opts...)
	return s.PID(), s.C()
}

// TestCallTableNodeDownByConnection: losing a connection fails the calls
// that went out on it, not those to a later incarnation of the same node
// (a node restarted under its name) waiting at the same time.
func TestCallTableNodeDownByConnection(t *testing.T) {
	var tab callTable
	tab.init()
	n := gotptest.NewNode(t)
	old := &peer{name: "b", creation: 1}
	cur := &peer{name: "b", creation: 2}
	refOld, refCur := n.MakeRef(), n.MakeRef()
	pcOld, pcCur := tab.get(old), tab.get(cur)
	for _, c := range []struct {
		p   *peer
		pc  *pendingCall
		ref gotp.Ref
	}{{old, pcOld, refOld}, {cur, pcCur, refCur}} {
		c.pc.p = c.p
		c.p.calling.Add(1)
		tab.put(c.ref, c.pc)
	}
	tab.nodeDown(old)
	select {
	case r := <-pcOld.ch:
		if !r.down || !errors.Is(r.reason, gotp.ErrNoConnection) {
			t.Fatalf("the old incarnation's call: %+v", r)
		}
	default:
		t.Fatal("the old incarnation's call still waits after its node-down")
	}
	select {
	case r := <-pcCur.ch:
		t.Fatalf("the new incarnation's call was answered by the old one's node-down: %+v", r)
	default:
	}
	if old.calling.Load() != 0 || cur.calling.Load() != 1 {
		t.Fatalf("calls counted: old %d, new %d; want 0, 1", old.calling.Load(), cur.calling.Load())
	}
	tab.reply(refCur, "ok")
	if r := <-pcCur.ch; r.v != "ok" {
		t.Fatalf("the new incarnation's call: %+v", r)
	}
}
