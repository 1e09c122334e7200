package pg_test

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

// wire is a trivial in-process Replicator: it carries one scope's reports
// to the scope of the same id on another node, through a forwarder process
// there whose mailbox queues them in order (so the reporting scope never
// waits, as the Replicator contract asks) and which applies them to that
// scope's Gateway. It stands in for the cluster package.
type wire struct {
	from       string     // the reporting node
	dst        *gotp.Node // the node of the other scope
	fwd        gotp.PID   // the forwarder on dst
	broadcasts atomic.Int64
	detached   atomic.Bool
}

type (
	opJoin struct {
		group string
		pids  []gotp.PID
	}
	opLeave struct {
		group string
		pids  []gotp.PID
	}
	opSync     struct{ groups map[string][]gotp.PID }
	opDeliver  struct{ msg pg.Message }
	opNodeDown struct{}
	opBarrier  struct{ done chan struct{} }
)

func (w *wire) Joined(group string, pids []gotp.PID) { w.dst.Send(w.fwd, opJoin{group, pids}) }
func (w *wire) Left(group string, pids []gotp.PID)   { w.dst.Send(w.fwd, opLeave{group, pids}) }
func (w *wire) Broadcast(node string, msg pg.Message) {
	if node != w.dst.Name() {
		panic("broadcast to an unknown node " + node)
	}
	w.broadcasts.Add(1)
	w.dst.Send(w.fwd, opDeliver{msg})
}

// Detached tells the peer that this node's scope is gone, as the cluster
// would.
func (w *wire) Detached() {
	w.detached.Store(true)
	w.dst.Send(w.fwd, opNodeDown{})
}

// flush waits until everything w has carried so far has been applied.
func (w *wire) flush(t gotptest.TB) {
	t.Helper()
	done := make(chan struct{})
	w.dst.Send(w.fwd, opBarrier{done})
	gotptest.Recv(t, done)
}

// forwarder spawns, on gw's node, the process that applies what arrives
// from the node from.
func forwarder(t gotptest.TB, n *gotp.Node, from string, gw *pg.Gateway) gotp.PID {
	t.Helper()
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(_ *gotp.Process, msg any) (bool, error) {
		switch m := msg.(type) {
		case opJoin:
			gw.Join(from, m.group, m.pids)
		case opLeave:
			gw.Leave(from, m.group, m.pids)
		case opSync:
			gw.Sync(from, m.groups)
		case opDeliver:
			gw.Deliver(m.msg)
		case opNodeDown:
			gw.NodeDown(from)
		case opBarrier:
			close(m.done)
		}
		return false, nil
	}), nil)
	if err != nil {
		t.Fatalf("SpawnHandler: %v", err)
	}
	return pid
}

type pair struct {
	na, nb *gotp.Node
	sa, sb *pg.Scope
	ga, gb *pg.Gateway // the gateways of sa and sb
	ab, ba *wire       // a's reports to b, b's reports to a
}

// twoNodes starts nodes "a" and "b", a scope id on each, wired together,
// with each side's initial state sent to the other as a full sync.
func twoNodes(t gotptest.TB, id string) *pair {
	t.Helper()
	p := &pair{na: gotptest.NewNode(t, gotptest.Name("a")), nb: gotptest.NewNode(t, gotptest.Name("b"))}
	p.sa = newScope(t, p.na, id, pg.Options{})
	p.sb = newScope(t, p.nb, id, pg.Options{})
	p.ab = &wire{from: "a", dst: p.nb}
	p.ba = &wire{from: "b", dst: p.na}
	var err error
	p.ga, err = p.sa.Attach(p.ab)
	gotptest.Must(t, err)
	p.gb, err = p.sb.Attach(p.ba)
	gotptest.Must(t, err)
	p.ab.fwd = forwarder(t, p.nb, "a", p.gb)
	p.ba.fwd = forwarder(t, p.na, "b", p.ga)
	p.ga.LocalSnapshot(func(g map[string][]gotp.PID) { p.nb.Send(p.ab.fwd, opSync{g}) })
	p.gb.LocalSnapshot(func(g map[string][]gotp.PID) { p.na.Send(p.ba.fwd, opSync{g}) })
	p.sync(t)
	return p
}

