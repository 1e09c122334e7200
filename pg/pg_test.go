package pg_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// TestPG ports pg_SUITE's pg case: join, list, leave, and the group is
// gone everywhere.
func TestPG(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "pg", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)

	gotptest.Must(t, g.Join("pg"))
	wantLocalMembers(t, g, "pg", me.PID())
	wantMembers(t, g, "pg", me.PID())
	wantGroups(t, g, "pg")
	wantLocalGroups(t, g, "pg")
	gotptest.Must(t, g.Leave("pg"))
	wantMembers(t, g, "pg")
	wantLocalMembers(t, g, "pg")
	wantGroups(t, g)
	wantLocalGroups(t, g)
}

// TestSingle ports pg_SUITE's single case: counted joins need as many
// leaves, leaving a missing group is not_joined, and a member that exits
// is gone.
func TestSingle(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "single", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)

	gotptest.Must(t, g.Join("single"))
	gotptest.Must(t, g.Join("single", "single"))
	wantLocalMembers(t, g, "single", me.PID(), me.PID(), me.PID())
	wantMembers(t, g, "single", me.PID(), me.PID(), me.PID())

	err := g.Leave("$missing$")
	wantErr(t, err, pg.ErrNotJoined)
	var nj *pg.NotJoinedError
	if !errors.As(err, &nj) || !slices.Equal(nj.Groups, []string{"$missing$"}) {
		t.Fatalf("Leave($missing$) = %#v, want *NotJoinedError naming the group", err)
	}

	gotptest.Must(t, g.Leave("single", "single"))
	wantMembers(t, g, "single", me.PID())
	gotptest.Must(t, g.Leave("single"))
	wantGroups(t, g)
	wantLocalMembers(t, g, "single")
	wantMembers(t, g, "single")
	wantErr(t, g.Leave("single"), pg.ErrNotJoined)

	// double: two processes, one exits.
	gotptest.Must(t, g.Join("single"))
	other := gotptest.NewSink(t, n)
	og := open(t, other, s)
	gotptest.Must(t, og.Join("single"))
	wantMembers(t, g, "single", me.PID(), other.PID())
	wantLocalMembers(t, g, "single", me.PID(), other.PID())
	other.Kill(t)
	wantLocalMembers(t, g, "single", me.PID())
	gotptest.Must(t, g.Leave("single"))
	wantGroups(t, g)
}

// TestCountedJoins checks that k joins need exactly k leaves, through
// single and batch forms mixed.
func TestCountedJoins(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)
	for k := 1; k <= 5; k++ {
		for range k {
			gotptest.Must(t, g.Join("g"))
		}
		for i := range k {
			wantGroups(t, g, "g")
			members, err := g.Members("g")
			gotptest.Must(t, err)
			if len(members) != k-i {
				t.Fatalf("k=%d after %d leaves: %d members, want %d", k, i, len(members), k-i)
			}
			gotptest.Must(t, g.Leave("g"))
		}
		wantGroups(t, g)
		wantErr(t, g.Leave("g"), pg.ErrNotJoined)
	}
}

// TestBatchLeave checks that a batch leave is best effort and fails only
// when the process was in none of the groups.
func TestBatchLeave(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)

	gotptest.Must(t, g.Join("a", "b", "b"))
	wantGroups(t, g, "a", "b")

	// "a" and one of "b"; "c" is skipped.
	gotptest.Must(t, g.Leave("a", "b", "c"))
	wantGroups(t, g, "b")
	wantMembers(t, g, "b", me.PID())

	// None of them: an error naming them all, and nothing changes.
	err := g.Leave("a", "c")
	var nj *pg.NotJoinedError
	if !errors.As(err, &nj) || !slices.Equal(nj.Groups, []string{"a", "c"}) {
		t.Fatalf("Leave(a, c) = %v, want *NotJoinedError{a, c}", err)
	}
	wantErr(t, err, pg.ErrNotJoined)
	wantMembers(t, g, "b", me.PID())

	// The same group twice in a batch leaves it twice, when joined twice.
	gotptest.Must(t, g.Join("b"))
	gotptest.Must(t, g.Leave("b", "b"))
	wantGroups(t, g)
}

