package pg_test

import (
	"slices"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

func TestScopeGroups(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "inspect", pg.Options{})
	joined := make(chan gotp.PID, 2)
	for _, groups := range [][]string{{"x", "y"}, {"x", "x"}} {
		n.Spawn(func(p *gotp.Process) error {
			inst, err := s.Open(p)
			if err != nil {
				return err
			}
			if err := inst.Join(groups...); err != nil {
				return err
			}
			joined <- p.Self()
			<-p.Context().Done()
			return nil
		})
	}
	p1, p2 := <-joined, <-joined
	gs := s.Groups()
	if len(gs) != 2 || gs[0].Name != "x" || gs[1].Name != "y" {
		t.Fatalf("Groups = %+v, want x and y", gs)
	}
	x := gs[0].Members["a"]
	slices.SortFunc(x, func(a, b gotp.PID) int { return int(a.ID()) - int(b.ID()) })
	want := []gotp.PID{p1, p2}
	slices.SortFunc(want, func(a, b gotp.PID) int { return int(a.ID()) - int(b.ID()) })
	if !slices.Equal(x, want) || gs[0].Joins != 3 {
		t.Fatalf("x = %v with %d joins, want %v with 3", x, gs[0].Joins, want)
	}
}