func (p *pair) sync(t gotptest.TB) {
	t.Helper()
	p.ab.flush(t)
	p.ba.flush(t)
}

// TestRemoteTwo ports pg_SUITE's two: a member on one node is a member
// (not a local one) on the other, and disappears there when it exits;
// members of the other node are seen here.
func TestRemoteTwo(t *testing.T) {
	p := twoNodes(t, "two")
	am := gotptest.NewSink(t, p.na)
	ag := open(t, am, p.sa)
	bg := open(t, gotptest.NewSink(t, p.nb), p.sb)

	gotptest.Must(t, ag.Join("two"))
	wantLocalMembers(t, ag, "two", am.PID())
	p.sync(t)
	wantMembers(t, bg, "two", am.PID())
	wantLocalMembers(t, bg, "two")
	wantGroups(t, bg, "two")
	wantLocalGroups(t, bg)

	am.Kill(t)
	p.sync(t)
	wantMembers(t, bg, "two")
	wantGroups(t, bg)

	b2, b3 := gotptest.NewSink(t, p.nb), gotptest.NewSink(t, p.nb)
	gotptest.Must(t, open(t, b2, p.sb).Join("two"))
	gotptest.Must(t, open(t, b3, p.sb).Join("two"))
	p.sync(t)
	obs := open(t, gotptest.NewSink(t, p.na), p.sa)
	wantMembers(t, obs, "two", b2.PID(), b3.PID())
	wantLocalMembers(t, obs, "two")
	if in := p.sa.Info(); in.RemoteJoins != 2 || in.LocalJoins != 0 || len(in.RemoteNodes) != 1 || in.RemoteNodes[0] != "b" {
		t.Fatalf("Info on a = %+v", in)
	}
}

// TestRemoteInitialSync ports pg_SUITE's initial: members that joined
// before the nodes were wired arrive with the full sync.
func TestRemoteInitialSync(t *testing.T) {
	na, nb := gotptest.NewNode(t, gotptest.Name("a")), gotptest.NewNode(t, gotptest.Name("b"))
	sa, sb := newScope(t, na, "s", pg.Options{}), newScope(t, nb, "s", pg.Options{})
	am := gotptest.NewSink(t, na)
	gotptest.Must(t, open(t, am, sa).Join("g", "g"))
	ab := &wire{from: "a", dst: nb}
	ga, err := sa.Attach(ab)
	gotptest.Must(t, err)
	gb, err := sb.Attach(nopReplicator{})
	gotptest.Must(t, err)
	_, err = sa.Attach(ab)
	wantErr(t, err, pg.ErrAttached)
	ab.fwd = forwarder(t, nb, "a", gb)
	ga.LocalSnapshot(func(g map[string][]gotp.PID) { nb.Send(ab.fwd, opSync{g}) })
	ab.flush(t)
	wantMembers(t, open(t, gotptest.NewSink(t, nb), sb), "g", am.PID(), am.PID())
}

