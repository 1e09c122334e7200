package pg_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
)

// TestMonitor ports the single-node part of pg_SUITE's monitor case: a
// group monitor sees local joins and leaves, a second monitor starts with
// the current members, and a closed monitor sees nothing more.
func TestMonitor(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	self := spawn(t, n)
	g := self.open(t, s)

	sub, members, err := g.Monitor("grp")
	must(t, err)
	if members == nil || len(members) != 0 {
		t.Fatalf("initial snapshot %v, want empty", members)
	}
	if sub.Group() != "grp" {
		t.Fatalf("Group() = %q", sub.Group())
	}
	must(t, g.Join("grp"))
	wantEvent(t, sub, pg.MemberJoined, "grp", self.pid)

	other := spawn(t, n)
	og := other.open(t, s)
	sub2, members, err := og.Monitor("grp")
	must(t, err)
	if !samePIDs(members, []gotp.PID{self.pid}) {
		t.Fatalf("second snapshot %v, want [self]", members)
	}

	third := spawn(t, n)
	tg := third.open(t, s)
	must(t, tg.Join("grp", "grp"))
	for _, sb := range []*pg.Subscription{sub, sub2} {
		wantEvent(t, sb, pg.MemberJoined, "grp", third.pid)
		wantEvent(t, sb, pg.MemberJoined, "grp", third.pid)
	}
	must(t, g.Leave("grp"))
	third.kill(t)
	for _, sb := range []*pg.Subscription{sub, sub2} {
		wantEvent(t, sb, pg.MemberLeft, "grp", self.pid)
		wantEvent(t, sb, pg.MemberLeft, "grp", third.pid, third.pid)
	}
	// Events of other groups do not reach a group monitor.
	must(t, g.Join("elsewhere"))
	noEvent(t, sub)

	sub.Close()
	closed(t, sub)
	must(t, g.Join("grp"))
	wantEvent(t, sub2, pg.MemberJoined, "grp", self.pid)
	if in := s.Info(); in.Subscriptions != 1 {
		t.Fatalf("Info.Subscriptions = %d, want 1", in.Subscriptions)
	}
}

// TestMonitorScope ports pg_SUITE's monitor_scope and
// monitor_nonempty_scope on one node: Events returns every group with its
// members, then the events of every group.
func TestMonitorScope(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	a, b := spawn(t, n), spawn(t, n)
	ga, gb := a.open(t, s), b.open(t, s)
	must(t, ga.Join("one"))
	must(t, gb.Join("one", "two", "two"))

	sub, snap, err := ga.Events()
	must(t, err)
	if sub.Group() != "" {
		t.Fatalf("Group() = %q, want \"\"", sub.Group())
	}
	if len(snap) != 2 || !samePIDs(snap["one"], []gotp.PID{a.pid, b.pid}) || !samePIDs(snap["two"], []gotp.PID{b.pid, b.pid}) {
		t.Fatalf("snapshot %v", snap)
	}
	must(t, gb.Leave("two"))
	wantEvent(t, sub, pg.MemberLeft, "two", b.pid)
	must(t, ga.Join("three"))
	wantEvent(t, sub, pg.MemberJoined, "three", a.pid)
	b.kill(t)
	got := map[string][]gotp.PID{}
	for range 2 {
		ev := event(t, sub)
		if ev.Kind != pg.MemberLeft || ev.Scope != "s" {
			t.Fatalf("event %+v", ev)
		}
		got[ev.Group] = ev.PIDs
	}
	if !samePIDs(got["one"], []gotp.PID{b.pid}) || !samePIDs(got["two"], []gotp.PID{b.pid}) {
		t.Fatalf("left events %v", got)
	}
	sub.Close()
	_, snap, err = ga.Events()
	must(t, err)
	if len(snap) != 2 || !samePIDs(snap["one"], []gotp.PID{a.pid}) || !samePIDs(snap["three"], []gotp.PID{a.pid}) {
		t.Fatalf("second snapshot %v", snap)
	}
}

// TestMultiMonitor ports pg_SUITE's multi_monitor: one process monitors
// two groups and the scope, joins both groups, gets four events; when it
// exits the scope holds no subscription.
func TestMultiMonitor(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	m := spawn(t, n)
	g := m.open(t, s)
	one, _, err := g.Monitor("one")
	must(t, err)
	two, _, err := g.Monitor("two")
	must(t, err)
	all, _, err := g.Events()
	must(t, err)
	must(t, g.Join("one"))
	must(t, g.Join("two"))
	wantEvent(t, one, pg.MemberJoined, "one", m.pid)
	wantEvent(t, all, pg.MemberJoined, "one", m.pid)
	wantEvent(t, two, pg.MemberJoined, "two", m.pid)
	wantEvent(t, all, pg.MemberJoined, "two", m.pid)
	noEvent(t, one)
	noEvent(t, two)
	m.kill(t)
	if in := s.Info(); in.Subscriptions != 0 || in.Processes != 0 || in.Groups != 0 {
		t.Fatalf("Info after exit = %+v, want empty", in)
	}
}

