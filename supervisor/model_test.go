package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// modelChild is what the model knows of a child.
type modelChild struct {
	id      string
	restart supervisor.Restart
	running bool
}

// supModel is OTP's static supervisor written as plain data: what
// WhichChildren must say after each management call or child exit.
type supModel struct {
	strategy supervisor.Strategy
	kids     []modelChild
}

func (m *supModel) find(id string) int {
	return slices.IndexFunc(m.kids, func(c modelChild) bool { return c.id == id })
}

// exit applies the exit of the running child i; it returns the ids whose
// process must have been replaced.
func (m *supModel) exit(i int, abnormal bool) []string {
	c := m.kids[i]
	switch {
	case c.restart == supervisor.Temporary:
		m.kids = slices.Delete(m.kids, i, i+1)
		return nil
	case c.restart == supervisor.Transient && !abnormal:
		m.kids[i].running = false
		return nil
	}
	from, to := i, i+1
	switch m.strategy {
	case supervisor.OneForAll:
		from, to = 0, len(m.kids)
	case supervisor.RestForOne:
		to = len(m.kids)
	}
	var replaced []string
	var keep []modelChild
	for j, k := range m.kids {
		if j >= from && j < to {
			if k.restart == supervisor.Temporary && j != i {
				continue // stopped with the group, not restarted
			}
			k.running = true
			replaced = append(replaced, k.id)
		}
		keep = append(keep, k)
	}
	m.kids = keep
	return replaced
}

// TestSupervisorMatchesModel drives a static supervisor with random
// management calls and child exits, and compares WhichChildren and
// CountChildren with the model after every step; children the model does
// not restart must keep their process.
func TestSupervisorMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := gotp.NewNode(gotp.Options{Name: "m", Logger: discard})
		defer n.Stop(context.Background())
		ctx := context.Background()
		m := &supModel{strategy: supervisor.Strategy(rapid.IntRange(0, 2).Draw(rt, "strategy"))}
		sup, err := supervisor.Start(ctx, n, supervisor.Spec{Strategy: m.strategy, Intensity: 1 << 20})
		if err != nil {
			rt.Fatal(err)
		}
		idGen := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"})
		pids := map[string]gotp.PID{}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			id := idGen.Draw(rt, "id")
			i := m.find(id)
			var replaced []string
			switch op := rapid.IntRange(0, 4).Draw(rt, "op"); op {
			case 0: // StartChild
				spec := supervisor.Func(id, worker)
				spec.Restart = supervisor.Restart(rapid.IntRange(0, 2).Draw(rt, "restart"))
				_, err := supervisor.StartChild(ctx, n, sup, spec)
				switch {
				case i >= 0 && m.kids[i].running:
					if !errors.Is(err, supervisor.ErrAlreadyStarted) {
						rt.Fatalf("step %d: StartChild of running %s: %v", step, id, err)
					}
				case i >= 0:
					if !errors.Is(err, supervisor.ErrAlreadyPresent) {
						rt.Fatalf("step %d: StartChild of present %s: %v", step, id, err)
					}
				default:
					if err != nil {
						rt.Fatalf("step %d: StartChild %s: %v", step, id, err)
					}
					m.kids = append(m.kids, modelChild{id: id, restart: spec.Restart, running: true})
					replaced = []string{id}
				}
			case 1: // TerminateChild
				err := supervisor.TerminateChild(ctx, n, sup, id)
				switch {
				case i < 0:
					if !errors.Is(err, supervisor.ErrNotFound) {
						rt.Fatalf("step %d: TerminateChild of unknown %s: %v", step, id, err)
					}
				case m.kids[i].restart == supervisor.Temporary:
					m.kids = slices.Delete(m.kids, i, i+1)
				default:
					m.kids[i].running = false
				}
			case 2: // RestartChild
				_, err := supervisor.RestartChild(ctx, n, sup, id)
				switch {
				case i < 0:
					if !errors.Is(err, supervisor.ErrNotFound) {
						rt.Fatalf("step %d: RestartChild of unknown %s: %v", step, id, err)
					}
				case m.kids[i].running:
					if !errors.Is(err, supervisor.ErrRunning) {
						rt.Fatalf("step %d: RestartChild of running %s: %v", step, id, err)
					}
				default:
					if err != nil {
						rt.Fatalf("step %d: RestartChild %s: %v", step, id, err)
					}
					m.kids[i].running = true
					replaced = []string{id}
				}
			case 3: // DeleteChild
				err := supervisor.DeleteChild(ctx, n, sup, id)
				switch {
				case i < 0:
					if !errors.Is(err, supervisor.ErrNotFound) {
						rt.Fatalf("step %d: DeleteChild of unknown %s: %v", step, id, err)
					}
				case m.kids[i].running:
					if !errors.Is(err, supervisor.ErrRunning) {
						rt.Fatalf("step %d: DeleteChild of running %s: %v", step, id, err)
					}
				default:
					if err != nil {
						rt.Fatalf("step %d: DeleteChild %s: %v", step, id, err)
					}
					m.kids = slices.Delete(m.kids, i, i+1)
				}
			case 4: // the child exits
				if i < 0 || !m.kids[i].running {
					continue
				}
				abnormal := rapid.Bool().Draw(rt, "abnormal")
				pid := pids[id]
				down := gotptest.Watch(rt, n, pid)
				if abnormal {
					n.Exit(pid, gotp.ErrKill)
				} else {
					n.Send(pid, exitWith{nil})
				}
				<-down
				replaced = m.exit(i, abnormal)
			}
			which, err := supervisor.WhichChildren(ctx, n, sup)
			if err != nil {
				rt.Fatal(err)
			}
			if got, want := describe(which), describeModel(m.kids); got != want {
				rt.Fatalf("step %d: which children\n got %s\nwant %s", step, got, want)
			}
			active := 0
			now := map[string]gotp.PID{}
			for _, c := range which {
				if c.State == supervisor.ChildRunning {
					active++
					now[c.ID] = c.PID
					if old, ok := pids[c.ID]; ok && !slices.Contains(replaced, c.ID) && old != c.PID {
						rt.Fatalf("step %d: %s was restarted although the model says not", step, c.ID)
					}
					if slices.Contains(replaced, c.ID) && pids[c.ID] == c.PID {
						rt.Fatalf("step %d: %s kept its process although the model restarts it", step, c.ID)
					}
				}
			}
			pids = now
			k, err := supervisor.CountChildren(ctx, n, sup)
			if err != nil || k.Specs != len(m.kids) || k.Active != active || k.Workers != len(m.kids) {
				rt.Fatalf("step %d: counts %+v, %v", step, k, err)
			}
		}
	})
}

func describe(which []supervisor.ChildInfo) string {
	s := ""
	for _, c := range which {
		s += fmt.Sprintf("%s/%v/%v ", c.ID, c.Restart, c.State == supervisor.ChildRunning)
	}
	return s
}

func describeModel(kids []modelChild) string {
	s := ""
	for _, c := range kids {
		s += fmt.Sprintf("%s/%v/%v ", c.id, c.restart, c.running)
	}
	return s
}