// TestRemoteEmptyGroup ports pg_SUITE's empty_group_by_remote_leave: a
// group emptied by remote leaves is gone, and so is the node's entry.
func TestRemoteEmptyGroup(t *testing.T) {
	p := twoNodes(t, "s")
	obs := open(t, gotptest.NewSink(t, p.na), p.sa)
	b1, b2 := gotptest.NewSink(t, p.nb), gotptest.NewSink(t, p.nb)
	g1, g2 := open(t, b1, p.sb), open(t, b2, p.sb)
	gotptest.Must(t, g1.Join("g"))
	p.sync(t)
	wantMembers(t, obs, "g", b1.PID())
	gotptest.Must(t, g1.Leave("g"))
	p.sync(t)
	wantMembers(t, obs, "g")
	wantGroups(t, obs)
	if in := p.sa.Info(); in.RemoteJoins != 0 || len(in.RemoteNodes) != 0 || in.Groups != 0 {
		t.Fatalf("Info = %+v, want no remote state", in)
	}
	gotptest.Must(t, g1.Join("g"))
	gotptest.Must(t, g2.Join("g"))
	p.sync(t)
	wantMembers(t, obs, "g", b1.PID(), b2.PID())
	gotptest.Must(t, g2.Leave("g"))
	gotptest.Must(t, g1.Leave("g"))
	p.sync(t)
	wantGroups(t, obs)
	if in := p.sa.Info(); len(in.RemoteNodes) != 0 {
		t.Fatalf("Info = %+v", in)
	}
}

// TestRemoteGroupLeave ports pg_SUITE's group_leave: sixteen remote joins,
// four leaves, twelve remain; the node goes down, none remain.
func TestRemoteGroupLeave(t *testing.T) {
	p := twoNodes(t, "s")
	obs := open(t, gotptest.NewSink(t, p.na), p.sa)
	b := gotptest.NewSink(t, p.nb)
	bg := open(t, b, p.sb)
	for range 16 {
		gotptest.Must(t, bg.Join("two"))
	}
	for range 4 {
		gotptest.Must(t, bg.Leave("two"))
	}
	p.sync(t)
	members, err := obs.Members("two")
	gotptest.Must(t, err)
	if len(members) != 12 {
		t.Fatalf("%d members, want 12", len(members))
	}
	p.ga.NodeDown("b")
	wantMembers(t, obs, "two")
	wantGroups(t, obs)
}

// TestRemoteMonitor checks that monitors and Events see remote members in
// their snapshots and remote joins, leaves and node loss as events.
func TestRemoteMonitor(t *testing.T) {
	p := twoNodes(t, "s")
	a := gotptest.NewSink(t, p.na)
	ag := open(t, a, p.sa)
	b := gotptest.NewSink(t, p.nb)
	bg := open(t, b, p.sb)
	gotptest.Must(t, bg.Join("g"))
	p.sync(t)

	sub, members, err := ag.Monitor("g")
	gotptest.Must(t, err)
	if !samePIDs(members, []gotp.PID{b.PID()}) {
		t.Fatalf("snapshot %v, want the remote member", members)
	}
	esub, snap, err := ag.Events()
	gotptest.Must(t, err)
	if !samePIDs(snap["g"], []gotp.PID{b.PID()}) {
		t.Fatalf("Events snapshot %v", snap)
	}

	gotptest.Must(t, bg.Join("g", "g"))
	gotptest.Must(t, bg.Leave("g"))
	p.sync(t)
	for _, s := range []*pg.Subscription{sub, esub} {
		wantEvent(t, s, pg.MemberJoined, "g", b.PID())
		wantEvent(t, s, pg.MemberJoined, "g", b.PID())
		wantEvent(t, s, pg.MemberLeft, "g", b.PID())
	}
	gotptest.Must(t, ag.Join("g"))
	wantEvent(t, sub, pg.MemberJoined, "g", a.PID())
	wantEvent(t, esub, pg.MemberJoined, "g", a.PID())

	// Node b is lost: its members leave in one event, with multiplicity.
	p.ga.NodeDown("b")
	for _, s := range []*pg.Subscription{sub, esub} {
		wantEvent(t, s, pg.MemberLeft, "g", b.PID(), b.PID())
	}
	wantMembers(t, ag, "g", a.PID())
	if in := p.sa.Info(); in.RemoteJoins != 0 || len(in.RemoteNodes) != 0 {
		t.Fatalf("remote state after NodeDown: %+v", in)
	}
	// Remote changes are not reported back: b's view has a's member once.
	p.sync(t)
	wantMembers(t, bg, "g", a.PID(), b.PID(), b.PID())
}