// TestBatchJoin checks that a batch joins every group at once, duplicates
// counted.
func TestBatchJoin(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)
	gotptest.Must(t, g.Join("x", "y", "x"))
	wantMembers(t, g, "x", me.PID(), me.PID())
	wantMembers(t, g, "y", me.PID())
	wantLocalGroups(t, g, "x", "y")
}

// TestExitLeavesEveryGroup checks that a process that exits leaves every
// group at once, all its joins, with one left event per group carrying
// the multiplicity, and that the scope forgets it.
func TestExitLeavesEveryGroup(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	watcher := gotptest.NewSink(t, n)
	w := open(t, watcher, s)
	sub, _, err := w.Events()
	gotptest.Must(t, err)

	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	gotptest.Must(t, g.Join("a", "a", "b", "c"))
	gotptest.Must(t, w.Join("c"))
	for range 5 { // the joins above
		event(t, sub)
	}
	m.Kill(t)

	left := map[string][]gotp.PID{}
	for range 3 {
		ev := event(t, sub)
		if ev.Kind != pg.MemberLeft {
			t.Fatalf("event %+v, want MemberLeft", ev)
		}
		left[ev.Group] = ev.PIDs
	}
	noEvent(t, sub)
	if !samePIDs(left["a"], []gotp.PID{m.PID(), m.PID()}) || !samePIDs(left["b"], []gotp.PID{m.PID()}) || !samePIDs(left["c"], []gotp.PID{m.PID()}) {
		t.Fatalf("left events %v", left)
	}
	wantGroups(t, w, "c")
	wantMembers(t, w, "c", watcher.PID())
	if in := s.Info(); in.Processes != 1 || in.LocalJoins != 1 {
		t.Fatalf("Info = %+v, want only the watcher", in)
	}
	wantErr(t, g.Join("a"), pg.ErrReleased)
}

// TestLeaveExitRace ports pg_SUITE's leave_exit_race: joins and leaves
// racing with the member's exit never leave a dead member behind.
func TestLeaveExitRace(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	obs := open(t, gotptest.NewSink(t, n), s)
	for range 100 {
		type opened struct {
			p    *gotp.Process
			inst *pg.Instance
		}
		got := make(chan opened, 1)
		_, err := n.Spawn(func(p *gotp.Process) error {
			inst, err := s.Open(p)
			if err != nil {
				return err
			}
			got <- opened{p, inst}
			return nil // exits at once, racing with the test's calls
		})
		gotptest.Must(t, err)
		o := gotptest.Recv(t, got)
		for _, err := range []error{o.inst.Join("race"), o.inst.Leave("race"), o.inst.Join("race")} {
			if err != nil && !errors.Is(err, pg.ErrReleased) && !errors.Is(err, pg.ErrNotJoined) {
				t.Fatalf("unexpected error %v", err)
			}
		}
		gotptest.Recv(t, o.p.Done()) // its monitors, the scope's among them, have run
		wantMembers(t, obs, "race")
	}
	if in := s.Info(); in.Processes != 1 {
		t.Fatalf("Info.Processes = %d, want 1 (the observer)", in.Processes)
	}
}

// TestMembershipOutlivesRelease checks that memberships belong to the
// process: Release keeps them, the exit of the process ends them.
func TestMembershipOutlivesRelease(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	obs := open(t, gotptest.NewSink(t, n), s)
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	gotptest.Must(t, g.Join("g"))
	if !g.Release() {
		t.Fatal("first Release = false")
	}
	wantMembers(t, obs, "g", m.PID())
	// Another instance of the same process shares the membership.
	g2 := open(t, m, s)
	gotptest.Must(t, g2.Leave("g"))
	wantMembers(t, obs, "g")
	gotptest.Must(t, g2.Join("g"))
	g2.Release()
	m.Kill(t)
	wantMembers(t, obs, "g")
	if in := s.Info(); in.Processes != 1 {
		t.Fatalf("Info.Processes = %d, want 1 (the observer)", in.Processes)
	}
}

