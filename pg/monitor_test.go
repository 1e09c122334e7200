package pg_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

// TestMonitor ports the single-node part of pg_SUITE's monitor case: a
// group monitor sees local joins and leaves, a second monitor starts with
// the current members, and a closed monitor sees nothing more.
func TestMonitor(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	self := gotptest.NewSink(t, n)
	g := open(t, self, s)

	sub, members, err := g.Monitor("grp")
	gotptest.Must(t, err)
	if members == nil || len(members) != 0 {
		t.Fatalf("initial snapshot %v, want empty", members)
	}
	if sub.Group() != "grp" {
		t.Fatalf("Group() = %q", sub.Group())
	}
	gotptest.Must(t, g.Join("grp"))
	wantEvent(t, sub, pg.MemberJoined, "grp", self.PID())

	other := gotptest.NewSink(t, n)
	og := open(t, other, s)
	sub2, members, err := og.Monitor("grp")
	gotptest.Must(t, err)
	if !samePIDs(members, []gotp.PID{self.PID()}) {
		t.Fatalf("second snapshot %v, want [self]", members)
	}

	third := gotptest.NewSink(t, n)
	tg := open(t, third, s)
	gotptest.Must(t, tg.Join("grp", "grp"))
	for _, sb := range []*pg.Subscription{sub, sub2} {
		wantEvent(t, sb, pg.MemberJoined, "grp", third.PID())
		wantEvent(t, sb, pg.MemberJoined, "grp", third.PID())
	}
	gotptest.Must(t, g.Leave("grp"))
	third.Kill(t)
	for _, sb := range []*pg.Subscription{sub, sub2} {
		wantEvent(t, sb, pg.MemberLeft, "grp", self.PID())
		wantEvent(t, sb, pg.MemberLeft, "grp", third.PID(), third.PID())
	}
	// Events of other groups do not reach a group monitor.
	gotptest.Must(t, g.Join("elsewhere"))
	noEvent(t, sub)

	sub.Close()
	closed(t, sub)
	gotptest.Must(t, g.Join("grp"))
	wantEvent(t, sub2, pg.MemberJoined, "grp", self.PID())
	if in := s.Info(); in.Subscriptions != 1 {
		t.Fatalf("Info.Subscriptions = %d, want 1", in.Subscriptions)
	}
}

// TestMonitorScope ports pg_SUITE's monitor_scope and
// monitor_nonempty_scope on one node: Events returns every group with its
// members, then the events of every group.
func TestMonitorScope(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
	ga, gb := open(t, a, s), open(t, b, s)
	gotptest.Must(t, ga.Join("one"))
	gotptest.Must(t, gb.Join("one", "two", "two"))

	sub, snap, err := ga.Events()
	gotptest.Must(t, err)
	if sub.Group() != "" {
		t.Fatalf("Group() = %q, want \"\"", sub.Group())
	}
	if len(snap) != 2 || !samePIDs(snap["one"], []gotp.PID{a.PID(), b.PID()}) || !samePIDs(snap["two"], []gotp.PID{b.PID(), b.PID()}) {
		t.Fatalf("snapshot %v", snap)
	}
	gotptest.Must(t, gb.Leave("two"))
	wantEvent(t, sub, pg.MemberLeft, "two", b.PID())
	gotptest.Must(t, ga.Join("three"))
	wantEvent(t, sub, pg.MemberJoined, "three", a.PID())
	b.Kill(t)
	got := map[string][]gotp.PID{}
	for range 2 {
		ev := event(t, sub)
		if ev.Kind != pg.MemberLeft || ev.Scope != "s" {
			t.Fatalf("event %+v", ev)
		}
		got[ev.Group] = ev.PIDs
	}
	if !samePIDs(got["one"], []gotp.PID{b.PID()}) || !samePIDs(got["two"], []gotp.PID{b.PID()}) {
		t.Fatalf("left events %v", got)
	}
	sub.Close()
	_, snap, err = ga.Events()
	gotptest.Must(t, err)
	if len(snap) != 2 || !samePIDs(snap["one"], []gotp.PID{a.PID()}) || !samePIDs(snap["three"], []gotp.PID{a.PID()}) {
		t.Fatalf("second snapshot %v", snap)
	}
}