// TestRemoteBroadcast checks that a broadcast reaches remote members with
// one message per node, local members directly, and that BroadcastLocal
// stays on the node.
func TestRemoteBroadcast(t *testing.T) {
	p := twoNodes(t, "s")
	sender := gotptest.NewSink(t, p.na)
	sg := open(t, sender, p.sa)
	local := gotptest.NewSink(t, p.na)
	gotptest.Must(t, open(t, local, p.sa).Join("g"))
	var remote []*gotptest.Sink
	for range 3 {
		m := gotptest.NewSink(t, p.nb)
		gotptest.Must(t, open(t, m, p.sb).Join("g", "g"))
		remote = append(remote, m)
	}
	p.sync(t)

	gotptest.Must(t, sg.Broadcast("g", "hello", 7))
	if got := p.ab.broadcasts.Load(); got != 1 {
		t.Fatalf("%d messages to node b, want 1", got)
	}
	want := pg.Message{Scope: "s", Group: "g", Topic: "hello", Payload: 7, From: sender.PID()}
	if got := local.Next(t); got != want {
		t.Fatalf("local got %#v", got)
	}
	for _, m := range remote {
		if got := m.Next(t); got != want {
			t.Fatalf("remote got %#v, want %#v", got, want)
		}
	}
	gotptest.Must(t, sg.BroadcastLocal("g", "local only", nil))
	if got := local.Next(t).(pg.Message); got.Topic != "local only" {
		t.Fatalf("local got %#v", got)
	}
	p.sync(t)
	if got := p.ab.broadcasts.Load(); got != 1 {
		t.Fatalf("BroadcastLocal went to node b")
	}
	for _, m := range remote {
		m.None(t)
	}
}

// TestRemoteSync ports pg_SUITE's forced_sync: a full sync replaces what
// is known of the node, with events for the difference only, and a later
// true sync repairs a false one.
func TestRemoteSync(t *testing.T) {
	p := twoNodes(t, "s")
	a := gotptest.NewSink(t, p.na)
	ag := open(t, a, p.sa)
	gotptest.Must(t, ag.Join("one"))
	b := gotptest.NewSink(t, p.nb)
	gotptest.Must(t, open(t, b, p.sb).Join("one"))
	p.sync(t)
	wantMembers(t, ag, "one", a.PID(), b.PID())

	sub, _, err := ag.Events()
	gotptest.Must(t, err)
	// A false sync: b joined "one" twice and "fake" twice.
	p.ga.Sync("b", map[string][]gotp.PID{"one": {b.PID(), b.PID()}, "fake": {b.PID(), b.PID()}})
	wantMembers(t, ag, "one", a.PID(), b.PID(), b.PID())
	wantMembers(t, ag, "fake", b.PID(), b.PID())
	evs := map[string]pg.Event{}
	for range 2 {
		ev := event(t, sub)
		evs[ev.Group] = ev
	}
	if ev := evs["one"]; ev.Kind != pg.MemberJoined || !samePIDs(ev.PIDs, []gotp.PID{b.PID()}) {
		t.Fatalf("one: %+v, want one more join", ev)
	}
	if ev := evs["fake"]; ev.Kind != pg.MemberJoined || !samePIDs(ev.PIDs, []gotp.PID{b.PID(), b.PID()}) {
		t.Fatalf("fake: %+v", ev)
	}
	noEvent(t, sub)

	// The true state, as b would send it.
	p.gb.LocalSnapshot(func(g map[string][]gotp.PID) { p.na.Send(p.ba.fwd, opSync{g}) })
	p.sync(t)
	wantMembers(t, ag, "one", a.PID(), b.PID())
	wantMembers(t, ag, "fake")
	wantGroups(t, ag, "one")
	evs = map[string]pg.Event{}
	for range 2 {
		ev := event(t, sub)
		evs[ev.Group] = ev
	}
	if ev := evs["one"]; ev.Kind != pg.MemberLeft || !samePIDs(ev.PIDs, []gotp.PID{b.PID()}) {
		t.Fatalf("one: %+v", ev)
	}
	if ev := evs["fake"]; ev.Kind != pg.MemberLeft || !samePIDs(ev.PIDs, []gotp.PID{b.PID(), b.PID()}) {
		t.Fatalf("fake: %+v", ev)
	}
	// The same sync again changes nothing.
	p.gb.LocalSnapshot(func(g map[string][]gotp.PID) { p.na.Send(p.ba.fwd, opSync{g}) })
	p.sync(t)
	noEvent(t, sub)
}