// TestMonitorDropped checks that the scope monitors a process only while
// it has an instance or a membership.
func TestMonitorDropped(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	monitors := func() int {
		in, ok := n.ProcessInfo(m.PID())
		if !ok {
			t.Fatal("member gone")
		}
		return len(in.MonitoredBy)
	}
	base := monitors()
	g := open(t, m, s)
	g2 := open(t, m, s)
	if got := monitors(); got != base+1 {
		t.Fatalf("after two Opens: %d monitors, want %d (one per process)", got, base+1)
	}
	gotptest.Must(t, g.Join("g"))
	g.Release()
	g2.Release()
	if got := monitors(); got != base+1 {
		t.Fatalf("released but still a member: %d monitors, want %d", got, base+1)
	}
	g3 := open(t, m, s)
	gotptest.Must(t, g3.Leave("g"))
	g3.Release()
	if got := monitors(); got != base {
		t.Fatalf("nothing left: %d monitors, want %d", got, base)
	}
	if in := s.Info(); in.Processes != 0 {
		t.Fatalf("Info.Processes = %d, want 0", in.Processes)
	}
}

// TestReleased checks Release: immediate, idempotent, every operation
// then fails with ErrReleased, subscriptions are closed.
func TestReleased(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	esub, _, err := g.Events()
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("g"))

	if !g.Release() {
		t.Fatal("Release = false, want true")
	}
	if g.Release() {
		t.Fatal("second Release = true, want false")
	}
	closed(t, sub)
	closed(t, esub)
	for name, err := range allOps(g) {
		if !errors.Is(err, pg.ErrReleased) {
			t.Errorf("%s after Release: %v, want ErrReleased", name, err)
		}
	}
}

// TestReleasedOnExit checks that the instance is released when its
// process exits.
func TestReleasedOnExit(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	m.Kill(t)
	closed(t, sub)
	if g.Release() {
		t.Fatal("Release after exit = true, want false (already released)")
	}
	for name, err := range allOps(g) {
		if !errors.Is(err, pg.ErrReleased) {
			t.Errorf("%s after exit: %v, want ErrReleased", name, err)
		}
	}
	if in := s.Info(); in.Processes != 0 || in.Subscriptions != 0 {
		t.Fatalf("Info = %+v, want nothing left", in)
	}
}

// TestOpenDeadProcess checks that opening for a process that has exited
// fails with gotp.ErrNoProc and leaves nothing behind.
func TestOpenDeadProcess(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	m.Kill(t)
	_, err := s.Open(m.Process())
	wantErr(t, err, gotp.ErrNoProc)
	if in := s.Info(); in.Processes != 0 {
		t.Fatalf("Info.Processes = %d, want 0", in.Processes)
	}
}

// allOps runs every operation of inst once and returns their errors.
func allOps(inst *pg.Instance) map[string]error {
	errs := map[string]error{}
	errs["Join"] = inst.Join("g")
	errs["Leave"] = inst.Leave("g")
	_, errs["Members"] = inst.Members("g")
	_, errs["LocalMembers"] = inst.LocalMembers("g")
	_, errs["WhichGroups"] = inst.WhichGroups()
	_, errs["WhichLocalGroups"] = inst.WhichLocalGroups()
	errs["Broadcast"] = inst.Broadcast("g", "t", 1)
	errs["BroadcastLocal"] = inst.BroadcastLocal("g", "t", 1)
	_, _, errs["Monitor"] = inst.Monitor("g")
	_, _, errs["Events"] = inst.Events()
	return errs
}

