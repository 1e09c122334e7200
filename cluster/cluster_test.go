package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

func TestRemoteSend(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	for _, m := range ms {
		for _, ni := range m.c.Nodes() {
			if !ni.Direct {
				t.Fatalf("%s reaches %s over NATS: %+v", m.n.Name(), ni.Name, m.c.Stats())
			}
		}
	}
	a, b := ms[0], ms[1]
	pidSink := gotptest.NewSink(t, b.n)
	pid, ch := pidSink.PID(), pidSink.C()
	fromSink := gotptest.NewSink(t, a.n)
	from := fromSink.PID()

	a.n.Send(pid, "hello")
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "hello" {
		t.Fatalf("got %#v", got)
	}
	ping := Ping{From: from, N: 42, Note: "olá"}
	gotptest.Must(t, a.c.Send(pid, ping))
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != ping {
		t.Fatalf("got %#v, want %#v", got, ping)
	}
	// Registered named types keep their type inside interface fields.
	box := Box{Any: Ping{N: 7}}
	gotptest.Must(t, a.c.Send(pid, box))
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != box {
		t.Fatalf("got %#v, want %#v", got, box)
	}
	// Order from one sender is kept, across batches.
	for i := range 5000 {
		a.n.Send(pid, i)
	}
	for i := range 5000 {
		if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != i {
			t.Fatalf("message %d: got %#v", i, got)
		}
	}
	// By name on the other node, as Erlang's {Name, Node} ! Msg.
	gotptest.Must(t, b.n.Register("mailbox", pid))
	gotptest.Must(t, a.c.SendNamed("b", "mailbox", "by name"))
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "by name" {
		t.Fatalf("got %#v", got)
	}
	gotptest.Must(t, a.c.SendNamed("b", "nobody", "lost")) // dropped there
	// A message to a node that is not there is dropped, and Send says so.
	ghost := gotp.NewPID("ghost", 1, 1)
	if err := a.c.Send(ghost, "x"); !errors.Is(err, gotp.ErrNoConnection) {
		t.Fatalf("send to unknown node: %v", err)
	}
	st := a.c.Stats()
	if st.MessagesOut < 5005 || b.c.Stats().MessagesIn < 5005 {
		t.Fatalf("counters: a %+v, b %+v", st, b.c.Stats())
	}
}

func TestUnregisteredTypeRefused(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	pidSink := gotptest.NewSink(t, b.n)
	pid, ch := pidSink.PID(), pidSink.C()

	var ute *UnregisteredTypeError
	if err := a.c.Send(pid, unregistered{1}); !errors.As(err, &ute) || ute.Type != "cluster.unregistered" {
		t.Fatalf("got %v", err)
	}
	if err := a.c.Send(pid, Box{Any: unregistered{2}}); !errors.As(err, &ute) || ute.Path != ".Any" {
		t.Fatalf("nested: got %v", err)
	}
	if err := a.c.Send(pid, Box{Any: []any{1, unregistered{3}}}); !errors.As(err, &ute) {
		t.Fatalf("deeper: got %v", err)
	}
	before := a.c.Stats().EncodeErrors
	a.n.Send(pid, unregistered{4}) // Node.Send cannot fail: counted and logged
	if got := a.c.Stats().EncodeErrors; got != before+1 {
		t.Fatalf("EncodeErrors %d, want %d", got, before+1)
	}
	a.n.Send(pid, "after") // the next message still goes through, alone
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "after" {
		t.Fatalf("got %#v", got)
	}
	// Too large.
	big := make([]byte, DefaultMaxMessageSize+1)
	if err := a.c.Send(pid, big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
}

type echo struct {
	server.Defaults
	casts chan any
	held  chan struct{} // told of each "hold" call, when not nil
}

func (e *echo) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case string:
		switch r {
		case "boom":
			return fmt.Errorf("wrapped: %w", errBoom), nil
		case "noproc":
			return gotp.ErrNoProc, nil
		case "bye":
			return "bye", errBoom // reply, then stop
		case "hold":
			if e.held != nil {
				e.held <- struct{}{}
			}
			return server.NoReply, nil
		}
		return "echo " + r, nil
	case int:
		return r * 2, nil
	}
	return req, nil
}

func (e *echo) HandleCast(p *gotp.Process, msg any) error {
	e.casts <- msg
	return nil
}