// TestRemoteRejectsForeign ports the spirit of pg_SUITE's overlay_missing
// and process_owner_check: a gateway ignores reports that claim this node,
// and processes that do not belong to the node reporting them.
func TestRemoteRejectsForeign(t *testing.T) {
	p := twoNodes(t, "s")
	a := gotptest.NewSink(t, p.na)
	ag := open(t, a, p.sa)
	gotptest.Must(t, ag.Join("g"))
	b := gotptest.NewSink(t, p.nb)

	p.ga.Join("a", "g", []gotp.PID{a.PID()})        // claims the local node
	p.ga.Leave("a", "g", []gotp.PID{a.PID()})       // same
	p.ga.Join("c", "g", []gotp.PID{b.PID()})        // b's process, reported by c
	p.ga.Join("b", "", []gotp.PID{b.PID()})         // no group
	p.ga.Sync("a", map[string][]gotp.PID{"g": nil}) // claims the local node
	p.ga.NodeDown("a")
	wantMembers(t, ag, "g", a.PID())
	wantGroups(t, ag, "g")
	if in := p.sa.Info(); in.RemoteJoins != 0 {
		t.Fatalf("Info = %+v, want no remote joins", in)
	}
	// A leave of a process that is not a member is ignored.
	p.ga.Leave("b", "g", []gotp.PID{b.PID()})
	wantMembers(t, ag, "g", a.PID())
}

// TestRemoteScopeStop checks that a closed scope tells its replicator,
// which the cluster turns into a node-down on the peers.
func TestRemoteScopeStop(t *testing.T) {
	p := twoNodes(t, "s")
	a := gotptest.NewSink(t, p.na)
	gotptest.Must(t, open(t, a, p.sa).Join("g"))
	obs := open(t, gotptest.NewSink(t, p.nb), p.sb)
	p.sync(t)
	wantMembers(t, obs, "g", a.PID())
	gotptest.Must(t, p.sa.Stop(t.Context()))
	if !p.ab.detached.Load() {
		t.Fatal("replicator not detached")
	}
	p.ab.flush(t)
	wantMembers(t, obs, "g")
	// The closed scope's gateway ignores everything.
	p.ga.Join("b", "g", []gotp.PID{obs.PID()})
	p.ga.Deliver(pg.Message{Group: "g"})
	p.ga.LocalSnapshot(func(g map[string][]gotp.PID) {
		if len(g) != 0 {
			t.Errorf("snapshot of a closed scope: %v", g)
		}
	})
}

// recordingReplicator records every report, for order checks.
type recordingReplicator struct {
	mu      sync.Mutex
	reports []report
}

type report struct {
	joined bool
	group  string
	pids   []gotp.PID
}

func (r *recordingReplicator) Joined(group string, pids []gotp.PID) {
	r.mu.Lock()
	r.reports = append(r.reports, report{true, group, slices.Clone(pids)})
	r.mu.Unlock()
}

func (r *recordingReplicator) Left(group string, pids []gotp.PID) {
	r.mu.Lock()
	r.reports = append(r.reports, report{false, group, slices.Clone(pids)})
	r.mu.Unlock()
}
func (r *recordingReplicator) Broadcast(string, pg.Message) {}
func (r *recordingReplicator) Detached()                    {}