// TestInvalid checks that bad arguments are typed errors, not panics.
func TestInvalid(t *testing.T) {
	ctx := context.Background()
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	g := open(t, gotptest.NewSink(t, n), s)
	for name, err := range map[string]error{
		"Join()":                g.Join(),
		`Join("")`:              g.Join("a", ""),
		"Leave()":               g.Leave(),
		`Leave("")`:             g.Leave(""),
		`Members("")`:           second(g.Members("")),
		`LocalMembers("")`:      second(g.LocalMembers("")),
		`Broadcast("")`:         g.Broadcast("", "t", nil),
		`BroadcastLocal("")`:    g.BroadcastLocal("", "t", nil),
		`Broadcast(g, "")`:      g.Broadcast("g", "", nil),
		`BroadcastLocal(g, "")`: g.BroadcastLocal("g", "", nil),
		`Monitor("")`:           third(g.Monitor("")),
		`Start("")`:             second(pg.Start(ctx, n, "", pg.Options{})),
		"Start(Buffer: -1)":     second(pg.Start(ctx, n, "x", pg.Options{Buffer: -1})),
		"Start(nil node)":       second(pg.Start(ctx, nil, "x", pg.Options{})),
		"StartLink(nil)":        second(pg.StartLink(ctx, nil, "x", pg.Options{})),
		"Open(nil)":             second(s.Open(nil)),
		"pg.Open(nil)":          second(pg.Open(ctx, nil, "s")),
		`Lookup("")`:            second(pg.Lookup(ctx, n, "")),
		"Attach(nil)":           second(s.Attach(nil)),
	} {
		if !errors.Is(err, pg.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	wantGroups(t, g)
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }

// TestBroadcast checks that every member process receives one Message,
// however many times it joined, from the broadcaster, and that an empty
// group is not an error.
func TestBroadcast(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "app:pg", pg.Options{})
	sender := gotptest.NewSink(t, n)
	sg := open(t, sender, s)
	var ms []*gotptest.Sink
	for i := range 3 {
		m := gotptest.NewSink(t, n)
		g := open(t, m, s)
		for range i + 1 {
			gotptest.Must(t, g.Join("workers"))
		}
		ms = append(ms, m)
	}
	outsider := gotptest.NewSink(t, n)
	open(t, outsider, s).Join("other")

	gotptest.Must(t, sg.Broadcast("workers", "task", 42))
	gotptest.Must(t, sg.BroadcastLocal("workers", "local", "x"))
	for _, m := range ms {
		want := pg.Message{Scope: "app:pg", Group: "workers", Topic: "task", Payload: 42, From: sender.PID()}
		if got := m.Next(t); got != want {
			t.Fatalf("got %#v, want %#v", got, want)
		}
		want = pg.Message{Scope: "app:pg", Group: "workers", Topic: "local", Payload: "x", From: sender.PID()}
		if got := m.Next(t); got != want {
			t.Fatalf("got %#v, want %#v", got, want)
		}
	}
	gotptest.Must(t, sg.Broadcast("nobody", "t", nil))
	gotptest.Must(t, sg.BroadcastLocal("nobody", "t", nil))

	// A member that leaves stops receiving; one that joins starts (the
	// cached member list is refreshed).
	gotptest.Must(t, open(t, ms[0], s).Leave("workers"))
	newcomer := gotptest.NewSink(t, n)
	gotptest.Must(t, open(t, newcomer, s).Join("workers"))
	gotptest.Must(t, sg.Broadcast("workers", "again", nil))
	for _, m := range append(ms[1:], newcomer) {
		if got := m.Next(t).(pg.Message); got.Topic != "again" {
			t.Fatalf("got %#v", got)
		}
	}
	// The sender is a member too when it joined.
	gotptest.Must(t, sg.Join("workers"))
	gotptest.Must(t, sg.Broadcast("workers", "self", nil))
	if got := sender.Next(t).(pg.Message); got.Topic != "self" || got.From != sender.PID() {
		t.Fatalf("sender got %#v", got)
	}
	for _, m := range append(ms[1:], newcomer) {
		m.Next(t)
	}
	ms[0].None(t)
	outsider.None(t)
	for _, m := range ms[1:] {
		m.None(t)
	}
}

// TestScopeLifecycle checks the scope as a process: named by its id,
// found by Lookup and Open, one per id, and closed with its process.
func TestScopeLifecycle(t *testing.T) {
	ctx := context.Background()
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "app:pg", pg.Options{})
	if pid, ok := n.Whereis(pg.ProcessName("app:pg")); !ok || pid != s.PID() {
		t.Fatalf("Whereis = %v %v, want %v", pid, ok, s.PID())
	}
	if s.ID() != "app:pg" || s.Node() != n {
		t.Fatalf("ID/Node wrong")
	}
	_, err := pg.Start(ctx, n, "app:pg", pg.Options{})
	wantErr(t, err, server.ErrAlreadyStarted)

	got, err := pg.Lookup(ctx, n, "app:pg")
	if err != nil || got != s {
		t.Fatalf("Lookup = %v %v, want the scope", got, err)
	}
	_, err = pg.Lookup(ctx, n, "nope")
	wantErr(t, err, pg.ErrNoScope)

	m := gotptest.NewSink(t, n)
	g, err := pg.Open(ctx, m.Process(), "app:pg")
	gotptest.Must(t, err)
	_, err = pg.Open(ctx, m.Process(), "nope")
	wantErr(t, err, pg.ErrNoScope)
	gotptest.Must(t, g.Join("g"))
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)

	// Kill the scope's process: the scope closes.
	n.Exit(s.PID(), gotp.ErrKill)
	gotptest.Recv(t, s.Done())
	closed(t, sub)
	for name, err := range allOps(g) {
		if !errors.Is(err, pg.ErrScopeClosed) {
			t.Errorf("%s on a closed scope: %v, want ErrScopeClosed", name, err)
		}
	}
	_, err = s.Open(m.Process())
	wantErr(t, err, pg.ErrScopeClosed)
	_, err = s.Attach(nopReplicator{})
	wantErr(t, err, pg.ErrScopeClosed)
	if in := s.Info(); !in.Closed {
		t.Fatalf("Info.Closed = false")
	}
	gotptest.Must(t, s.Stop(ctx)) // already closed

	// A restarted scope starts empty (pg_SUITE scope_restart, one node).
	s2 := newScope(t, n, "app:pg", pg.Options{})
	g2, err := pg.Open(ctx, m.Process(), "app:pg")
	gotptest.Must(t, err)
	if g2.Scope() != s2 {
		t.Fatal("Open found the old scope")
	}
	wantGroups(t, g2)
	gotptest.Must(t, s2.Stop(ctx))
	wantErr(t, g2.Join("g"), pg.ErrScopeClosed)
}