func TestRemoteCallCastStop(t *testing.T) {
	ms := startCluster(t, "a", "b@host.example") // a name that is not a subject token
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := &echo{casts: make(chan any, 8)}
	srv, err := server.Start(ctx, b.n, e)
	gotptest.Must(t, err)

	got, err := server.Call[string](ctx, a.n, srv, "hi")
	if err != nil || got != "echo hi" {
		t.Fatalf("call: %q, %v", got, err)
	}
	n, err := server.Call[int](ctx, a.n, srv, 21)
	if err != nil || n != 42 {
		t.Fatalf("call int: %d, %v", n, err)
	}
	p, err := server.Call[Ping](ctx, a.n, srv, Ping{N: 1})
	if err != nil || p.N != 1 {
		t.Fatalf("call struct: %v, %v", p, err)
	}
	_, err = server.Call[string](ctx, a.n, srv, "boom")
	if !errors.Is(err, errBoom) || err.Error() != "wrapped: boom" {
		t.Fatalf("error reply: %v", err)
	}
	_, err = server.Call[string](ctx, a.n, srv, "noproc")
	if err != gotp.ErrNoProc {
		t.Fatalf("sentinel reply is not the sentinel: %#v", err)
	}
	// A reply sent just before the server stops wins over its Down.
	srv2, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)
	if got, err := server.Call[string](ctx, a.n, srv2, "bye"); err != nil || got != "bye" {
		t.Fatalf("reply before exit: %q, %v", got, err)
	}
	server.Cast(a.n, srv, Ping{N: 9})
	if got := gotptest.RecvWithin(t, 5*time.Second, chanAny(e.casts)); got != (Ping{N: 9}) {
		t.Fatalf("cast: %#v", got)
	}
	// Stop with a reason; the caller's monitor sees it.
	down := make(chan gotp.Down, 1)
	a.n.MonitorFunc(srv, func(d gotp.Down) { down <- d })
	gotptest.Must(t, server.Stop(ctx, a.n, srv, gotp.ErrShutdown))
	select {
	case d := <-down:
		if d.Reason != gotp.ErrShutdown {
			t.Fatalf("down reason %v", d.Reason)
		}
	case <-ctx.Done():
		t.Fatal("no Down")
	}
	// A call to a server that is gone.
	_, err = server.Call[string](ctx, a.n, srv, "hi")
	if !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("call to a dead server: %v", err)
	}
}

func chanAny[T any](ch chan T) chan any {
	out := make(chan any, cap(ch))
	go func() {
		for v := range ch {
			out <- v
			return
		}
	}()
	return out
}

