package pg_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

// TestMain fails the run if a test leaves a goroutine behind: every node a
// test starts is stopped, and pg itself starts none.
func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }

// open opens s for the process of m, failing the test on error.
func open(t gotptest.TB, m *gotptest.Sink, s *pg.Scope) *pg.Instance {
	t.Helper()
	inst, err := s.Open(m.Process())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return inst
}

// newScope starts a scope on n.
func newScope(t gotptest.TB, n *gotp.Node, id string, opts pg.Options) *pg.Scope {
	t.Helper()
	s, err := pg.Start(context.Background(), n, id, opts)
	if err != nil {
		t.Fatalf("Start(%q): %v", id, err)
	}
	return s
}

// event receives the next event of sub, failing if the channel is closed.
func event(t gotptest.TB, sub *pg.Subscription) pg.Event {
	t.Helper()
	select {
	case ev, ok := <-sub.C():
		if !ok {
			t.Fatalf("subscription closed, want an event")
		}
		return ev
	case <-time.After(gotptest.Timeout):
		t.Fatalf("timed out waiting for an event")
	}
	panic("unreachable")
}

// noEvent checks that sub has no event queued.
func noEvent(t gotptest.TB, sub *pg.Subscription) {
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
func closed(t gotptest.TB, sub *pg.Subscription) {
	t.Helper()
	select {
	case ev, ok := <-sub.C():
		if ok {
			t.Fatalf("got event %+v, want a closed channel", ev)
		}
	case <-time.After(gotptest.Timeout):
		t.Fatalf("subscription not closed")
	}
}

func wantEvent(t gotptest.TB, sub *pg.Subscription, kind pg.EventKind, group string, pids ...gotp.PID) {
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

func wantMembers(t gotptest.TB, inst *pg.Instance, group string, want ...gotp.PID) {
	t.Helper()
	got, err := inst.Members(group)
	if err != nil {
		t.Fatalf("Members(%q): %v", group, err)
	}
	if got == nil || !samePIDs(got, want) {
		t.Fatalf("Members(%q) = %v, want %v", group, got, want)
	}
}

func wantLocalMembers(t gotptest.TB, inst *pg.Instance, group string, want ...gotp.PID) {
	t.Helper()
	got, err := inst.LocalMembers(group)
	if err != nil {
		t.Fatalf("LocalMembers(%q): %v", group, err)
	}
	if got == nil || !samePIDs(got, want) {
		t.Fatalf("LocalMembers(%q) = %v, want %v", group, got, want)
	}
}

func wantGroups(t gotptest.TB, inst *pg.Instance, want ...string) {
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

func wantLocalGroups(t gotptest.TB, inst *pg.Instance, want ...string) {
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

func wantErr(t gotptest.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}