// TestReplicatorOrder checks the Replicator contract under concurrency:
// many processes join and leave at once, and the reports about each
// process come in the order of its operations, so that replaying them
// (as a peer would, starting from LocalSnapshot) rebuilds the membership.
func TestReplicatorOrder(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	rep := &recordingReplicator{}
	gw, err := s.Attach(rep)
	gotptest.Must(t, err)
	var start map[string][]gotp.PID
	gw.LocalSnapshot(func(g map[string][]gotp.PID) { start = g })
	if len(start) != 0 {
		t.Fatalf("initial snapshot %v", start)
	}

	const workers, ops = 8, 200
	type op struct {
		join  bool
		group string
	}
	var wg sync.WaitGroup
	done := make([][]op, workers)
	pids := make([]gotp.PID, workers)
	for w := range workers {
		inst := open(t, gotptest.NewSink(t, n), s)
		pids[w] = inst.PID()
		wg.Go(func() {
			joined := map[string]int{}
			for i := range ops {
				g := []string{"x", "y", "z"}[(i*7+w)%3]
				if joined[g] > 0 && (i+w)%2 == 0 {
					gotptest.Must(t, inst.Leave(g))
					joined[g]--
					done[w] = append(done[w], op{false, g})
				} else {
					gotptest.Must(t, inst.Join(g))
					joined[g]++
					done[w] = append(done[w], op{true, g})
				}
			}
		})
	}
	wg.Wait()

	rep.mu.Lock()
	defer rep.mu.Unlock()
	perPID := map[gotp.PID][]op{}
	replay := map[string]map[gotp.PID]int{}
	for _, r := range rep.reports {
		for _, pid := range r.pids {
			perPID[pid] = append(perPID[pid], op{r.joined, r.group})
			if replay[r.group] == nil {
				replay[r.group] = map[gotp.PID]int{}
			}
			if r.joined {
				replay[r.group][pid]++
			} else if replay[r.group][pid]--; replay[r.group][pid] < 0 {
				t.Fatalf("a leave of %v from %q reported before its join", pid, r.group)
			}
		}
	}
	for w, pid := range pids {
		if !slices.Equal(perPID[pid], done[w]) {
			t.Fatalf("worker %d: reports %v, operations %v", w, perPID[pid], done[w])
		}
	}
	obs := open(t, gotptest.NewSink(t, n), s)
	for _, g := range []string{"x", "y", "z"} {
		var rebuilt []gotp.PID
		for pid, k := range replay[g] {
			for range k {
				rebuilt = append(rebuilt, pid)
			}
		}
		wantMembers(t, obs, g, rebuilt...)
	}
}

// TestReleaseRacesJoins checks that once Release has returned no
// operation of the instance succeeds, even with joins racing it from other
// goroutines, and that the memberships made before stay.
func TestReleaseRacesJoins(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	obs := open(t, gotptest.NewSink(t, n), s)
	for range 50 {
		m := gotptest.NewSink(t, n)
		inst := open(t, m, s)
		var ok atomic.Int64
		var released atomic.Bool
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					late := released.Load()
					if err := inst.Join("g"); err == nil {
						if late {
							t.Errorf("a Join begun after Release returned succeeded")
						}
						ok.Add(1)
					} else if !errors.Is(err, pg.ErrReleased) {
						t.Errorf("Join: %v", err)
						return
					}
				}
			})
		}
		for ok.Load() == 0 {
			runtime.Gosched()
		}
		inst.Release()
		released.Store(true)
		after := ok.Load()
		close(stop)
		wg.Wait()
		// A join may have been between its check and its count when
		// Release returned, but none can succeed after: the members are
		// exactly the successful joins, and no more join gets in.
		members, err := obs.Members("g")
		gotptest.Must(t, err)
		if int64(len(members)) != ok.Load() || ok.Load() < after {
			t.Fatalf("%d members, %d successful joins (%d when Release returned)", len(members), ok.Load(), after)
		}
		wantErr(t, inst.Join("g"), pg.ErrReleased)
		m.Kill(t)
		wantMembers(t, obs, "g")
	}
}
