package pg_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind: every node a
// test starts is stopped, and pg itself starts none.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tb is what the helpers need of a test: *testing.T, *testing.B and
// *rapid.T all have it.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// waitLong bounds every wait for something that should happen promptly. A
// wait that runs out is a failure, not a slow machine.
const waitLong = 10 * time.Second

// newNode returns a node named name that is stopped when the test ends.
func newNode(t tb, name string) *gotp.Node {
	t.Helper()
	n := gotp.NewNode(gotp.Options{Name: name, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return n
}

// newScope starts a scope on n.
func newScope(t tb, n *gotp.Node, id string, opts pg.Options) *pg.Scope {
	t.Helper()
	s, err := pg.Start(context.Background(), n, id, opts)
	if err != nil {
		t.Fatalf("Start(%q): %v", id, err)
	}
	return s
}

// member is a live process for tests: it forwards every message it
// receives to msgs, until it is killed.
type member struct {
	n    *gotp.Node
	p    *gotp.Process
	pid  gotp.PID
	msgs chan any
}

func spawn(t tb, n *gotp.Node) *member {
	t.Helper()
	m := &member{n: n, msgs: make(chan any, 1<<12)}
	got := make(chan *gotp.Process, 1)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		got <- p
		for {
			msg, err := p.Receive(context.Background())
			if err != nil {
				return nil
			}
			m.msgs <- msg
		}
	})
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	m.pid, m.p = pid, <-got
	return m
}

// open opens s for m, failing the test on error.
func (m *member) open(t tb, s *pg.Scope) *pg.Instance {
	t.Helper()
	inst, err := s.Open(m.p)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return inst
}

// kill kills the process and waits until it is dead and every monitor of
// it (the scope's among them) has fired: the process's Done channel is
// closed only after its monitors have run.
func (m *member) kill(t tb) {
	t.Helper()
	m.n.Exit(m.pid, gotp.ErrKill)
	recvDone(t, m.p.Done())
}

// next returns the next message m received, failing after waitLong.
func (m *member) next(t tb) any {
	t.Helper()
	return recv(t, m.msgs)
}

// none checks that m has received nothing so far.
func (m *member) none(t tb) {
	t.Helper()
	select {
	case msg := <-m.msgs:
		t.Fatalf("unexpected message %#v", msg)
	default:
	}
}

func recv[T any](t tb, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLong):
		t.Fatalf("timed out after %v waiting for a %T", waitLong, *new(T))
	}
	panic("unreachable")
}

func recvDone(t tb, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLong):
		t.Fatalf("timed out after %v waiting for a close", waitLong)
	}
}

// event receives the next event of sub, failing if the channel is closed.
func event(t tb, sub *pg.Subscription) pg.Event {
	t.Helper()
	select {
	case ev, ok := <-sub.C():
		if !ok {
			t.Fatalf("subscription closed, want an event")
		}
		return ev
	case <-time.After(waitLong):
		t.Fatalf("timed out waiting for an event")
	}
	panic("unreachable")
}

// noEvent checks that sub has no event queued.
func noEvent(t tb, sub *pg.Subscription) {
	t.Helper()
	select {
	case ev, ok := <-sub.C():
		if ok {
			t.Fatalf("unexpected event %+v", ev)
		}
		t.Fatalf("subscription unexpectedly closed")
	default:
	}
}

// closed checks that sub's channel is closed with nothing left in it.
func closed(t tb, sub *pg.Subscription) {
	t.Helper()
	select {
	case ev, ok := <-sub.C():
		if ok {
			t.Fatalf("got event %+v, want a closed channel", ev)
		}
	case <-time.After(waitLong):
		t.Fatalf("subscription not closed")
	}
}

func wantEvent(t tb, sub *pg.Subscription, kind pg.EventKind, group string, pids ...gotp.PID) {
	t.Helper()
	ev := event(t, sub)
	if ev.Kind != kind || ev.Group != group || !samePIDs(ev.PIDs, pids) {
		t.Fatalf("event = {%v %q %v}, want {%v %q %v}", ev.Kind, ev.Group, ev.PIDs, kind, group, pids)
	}
}

func sorted(pids []gotp.PID) []gotp.PID {
	out := slices.Clone(pids)
	slices.SortFunc(out, func(a, b gotp.PID) int {
		return cmp.Or(cmp.Compare(a.Node(), b.Node()), cmp.Compare(a.ID(), b.ID()))
	})
	return out
}

// samePIDs compares two lists as multisets.
func samePIDs(a, b []gotp.PID) bool {
	return slices.Equal(sorted(a), sorted(b))
}

func wantMembers(t tb, inst *pg.Instance, group string, want ...gotp.PID) {
	t.Helper()
	got, err := inst.Members(group)
	if err != nil {
		t.Fatalf("Members(%q): %v", group, err)
	}
	if got == nil || !samePIDs(got, want) {
		t.Fatalf("Members(%q) = %v, want %v", group, got, want)
	}
}

func wantLocalMembers(t tb, inst *pg.Instance, group string, want ...gotp.PID) {
	t.Helper()
	got, err := inst.LocalMembers(group)
	if err != nil {
		t.Fatalf("LocalMembers(%q): %v", group, err)
	}
	if got == nil || !samePIDs(got, want) {
		t.Fatalf("LocalMembers(%q) = %v, want %v", group, got, want)
	}
}

func wantGroups(t tb, inst *pg.Instance, want ...string) {
	t.Helper()
	got, err := inst.WhichGroups()
	if err != nil {
		t.Fatalf("WhichGroups: %v", err)
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("WhichGroups = %q, want %q", got, want)
	}
}

func wantLocalGroups(t tb, inst *pg.Instance, want ...string) {
	t.Helper()
	got, err := inst.WhichLocalGroups()
	if err != nil {
		t.Fatalf("WhichLocalGroups: %v", err)
	}
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("WhichLocalGroups = %q, want %q", got, want)
	}
}

func must(t tb, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t tb, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}

// waitFor polls cond until it holds or waitLong passes. It is used only
// where there is no signal to wait on.
func waitFor(t tb, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