// TestStartLink checks that a scope started by a parent stops with it.
func TestStartLink(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	got := make(chan *pg.Scope, 1)
	parent, err := n.Spawn(func(p *gotp.Process) error {
		s, err := pg.StartLink(context.Background(), p, "linked", pg.Options{})
		if err != nil {
			return err
		}
		got <- s
		_, err = p.Receive(context.Background())
		return err
	})
	gotptest.Must(t, err)
	s := gotptest.Recv(t, got)
	in, _ := n.ProcessInfo(s.PID())
	if !slices.Contains(in.Links, parent) {
		t.Fatalf("scope links %v, want the parent %v", in.Links, parent)
	}
	n.Exit(parent, errors.New("boom"))
	gotptest.Recv(t, s.Done())
}

// TestNodeStopClosesScope checks that stopping the node closes the scope
// and its subscriptions.
func TestNodeStopClosesScope(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "a"})
	s, err := pg.Start(context.Background(), n, "s", pg.Options{})
	gotptest.Must(t, err)
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	sub, _, err := g.Events()
	gotptest.Must(t, err)
	gotptest.Must(t, n.Stop(context.Background()))
	gotptest.Recv(t, s.Done())
	closed(t, sub)
}

type nopReplicator struct{}

func (nopReplicator) Joined(string, []gotp.PID)    {}
func (nopReplicator) Left(string, []gotp.PID)      {}
func (nopReplicator) Broadcast(string, pg.Message) {}
func (nopReplicator) Detached()                    {}

