package pg_test

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
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
func (w *wire) flush(t tb) {
	t.Helper()
	done := make(chan struct{})
	w.dst.Send(w.fwd, opBarrier{done})
	recvDone(t, done)
}

// forwarder spawns, on gw's node, the process that applies what arrives
// from the node from.
func forwarder(t tb, n *gotp.Node, from string, gw *pg.Gateway) gotp.PID {
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
func twoNodes(t tb, id string) *pair {
	t.Helper()
	p := &pair{na: newNode(t, "a"), nb: newNode(t, "b")}
	p.sa = newScope(t, p.na, id, pg.Options{})
	p.sb = newScope(t, p.nb, id, pg.Options{})
	p.ab = &wire{from: "a", dst: p.nb}
	p.ba = &wire{from: "b", dst: p.na}
	var err error
	p.ga, err = p.sa.Attach(p.ab)
	must(t, err)
	p.gb, err = p.sb.Attach(p.ba)
	must(t, err)
	p.ab.fwd = forwarder(t, p.nb, "a", p.gb)
	p.ba.fwd = forwarder(t, p.na, "b", p.ga)
	p.ga.LocalSnapshot(func(g map[string][]gotp.PID) { p.nb.Send(p.ab.fwd, opSync{g}) })
	p.gb.LocalSnapshot(func(g map[string][]gotp.PID) { p.na.Send(p.ba.fwd, opSync{g}) })
	p.sync(t)
	return p
}

func (p *pair) sync(t tb) {
	t.Helper()
	p.ab.flush(t)
	p.ba.flush(t)
}

// TestRemoteTwo ports pg_SUITE's two: a member on one node is a member
// (not a local one) on the other, and disappears there when it exits;
// members of the other node are seen here.
func TestRemoteTwo(t *testing.T) {
	p := twoNodes(t, "two")
	am := spawn(t, p.na)
	ag := am.open(t, p.sa)
	bg := spawn(t, p.nb).open(t, p.sb)

	must(t, ag.Join("two"))
	wantLocalMembers(t, ag, "two", am.pid)
	p.sync(t)
	wantMembers(t, bg, "two", am.pid)
	wantLocalMembers(t, bg, "two")
	wantGroups(t, bg, "two")
	wantLocalGroups(t, bg)

	am.kill(t)
	p.sync(t)
	wantMembers(t, bg, "two")
	wantGroups(t, bg)

	b2, b3 := spawn(t, p.nb), spawn(t, p.nb)
	must(t, b2.open(t, p.sb).Join("two"))
	must(t, b3.open(t, p.sb).Join("two"))
	p.sync(t)
	obs := spawn(t, p.na).open(t, p.sa)
	wantMembers(t, obs, "two", b2.pid, b3.pid)
	wantLocalMembers(t, obs, "two")
	if in := p.sa.Info(); in.RemoteJoins != 2 || in.LocalJoins != 0 || len(in.RemoteNodes) != 1 || in.RemoteNodes[0] != "b" {
		t.Fatalf("Info on a = %+v", in)
	}
}

// TestRemoteInitialSync ports pg_SUITE's initial: members that joined
// before the nodes were wired arrive with the full sync.
func TestRemoteInitialSync(t *testing.T) {
	na, nb := newNode(t, "a"), newNode(t, "b")
	sa, sb := newScope(t, na, "s", pg.Options{}), newScope(t, nb, "s", pg.Options{})
	am := spawn(t, na)
	must(t, am.open(t, sa).Join("g", "g"))
	ab := &wire{from: "a", dst: nb}
	ga, err := sa.Attach(ab)
	must(t, err)
	gb, err := sb.Attach(nopReplicator{})
	must(t, err)
	_, err = sa.Attach(ab)
	wantErr(t, err, pg.ErrAttached)
	ab.fwd = forwarder(t, nb, "a", gb)
	ga.LocalSnapshot(func(g map[string][]gotp.PID) { nb.Send(ab.fwd, opSync{g}) })
	ab.flush(t)
	wantMembers(t, spawn(t, nb).open(t, sb), "g", am.pid, am.pid)
}

// TestRemoteEmptyGroup ports pg_SUITE's empty_group_by_remote_leave: a
// group emptied by remote leaves is gone, and so is the node's entry.
func TestRemoteEmptyGroup(t *testing.T) {
	p := twoNodes(t, "s")
	obs := spawn(t, p.na).open(t, p.sa)
	b1, b2 := spawn(t, p.nb), spawn(t, p.nb)
	g1, g2 := b1.open(t, p.sb), b2.open(t, p.sb)
	must(t, g1.Join("g"))
	p.sync(t)
	wantMembers(t, obs, "g", b1.pid)
	must(t, g1.Leave("g"))
	p.sync(t)
	wantMembers(t, obs, "g")
	wantGroups(t, obs)
	if in := p.sa.Info(); in.RemoteJoins != 0 || len(in.RemoteNodes) != 0 || in.Groups != 0 {
		t.Fatalf("Info = %+v, want no remote state", in)
	}
	must(t, g1.Join("g"))
	must(t, g2.Join("g"))
	p.sync(t)
	wantMembers(t, obs, "g", b1.pid, b2.pid)
	must(t, g2.Leave("g"))
	must(t, g1.Leave("g"))
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
	obs := spawn(t, p.na).open(t, p.sa)
	b := spawn(t, p.nb)
	bg := b.open(t, p.sb)
	for range 16 {
		must(t, bg.Join("two"))
	}
	for range 4 {
		must(t, bg.Leave("two"))
	}
	p.sync(t)
	members, err := obs.Members("two")
	must(t, err)
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
	a := spawn(t, p.na)
	ag := a.open(t, p.sa)
	b := spawn(t, p.nb)
	bg := b.open(t, p.sb)
	must(t, bg.Join("g"))
	p.sync(t)

	sub, members, err := ag.Monitor("g")
	must(t, err)
	if !samePIDs(members, []gotp.PID{b.pid}) {
		t.Fatalf("snapshot %v, want the remote member", members)
	}
	esub, snap, err := ag.Events()
	must(t, err)
	if !samePIDs(snap["g"], []gotp.PID{b.pid}) {
		t.Fatalf("Events snapshot %v", snap)
	}

	must(t, bg.Join("g", "g"))
	must(t, bg.Leave("g"))
	p.sync(t)
	for _, s := range []*pg.Subscription{sub, esub} {
		wantEvent(t, s, pg.MemberJoined, "g", b.pid)
		wantEvent(t, s, pg.MemberJoined, "g", b.pid)
		wantEvent(t, s, pg.MemberLeft, "g", b.pid)
	}
	must(t, ag.Join("g"))
	wantEvent(t, sub, pg.MemberJoined, "g", a.pid)
	wantEvent(t, esub, pg.MemberJoined, "g", a.pid)

	// Node b is lost: its members leave in one event, with multiplicity.
	p.ga.NodeDown("b")
	for _, s := range []*pg.Subscription{sub, esub} {
		wantEvent(t, s, pg.MemberLeft, "g", b.pid, b.pid)
	}
	wantMembers(t, ag, "g", a.pid)
	if in := p.sa.Info(); in.RemoteJoins != 0 || len(in.RemoteNodes) != 0 {
		t.Fatalf("remote state after NodeDown: %+v", in)
	}
	// Remote changes are not reported back: b's view has a's member once.
	p.sync(t)
	wantMembers(t, bg, "g", a.pid, b.pid, b.pid)
}

// TestRemoteBroadcast checks that a broadcast reaches remote members with
// one message per node, local members directly, and that BroadcastLocal
// stays on the node.
func TestRemoteBroadcast(t *testing.T) {
	p := twoNodes(t, "s")
	sender := spawn(t, p.na)
	sg := sender.open(t, p.sa)
	local := spawn(t, p.na)
	must(t, local.open(t, p.sa).Join("g"))
	var remote []*member
	for range 3 {
		m := spawn(t, p.nb)
		must(t, m.open(t, p.sb).Join("g", "g"))
		remote = append(remote, m)
	}
	p.sync(t)

	must(t, sg.Broadcast("g", "hello", 7))
	if got := p.ab.broadcasts.Load(); got != 1 {
		t.Fatalf("%d messages to node b, want 1", got)
	}
	want := pg.Message{Scope: "s", Group: "g", Topic: "hello", Payload: 7, From: sender.pid}
	if got := local.next(t); got != want {
		t.Fatalf("local got %#v", got)
	}
	for _, m := range remote {
		if got := m.next(t); got != want {
			t.Fatalf("remote got %#v, want %#v", got, want)
		}
	}
	must(t, sg.BroadcastLocal("g", "local only", nil))
	if got := local.next(t).(pg.Message); got.Topic != "local only" {
		t.Fatalf("local got %#v", got)
	}
	p.sync(t)
	if got := p.ab.broadcasts.Load(); got != 1 {
		t.Fatalf("BroadcastLocal went to node b")
	}
	for _, m := range remote {
		m.none(t)
	}
}

// TestRemoteSync ports pg_SUITE's forced_sync: a full sync replaces what
// is known of the node, with events for the difference only, and a later
// true sync repairs a false one.
func TestRemoteSync(t *testing.T) {
	p := twoNodes(t, "s")
	a := spawn(t, p.na)
	ag := a.open(t, p.sa)
	must(t, ag.Join("one"))
	b := spawn(t, p.nb)
	must(t, b.open(t, p.sb).Join("one"))
	p.sync(t)
	wantMembers(t, ag, "one", a.pid, b.pid)

	sub, _, err := ag.Events()
	must(t, err)
	// A false sync: b joined "one" twice and "fake" twice.
	p.ga.Sync("b", map[string][]gotp.PID{"one": {b.pid, b.pid}, "fake": {b.pid, b.pid}})
	wantMembers(t, ag, "one", a.pid, b.pid, b.pid)
	wantMembers(t, ag, "fake", b.pid, b.pid)
	evs := map[string]pg.Event{}
	for range 2 {
		ev := event(t, sub)
		evs[ev.Group] = ev
	}
	if ev := evs["one"]; ev.Kind != pg.MemberJoined || !samePIDs(ev.PIDs, []gotp.PID{b.pid}) {
		t.Fatalf("one: %+v, want one more join", ev)
	}
	if ev := evs["fake"]; ev.Kind != pg.MemberJoined || !samePIDs(ev.PIDs, []gotp.PID{b.pid, b.pid}) {
		t.Fatalf("fake: %+v", ev)
	}
	noEvent(t, sub)

	// The true state, as b would send it.
	p.gb.LocalSnapshot(func(g map[string][]gotp.PID) { p.na.Send(p.ba.fwd, opSync{g}) })
	p.sync(t)
	wantMembers(t, ag, "one", a.pid, b.pid)
	wantMembers(t, ag, "fake")
	wantGroups(t, ag, "one")
	evs = map[string]pg.Event{}
	for range 2 {
		ev := event(t, sub)
		evs[ev.Group] = ev
	}
	if ev := evs["one"]; ev.Kind != pg.MemberLeft || !samePIDs(ev.PIDs, []gotp.PID{b.pid}) {
		t.Fatalf("one: %+v", ev)
	}
	if ev := evs["fake"]; ev.Kind != pg.MemberLeft || !samePIDs(ev.PIDs, []gotp.PID{b.pid, b.pid}) {
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
	a := spawn(t, p.na)
	ag := a.open(t, p.sa)
	must(t, ag.Join("g"))
	b := spawn(t, p.nb)

	p.ga.Join("a", "g", []gotp.PID{a.pid})          // claims the local node
	p.ga.Leave("a", "g", []gotp.PID{a.pid})         // same
	p.ga.Join("c", "g", []gotp.PID{b.pid})          // b's process, reported by c
	p.ga.Join("b", "", []gotp.PID{b.pid})           // no group
	p.ga.Sync("a", map[string][]gotp.PID{"g": nil}) // claims the local node
	p.ga.NodeDown("a")
	wantMembers(t, ag, "g", a.pid)
	wantGroups(t, ag, "g")
	if in := p.sa.Info(); in.RemoteJoins != 0 {
		t.Fatalf("Info = %+v, want no remote joins", in)
	}
	// A leave of a process that is not a member is ignored.
	p.ga.Leave("b", "g", []gotp.PID{b.pid})
	wantMembers(t, ag, "g", a.pid)
}

// TestRemoteScopeStop checks that a closed scope tells its replicator,
// which the cluster turns into a node-down on the peers.
func TestRemoteScopeStop(t *testing.T) {
	p := twoNodes(t, "s")
	a := spawn(t, p.na)
	must(t, a.open(t, p.sa).Join("g"))
	obs := spawn(t, p.nb).open(t, p.sb)
	p.sync(t)
	wantMembers(t, obs, "g", a.pid)
	must(t, p.sa.Stop(t.Context()))
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
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	rep := &recordingReplicator{}
	gw, err := s.Attach(rep)
	must(t, err)
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
		inst := spawn(t, n).open(t, s)
		pids[w] = inst.PID()
		wg.Go(func() {
			joined := map[string]int{}
			for i := range ops {
				g := []string{"x", "y", "z"}[(i*7+w)%3]
				if joined[g] > 0 && (i+w)%2 == 0 {
					must(t, inst.Leave(g))
					joined[g]--
					done[w] = append(done[w], op{false, g})
				} else {
					must(t, inst.Join(g))
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
	obs := spawn(t, n).open(t, s)
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
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	obs := spawn(t, n).open(t, s)
	for range 50 {
		m := spawn(t, n)
		inst := m.open(t, s)
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
		must(t, err)
		if int64(len(members)) != ok.Load() || ok.Load() < after {
			t.Fatalf("%d members, %d successful joins (%d when Release returned)", len(members), ok.Load(), after)
		}
		wantErr(t, inst.Join("g"), pg.ErrReleased)
		m.kill(t)
		wantMembers(t, obs, "g")
	}
}