// TestMultiMonitor ports pg_SUITE's multi_monitor: one process monitors
// two groups and the scope, joins both groups, gets four events; when it
// exits the scope holds no subscription.
func TestMultiMonitor(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	one, _, err := g.Monitor("one")
	gotptest.Must(t, err)
	two, _, err := g.Monitor("two")
	gotptest.Must(t, err)
	all, _, err := g.Events()
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("one"))
	gotptest.Must(t, g.Join("two"))
	wantEvent(t, one, pg.MemberJoined, "one", m.PID())
	wantEvent(t, all, pg.MemberJoined, "one", m.PID())
	wantEvent(t, two, pg.MemberJoined, "two", m.PID())
	wantEvent(t, all, pg.MemberJoined, "two", m.PID())
	noEvent(t, one)
	noEvent(t, two)
	m.Kill(t)
	if in := s.Info(); in.Subscriptions != 0 || in.Processes != 0 || in.Groups != 0 {
		t.Fatalf("Info after exit = %+v, want empty", in)
	}
}

// TestMonitorSelf ports pg_SUITE's monitor_self (GH-7625): a process that
// monitors a group and joins it, then exits, leaves the scope working.
func TestMonitorSelf(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	_, _, err := g.Monitor("grp")
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("grp"))
	m.Kill(t)
	obs := open(t, gotptest.NewSink(t, n), s)
	wantMembers(t, obs, "grp")
	gotptest.Must(t, obs.Join("grp"))
	wantMembers(t, obs, "grp", obs.PID())
}

// TestMonitorOutlivesGroup checks that a monitor of a group stays across
// the group's disappearance and return.
func TestMonitorOutlivesGroup(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	for range 3 {
		gotptest.Must(t, g.Join("g"))
		gotptest.Must(t, g.Leave("g"))
		wantGroups(t, g)
		wantEvent(t, sub, pg.MemberJoined, "g", m.PID())
		wantEvent(t, sub, pg.MemberLeft, "g", m.PID())
	}
}

// TestOverflow checks that a full subscription drops further events and
// counts them, without affecting other subscriptions, and that it delivers
// again once drained.
func TestOverflow(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	slow, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	fast, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	const total = 100
	fastGot := 0
	for range total {
		gotptest.Must(t, g.Join("g"))
		event(t, fast)
		fastGot++
	}
	if pg.DefaultBuffer != 64 { // Wippy's figure
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
		wantEvent(t, slow, pg.MemberJoined, "g", m.PID())
	}
	gotptest.Must(t, g.Leave("g"))
	wantEvent(t, slow, pg.MemberLeft, "g", m.PID())
	if got := slow.Dropped(); got != total-pg.DefaultBuffer {
		t.Fatalf("Dropped grew to %d", got)
	}
}

// TestBufferOption checks Options.Buffer.
func TestBufferOption(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{Buffer: 2})
	g := open(t, gotptest.NewSink(t, n), s)
	sub, _, err := g.Events()
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("a", "b", "c", "d"))
	if len(sub.C()) != 2 || sub.Dropped() != 2 {
		t.Fatalf("len %d dropped %d, want 2 and 2", len(sub.C()), sub.Dropped())
	}
}

// TestClose checks that Close discards what is queued and that nothing
// arrives afterwards; it is idempotent.
func TestClose(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	g := open(t, gotptest.NewSink(t, n), s)
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("g", "g", "g"))
	sub.Close()
	sub.Close()
	sub.CloseFlush()
	closed(t, sub)
	gotptest.Must(t, g.Join("g"))
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
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	sub, _, err := g.Monitor("g")
	gotptest.Must(t, err)
	gotptest.Must(t, g.Join("g"))
	gotptest.Must(t, g.Join("g"))
	gotptest.Must(t, g.Leave("g"))
	sub.CloseFlush()
	gotptest.Must(t, g.Join("g"))
	wantEvent(t, sub, pg.MemberJoined, "g", m.PID())
	wantEvent(t, sub, pg.MemberJoined, "g", m.PID())
	wantEvent(t, sub, pg.MemberLeft, "g", m.PID())
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
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{})
	var cinst, winst []*pg.Instance
	for range churners {
		cinst = append(cinst, open(t, gotptest.NewSink(t, n), s))
	}
	for range watchers {
		winst = append(winst, open(t, gotptest.NewSink(t, n), s))
	}
	obs := open(t, gotptest.NewSink(t, n), s)

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
						gotptest.Must(t, inst.Leave(group))
						joined--
					} else {
						gotptest.Must(t, inst.Join(group))
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
					gotptest.Must(t, err)
					watches[w] = watch{sub, snap}
				} else {
					sub, snap, err := inst.Events()
					gotptest.Must(t, err)
					evWatches[w].sub, evWatches[w].snap = sub, snap
				}
			})
		}
		close(start)
		wg.Wait()

		final, err := obs.Members(group)
		gotptest.Must(t, err)
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
