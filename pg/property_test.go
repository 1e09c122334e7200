package pg_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"pgregory.net/rapid"
)

// TestMembershipModel runs random sequences of joins, leaves (single and
// batch), releases and process exits against a model of counted
// membership, and checks after every step that Members, LocalMembers,
// WhichGroups and WhichLocalGroups agree with the model, that Leave fails
// exactly when the model says the process was in none of the groups, and
// that an Events subscription opened at the start, replayed on its
// snapshot, agrees too.
func TestMembershipModel(t *testing.T) {
	groups := []string{"a", "b", "c"}
	rapid.Check(t, func(rt *rapid.T) {
		n := gotptest.NewNode(rt, gotptest.Name("a"))
		s := newScope(rt, n, "s", pg.Options{})
		obsm := gotptest.NewSink(rt, n)
		obs := open(rt, obsm, s)
		sub, snap, err := obs.Events()
		gotptest.Must(rt, err)
		if len(snap) != 0 {
			rt.Fatalf("initial snapshot %v", snap)
		}

		const procs = 3
		ms := make([]*gotptest.Sink, procs)
		insts := make([]*pg.Instance, procs)
		model := make([]map[string]int, procs) // per process: group → joins
		for i := range procs {
			ms[i] = gotptest.NewSink(rt, n)
			insts[i] = open(rt, ms[i], s)
			model[i] = map[string]int{}
		}
		seen := map[string]map[gotp.PID]int{} // rebuilt from events

		batch := func(rt *rapid.T) []string {
			return rapid.SliceOfN(rapid.SampledFrom(groups), 1, 4).Draw(rt, "groups")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"join": func(rt *rapid.T) {
				i := rapid.IntRange(0, procs-1).Draw(rt, "proc")
				gs := batch(rt)
				gotptest.Must(rt, insts[i].Join(gs...))
				for _, g := range gs {
					model[i][g]++
				}
			},
			"leave": func(rt *rapid.T) {
				i := rapid.IntRange(0, procs-1).Draw(rt, "proc")
				gs := batch(rt)
				left := 0
				for _, g := range gs {
					if model[i][g] > 0 {
						model[i][g]--
						left++
					}
				}
				err := insts[i].Leave(gs...)
				if (left == 0) != errors.Is(err, pg.ErrNotJoined) || (left > 0 && err != nil) {
					rt.Fatalf("Leave(%v) = %v with %d groups left", gs, err, left)
				}
			},
			"release and reopen": func(rt *rapid.T) {
				i := rapid.IntRange(0, procs-1).Draw(rt, "proc")
				insts[i].Release()
				insts[i] = open(rt, ms[i], s)
			},
			"exit": func(rt *rapid.T) {
				i := rapid.IntRange(0, procs-1).Draw(rt, "proc")
				ms[i].Kill(rt)
				ms[i] = gotptest.NewSink(rt, n)
				insts[i] = open(rt, ms[i], s)
				model[i] = map[string]int{}
			},
			"": func(rt *rapid.T) {
				for len(sub.C()) > 0 {
					ev := <-sub.C()
					if seen[ev.Group] == nil {
						seen[ev.Group] = map[gotp.PID]int{}
					}
					for _, pid := range ev.PIDs {
						if ev.Kind == pg.MemberJoined {
							seen[ev.Group][pid]++
						} else if seen[ev.Group][pid]--; seen[ev.Group][pid] < 0 {
							rt.Fatalf("left event for %v in %q without a join", pid, ev.Group)
						}
					}
				}
				if sub.Dropped() != 0 {
					rt.Fatalf("events dropped")
				}
				var nonEmpty []string
				for _, g := range groups {
					var want, fromEvents []gotp.PID
					for i := range procs {
						for range model[i][g] {
							want = append(want, ms[i].PID())
						}
					}
					for pid, k := range seen[g] {
						for range k {
							fromEvents = append(fromEvents, pid)
						}
					}
					if len(want) > 0 {
						nonEmpty = append(nonEmpty, g)
					}
					got, err := obs.Members(g)
					gotptest.Must(rt, err)
					local, err := obs.LocalMembers(g)
					gotptest.Must(rt, err)
					if !samePIDs(got, want) || !samePIDs(local, want) || !samePIDs(fromEvents, want) {
						rt.Fatalf("group %q: Members %v, LocalMembers %v, from events %v; model %v",
							g, sorted(got), sorted(local), sorted(fromEvents), sorted(want))
					}
				}
				which, err := obs.WhichGroups()
				gotptest.Must(rt, err)
				whichLocal, err := obs.WhichLocalGroups()
				gotptest.Must(rt, err)
				if nonEmpty == nil {
					nonEmpty = []string{}
				}
				if !slices.Equal(which, nonEmpty) || !slices.Equal(whichLocal, nonEmpty) {
					rt.Fatalf("WhichGroups %v, WhichLocalGroups %v, model %v", which, whichLocal, nonEmpty)
				}
				if in := s.Info(); in.Processes != procs+1 {
					rt.Fatalf("Info.Processes = %d, want %d", in.Processes, procs+1)
				}
			},
		})
	})
}