// TestMonitorSelf ports pg_SUITE's monitor_self (GH-7625): a process that
// monitors a group and joins it, then exits, leaves the scope working.
func TestMonitorSelf(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	m := spawn(t, n)
	g := m.open(t, s)
	_, _, err := g.Monitor("grp")
	must(t, err)
	must(t, g.Join("grp"))
	m.kill(t)
	obs := spawn(t, n).open(t, s)
	wantMembers(t, obs, "grp")
	must(t, obs.Join("grp"))
	wantMembers(t, obs, "grp", obs.PID())
}

// TestMonitorOutlivesGroup checks that a monitor of a group stays across
// the group's disappearance and return.
func TestMonitorOutlivesGroup(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	m := spawn(t, n)
	g := m.open(t, s)
	sub, _, err := g.Monitor("g")
	must(t, err)
	for range 3 {
		must(t, g.Join("g"))
		must(t, g.Leave("g"))
		wantGroups(t, g)
		wantEvent(t, sub, pg.MemberJoined, "g", m.pid)
		wantEvent(t, sub, pg.MemberLeft, "g", m.pid)
	}
}

// TestOverflow checks that a full subscription drops further events and
// counts them, without affecting other subscriptions, and that it delivers
// again once drained.
func TestOverflow(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	m := spawn(t, n)
	g := m.open(t, s)
	slow, _, err := g.Monitor("g")
	must(t, err)
	fast, _, err := g.Monitor("g")
	must(t, err)
	const total = 100
	fastGot := 0
	for range total {
		must(t, g.Join("g"))
		event(t, fast)
		fastGot++
	}
	if pg.DefaultBuffer != 64 { // the figure
		t.Fatalf("DefaultBuffer = %d, want 64", pg.DefaultBuffer)
	}
	if cap(slow.C()) != pg.DefaultBuffer || len(slow.C()) != pg.DefaultBuffer {
		t.Fatalf("slow channel cap %d len %d, want both %d", cap(slow.C()), len(slow.C()), pg.DefaultBuffer)
	}
	if got := slow.Dropped(); got != total-pg.DefaultBuffer {
		t.Fatalf("Dropped = %d, want %d", got, total-pg.DefaultBuffer)
	}
	if fast.Dropped() != 0 || fastGot != total {
		t.Fatalf("fast subscription dropped %d, got %d", fast.Dropped(), fastGot)
	}
	// The queued events are the first 64, in order.
	for range pg.DefaultBuffer {
		wantEvent(t, slow, pg.MemberJoined, "g", m.pid)
	}
	must(t, g.Leave("g"))
	wantEvent(t, slow, pg.MemberLeft, "g", m.pid)
	if got := slow.Dropped(); got != total-pg.DefaultBuffer {
		t.Fatalf("Dropped grew to %d", got)
	}
}

// TestBufferOption checks Options.Buffer.
func TestBufferOption(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{Buffer: 2})
	g := spawn(t, n).open(t, s)
	sub, _, err := g.Events()
	must(t, err)
	must(t, g.Join("a", "b", "c", "d"))
	if len(sub.C()) != 2 || sub.Dropped() != 2 {
		t.Fatalf("len %d dropped %d, want 2 and 2", len(sub.C()), sub.Dropped())
	}
}

// TestClose checks that Close discards what is queued and that nothing
// arrives afterwards; it is idempotent.
func TestClose(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	g := spawn(t, n).open(t, s)
	sub, _, err := g.Monitor("g")
	must(t, err)
	must(t, g.Join("g", "g", "g"))
	sub.Close()
	sub.Close()
	sub.CloseFlush()
	closed(t, sub)
	must(t, g.Join("g"))
	closed(t, sub)
	if in := s.Info(); in.Subscriptions != 0 {
		t.Fatalf("Info.Subscriptions = %d", in.Subscriptions)
	}
	g.Release() // closing the instance after its subscription is fine
}