// TestSupervised checks the scope under a supervisor: killed, it is
// restarted empty and found again by id; the supervisor's stop closes it.
func TestSupervised(t *testing.T) {
	ctx := context.Background()
	n := gotptest.NewNode(t, gotptest.Name("a"))
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{pg.ChildSpec("app:pg", pg.Options{})}})
	gotptest.Must(t, err)
	s1, err := pg.Lookup(ctx, n, "app:pg")
	gotptest.Must(t, err)
	m := gotptest.NewSink(t, n)
	g, err := pg.Open(ctx, m.Process(), "app:pg")
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("g"))

	n.Exit(s1.PID(), gotp.ErrKill)
	gotptest.Recv(t, s1.Done())
	wantErr(t, g.Join("g"), pg.ErrScopeClosed)
	var s2 *pg.Scope
	gotptest.Eventually(t, "the restarted scope", func() bool {
		s2, err = pg.Lookup(ctx, n, "app:pg")
		return err == nil && s2 != s1
	})
	g2, err := s2.Open(m.Process())
	gotptest.Must(t, err)
	wantGroups(t, g2)

	gotptest.Must(t, server.Stop(ctx, n, sup, nil))
	gotptest.Recv(t, s2.Done())
}

// TestThunderingHerd ports pg_SUITE's thundering_herd: a thousand
// members join one group and then all exit at the same moment; a watcher
// that subscribed with a snapshot sees every one of them leave, exactly
// once, and the group ends empty.
func TestThunderingHerd(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{Buffer: 4096})
	watcher := gotptest.NewSink(t, n)
	w := open(t, watcher, s)
	const herd = 1000
	pids := make([]gotp.PID, herd)
	release := make(chan struct{})
	joined := make(chan error, herd)
	for i := range pids {
		pid, err := n.Spawn(func(p *gotp.Process) error {
			inst, err := s.Open(p)
			if err == nil {
				err = inst.Join("herd")
			}
			joined <- err
			<-release
			return errors.New("stampede") // all exit together, abnormally
		})
		gotptest.Must(t, err)
		pids[i] = pid
	}
	for range herd {
		gotptest.Must(t, gotptest.Recv(t, joined))
	}
	sub, members, err := w.Monitor("herd")
	gotptest.Must(t, err)
	if !samePIDs(members, pids) {
		t.Fatalf("snapshot has %d members, want the %d of the herd", len(members), herd)
	}
	close(release)
	left := map[gotp.PID]int{}
	for len(left) < herd {
		ev := event(t, sub)
		if ev.Kind != pg.MemberLeft || ev.Group != "herd" {
			t.Fatalf("event %+v, want MemberLeft from herd", ev)
		}
		for _, pid := range ev.PIDs {
			left[pid]++
		}
	}
	for _, pid := range pids {
		if left[pid] != 1 {
			t.Fatalf("%v left %d times, want once", pid, left[pid])
		}
	}
	noEvent(t, sub)
	wantMembers(t, w, "herd")
	wantGroups(t, w)
}

// TestWhichGroupsCopies checks the answers WhichGroups and
// WhichLocalGroups reuse while the groups with members stay the same: a
// caller that modifies its copy changes nobody else's, and a join, a leave
// or an exit that changes the groups shows in the next answer.
func TestWhichGroupsCopies(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "which", pg.Options{})
	me := gotptest.NewSink(t, n)
	g := open(t, me, s)
	gotptest.Must(t, g.Join("x", "y"))
	for _, which := range []func() ([]string, error){g.WhichGroups, g.WhichLocalGroups} {
		got, err := which()
		gotptest.Must(t, err)
		got[0] = "changed"
	}
	wantGroups(t, g, "x", "y")
	wantLocalGroups(t, g, "x", "y")
	gotptest.Must(t, g.Join("x")) // no new group: the same answer
	wantGroups(t, g, "x", "y")
	other := gotptest.NewSink(t, n)
	gotptest.Must(t, open(t, other, s).Join("z"))
	wantGroups(t, g, "x", "y", "z")
	wantLocalGroups(t, g, "x", "y", "z")
	gotptest.Must(t, g.Leave("y"))
	wantGroups(t, g, "x", "z")
	other.Kill(t)
	wantGroups(t, g, "x")
	wantLocalGroups(t, g, "x")
}