func TestRemoteMonitorLinkExit(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]

	// Monitor: a custom reason arrives with its message and sentinels.
	stop := make(chan error)
	target, err := b.n.Spawn(func(p *gotp.Process) error { return <-stop })
	gotptest.Must(t, err)
	watcherSink := gotptest.NewSink(t, a.n)
	wch := watcherSink.C()
	ref := monitorFrom(t, watcherSink, target)
	syncPair(t, a, b) // the monitor has reached b
	stop <- fmt.Errorf("crashed: %w", errBoom)
	d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down)
	if d.Ref != ref || d.PID != target || !errors.Is(d.Reason, errBoom) || d.Reason.Error() != "crashed: boom" {
		t.Fatalf("down %+v", d)
	}

	// Monitor of a process that is already gone: noproc.
	monitorFrom(t, watcherSink, target)
	d = gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down)
	if d.Reason != gotp.ErrNoProc {
		t.Fatalf("monitor of dead pid: %v", d.Reason)
	}

	// Link: a trapping process on a gets the exit of b's process.
	target2, err := b.n.Spawn(func(p *gotp.Process) error { return <-stop })
	gotptest.Must(t, err)
	linkedSink := gotptest.NewSink(t, a.n, gotp.TrapExit(true), gotp.LinkTo(target2))
	lch := linkedSink.C()
	syncPair(t, a, b)
	stop <- errBoom
	ex := gotptest.RecvWithin(t, 5*time.Second, lch).(gotp.Exit)
	if ex.From != target2 || ex.Reason != errBoom {
		t.Fatalf("exit %+v", ex)
	}
	// Link to a dead remote process: exit noproc.
	linkFrom(t, linkedSink, target2)
	ex = gotptest.RecvWithin(t, 5*time.Second, lch).(gotp.Exit)
	if ex.From != target2 || ex.Reason != gotp.ErrNoProc {
		t.Fatalf("link to dead: %+v", ex)
	}

	// Exit signal: kill a remote process; its monitor says killed.
	victim, err := b.n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(context.Background()); return err }, gotp.TrapExit(true))
	gotptest.Must(t, err)
	mon := make(chan gotp.Down, 1)
	a.n.MonitorFunc(victim, func(d gotp.Down) { mon <- d })
	a.n.Exit(victim, gotp.ErrKill)
	select {
	case d := <-mon:
		if d.Reason != gotp.ErrKilled {
			t.Fatalf("killed reason: %v", d.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Down after kill")
	}

	// A link from b's side: b's process dies abnormally, a's linked
	// process (not trapping) dies with the same reason.
	bproc, err := b.n.Spawn(func(p *gotp.Process) error { return <-stop })
	gotptest.Must(t, err)
	aproc, err := a.n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(context.Background()); return err }, gotp.LinkTo(bproc))
	gotptest.Must(t, err)
	amon := make(chan gotp.Down, 1)
	a.n.MonitorFunc(aproc, func(d gotp.Down) { amon <- d })
	// Make sure the link reached b before b's process ends: a round trip.
	syncPair(t, a, b)
	stop <- errBoom
	select {
	case d := <-amon:
		if d.Reason != errBoom {
			t.Fatalf("linked death reason %v", d.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("linked process did not die")
	}
}

// syncPair waits until every signal a sent to b before the call has been
// handled on b (signals between two nodes keep their order).
func syncPair(t testing.TB, a, b member) {
	t.Helper()
	pidSink := gotptest.NewSink(t, b.n)
	pid, ch := pidSink.PID(), pidSink.C()
	a.n.Send(pid, "sync")
	gotptest.RecvWithin(t, 5*time.Second, ch)
	b.n.Exit(pid, gotp.ErrKill)
}

func monitorFrom(t testing.TB, watcher *gotptest.Sink, target gotp.PID) gotp.Ref {
	t.Helper()
	var ref gotp.Ref
	watcher.Do(t, func(p *gotp.Process) { ref = p.Monitor(target) })
	return ref
}

func linkFrom(t testing.TB, from *gotptest.Sink, to gotp.PID) {
	t.Helper()
	from.Do(t, func(p *gotp.Process) { _ = p.Link(to) })
}

func TestRemoteUnlinkAndDemonitor(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	stop := make(chan error, 1)
	target, err := b.n.Spawn(func(p *gotp.Process) error { return <-stop })
	gotptest.Must(t, err)
	watcherSink := gotptest.NewSink(t, a.n, gotp.TrapExit(true))
	wch := watcherSink.C()
	linkFrom(t, watcherSink, target)
	ref := monitorFrom(t, watcherSink, target)
	watcherSink.Do(t, func(p *gotp.Process) {
		p.Unlink(target)
		if !p.Demonitor(ref, true) {
			t.Error("demonitor of a live remote monitor reported false")
		}
	})
	syncPair(t, a, b) // the unlink and demonitor have reached b
	stop <- errBoom
	// Anything b sent about target's death would arrive before this.
	syncPair(t, b, a)
	watcherSink.Do(t, func(*gotp.Process) {})
	select {
	case m := <-wch:
		t.Fatalf("got %#v after unlink and demonitor", m)
	default:
	}
}

// A server that calls a server on another node passes itself as the
// caller (as it does for local calls, where that finds call cycles): the
// call goes over the cluster as any other.
func TestRemoteCallFromAServer(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)
	caller, err := server.Start(ctx, a.n, &forwarder{to: remote})
	gotptest.Must(t, err)
	if got, err := server.Call[string](ctx, a.n, caller, "hi"); err != nil || got != "echo hi" {
		t.Fatalf("a server's call to another node: %q, %v", got, err)
	}
}

// forwarder is a server that answers a call with the answer of to, called
// as itself.
type forwarder struct {
	server.Defaults
	to gotp.PID
}

func (f *forwarder) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	v, err := server.Call[string](context.Background(), p, f.to, req)
	if err != nil {
		return err, nil
	}
	return v, nil
}