// TestCloseFlush checks that CloseFlush keeps the queued events, in
// order, then reports the channel closed, and that nothing is added after
// it.
func TestCloseFlush(t *testing.T) {
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	m := spawn(t, n)
	g := m.open(t, s)
	sub, _, err := g.Monitor("g")
	must(t, err)
	must(t, g.Join("g"))
	must(t, g.Join("g"))
	must(t, g.Leave("g"))
	sub.CloseFlush()
	must(t, g.Join("g"))
	wantEvent(t, sub, pg.MemberJoined, "g", m.pid)
	wantEvent(t, sub, pg.MemberJoined, "g", m.pid)
	wantEvent(t, sub, pg.MemberLeft, "g", m.pid)
	closed(t, sub)
	sub.Close() // idempotent after a flush close
}

// TestSnapshotAtomicity checks under concurrency that a monitor's snapshot
// and its subscription are atomic: while processes join and leave from
// several goroutines, monitors start at random moments, and each one's
// snapshot plus its events must rebuild the final membership exactly,
// never seeing a leave of a member it does not know. The number of changes
// a round is kept under the buffer so that nothing is dropped. PG_STRESS=1
// runs many more rounds.
func TestSnapshotAtomicity(t *testing.T) {
	rounds := 1000
	if os.Getenv("PG_STRESS") != "" {
		rounds = 5000
	}
	const (
		churners = 4
		opsEach  = 12 // churners*opsEach < DefaultBuffer: no drops
		watchers = 4
	)
	n := newNode(t, "a")
	s := newScope(t, n, "s", pg.Options{})
	var cinst, winst []*pg.Instance
	for range churners {
		cinst = append(cinst, spawn(t, n).open(t, s))
	}
	for range watchers {
		winst = append(winst, spawn(t, n).open(t, s))
	}
	obs := spawn(t, n).open(t, s)

	for r := range rounds {
		group := fmt.Sprintf("g%d", r)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for c, inst := range cinst {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(c)))
			wg.Go(func() {
				<-start
				joined := 0
				for range opsEach {
					if joined > 0 && rng.IntN(2) == 0 {
						must(t, inst.Leave(group))
						joined--
					} else {
						must(t, inst.Join(group))
						joined++
					}
					if rng.IntN(3) == 0 {
						runtime.Gosched()
					}
				}
			})
		}
		type watch struct {
			sub  *pg.Subscription
			snap []gotp.PID
		}
		watches := make([]watch, watchers)
		evWatches := make([]struct {
			sub  *pg.Subscription
			snap map[string][]gotp.PID
		}, watchers)
		for w, inst := range winst {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(100+w)))
			wg.Go(func() {
				<-start
				for range rng.IntN(20) {
					runtime.Gosched()
				}
				if w%2 == 0 {
					sub, snap, err := inst.Monitor(group)
					must(t, err)
					watches[w] = watch{sub, snap}
				} else {
					sub, snap, err := inst.Events()
					must(t, err)
					evWatches[w].sub, evWatches[w].snap = sub, snap
				}
			})
		}
		close(start)
		wg.Wait()

		final, err := obs.Members(group)
		must(t, err)
		check := func(w int, sub *pg.Subscription, snap []gotp.PID) {
			t.Helper()
			count := map[gotp.PID]int{}
			for _, pid := range snap {
				count[pid]++
			}
			for len(sub.C()) > 0 {
				ev := <-sub.C()
				if ev.Group != group {
					continue
				}
				for _, pid := range ev.PIDs {
					switch ev.Kind {
					case pg.MemberJoined:
						count[pid]++
					case pg.MemberLeft:
						if count[pid]--; count[pid] < 0 {
							t.Fatalf("round %d watcher %d: leave of %v it never saw join (snapshot %v)", r, w, pid, snap)
						}
					}
				}
			}
			if sub.Dropped() != 0 {
				t.Fatalf("round %d watcher %d dropped %d events", r, w, sub.Dropped())
			}
			var rebuilt []gotp.PID
			for pid, k := range count {
				for range k {
					rebuilt = append(rebuilt, pid)
				}
			}
			if !samePIDs(rebuilt, final) {
				t.Fatalf("round %d watcher %d: snapshot+events %v, members %v", r, w, sorted(rebuilt), sorted(final))
			}
			sub.Close()
		}
		for w := range watchers {
			if w%2 == 0 {
				check(w, watches[w].sub, watches[w].snap)
			} else {
				check(w, evWatches[w].sub, evWatches[w].snap[group])
			}
		}
		// Leave the group empty for the next round.
		for _, inst := range cinst {
			for {
				if err := inst.Leave(group); err != nil {
					break
				}
			}
		}
	}
}
