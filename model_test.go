package gotp_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"pgregory.net/rapid"
)

// The property test drives a few processes with random links, unlinks,
// trap settings, exit signals and exits, and compares who is alive, with
// which reason each died, and which Exit messages each trapping process
// received, against a model of Erlang's rules.

const modelProcs = 4

// modelCmd runs f on the process and closes done; if f says stop, the
// process then ends with reason.
type modelCmd struct {
	f    func(p *gotp.Process) (stop bool, reason error)
	done chan struct{}
}

type modelSync struct{ reply chan []gotp.Exit }

func modelProcess(p *gotp.Process) error {
	var exits []gotp.Exit
	for {
		m, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case gotp.Exit:
			exits = append(exits, m)
		case modelSync:
			m.reply <- exits
			exits = nil
		case modelCmd:
			stop, reason := m.f(p)
			close(m.done)
			if stop {
				return reason
			}
		}
	}
}

type linkModel struct {
	pids    [modelProcs]gotp.PID
	alive   [modelProcs]bool
	trap    [modelProcs]bool
	reason  [modelProcs]error
	checked [modelProcs]bool
	links   map[[2]int]bool
	exits   [modelProcs][]gotp.Exit
}

func (m *linkModel) key(i, j int) [2]int { return [2]int{min(i, j), max(i, j)} }

func (m *linkModel) die(i int, reason error) {
	if !m.alive[i] {
		return
	}
	m.alive[i], m.reason[i] = false, reason
	for j := range modelProcs {
		if j == i || !m.links[m.key(i, j)] {
			continue
		}
		delete(m.links, m.key(i, j))
		m.signal(j, m.pids[i], reason)
	}
}

// signal applies an exit signal from from (a link's death or an Exit).
func (m *linkModel) signal(j int, from gotp.PID, reason error) {
	if !m.alive[j] {
		return
	}
	switch {
	case reason == gotp.ErrKill:
		m.die(j, gotp.ErrKilled)
	case m.trap[j]:
		m.exits[j] = append(m.exits[j], gotp.Exit{From: from, Reason: reason})
	case reason == nil && from != m.pids[j]:
		// a normal exit signal is ignored by a process that does not trap
	default:
		m.die(j, reason)
	}
}

func TestLinksAgainstModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := gotp.NewNode(gotp.Options{})
		defer func() {
			for _, pid := range n.Processes() {
				n.Exit(pid, gotp.ErrKill)
			}
			if err := n.Stop(context.Background()); err != nil {
				rt.Fatal(err)
			}
		}()
		m := &linkModel{links: make(map[[2]int]bool)}
		var downs [modelProcs]<-chan error
		for i := range modelProcs {
			trap := rapid.Bool().Draw(rt, fmt.Sprintf("trap%d", i))
			pid, err := n.Spawn(modelProcess, gotp.TrapExit(trap))
			if err != nil {
				rt.Fatal(err)
			}
			m.pids[i], m.alive[i], m.trap[i] = pid, true, trap
			downs[i] = gotptest.Watch(t, n, pid)
		}
		reasons := []error{nil, errBoom, gotp.ErrShutdown, gotp.ErrKill}
		live := func(rt *rapid.T, label string) int {
			var idx []int
			for i, a := range m.alive {
				if a {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				rt.Skip("everyone is dead")
			}
			return rapid.SampledFrom(idx).Draw(rt, label)
		}
		do := func(i int, f func(p *gotp.Process) (bool, error)) {
			done := make(chan struct{})
			n.Send(m.pids[i], modelCmd{f: f, done: done})
			gotptest.Recv(t, done)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"link": func(rt *rapid.T) {
				i, j := live(rt, "i"), rapid.IntRange(0, modelProcs-1).Draw(rt, "j")
				var err error
				do(i, func(p *gotp.Process) (bool, error) { err = p.Link(m.pids[j]); return false, nil })
				var want error
				switch {
				case i == j:
				case !m.alive[j]:
					want = gotp.ErrNoProc
				default:
					m.links[m.key(i, j)] = true
				}
				if !errors.Is(err, want) || (want == nil && err != nil) {
					rt.Fatalf("Link(%d, %d) = %v, want %v", i, j, err, want)
				}
			},
			"unlink": func(rt *rapid.T) {
				i, j := live(rt, "i"), rapid.IntRange(0, modelProcs-1).Draw(rt, "j")
				do(i, func(p *gotp.Process) (bool, error) { p.Unlink(m.pids[j]); return false, nil })
				if i != j {
					delete(m.links, m.key(i, j))
				}
			},
			"trap": func(rt *rapid.T) {
				i, on := live(rt, "i"), rapid.Bool().Draw(rt, "on")
				do(i, func(p *gotp.Process) (bool, error) { p.TrapExit(on); return false, nil })
				m.trap[i] = on
			},
			"nodeExit": func(rt *rapid.T) {
				i := rapid.IntRange(0, modelProcs-1).Draw(rt, "i")
				r := rapid.SampledFrom(reasons).Draw(rt, "reason")
				n.Exit(m.pids[i], r)
				m.signal(i, gotp.PID{}, r)
			},
			"processExit": func(rt *rapid.T) {
				i, j := live(rt, "from"), rapid.IntRange(0, modelProcs-1).Draw(rt, "to")
				r := rapid.SampledFrom(reasons).Draw(rt, "reason")
				do(i, func(p *gotp.Process) (bool, error) { p.Exit(m.pids[j], r); return false, nil })
				m.signal(j, m.pids[i], r)
			},
			"return": func(rt *rapid.T) {
				i := live(rt, "i")
				r := rapid.SampledFrom(reasons[:3]).Draw(rt, "reason")
				do(i, func(p *gotp.Process) (bool, error) { return true, r })
				// Once its Down arrives, its exit and every exit it caused are done.
				if got := gotptest.Recv(t, downs[i]); got != r {
					rt.Fatalf("process %d returned %v but died of %v", i, r, got)
				}
				m.checked[i] = true
				m.die(i, r)
			},
			"": func(rt *rapid.T) {
				for i := range modelProcs {
					if got := n.IsAlive(m.pids[i]); got != m.alive[i] {
						rt.Fatalf("process %d alive = %v, model says %v", i, got, m.alive[i])
					}
					if !m.alive[i] {
						if !m.checked[i] {
							m.checked[i] = true
							if r := gotptest.Recv(t, downs[i]); r != m.reason[i] {
								rt.Fatalf("process %d died of %v, model says %v", i, r, m.reason[i])
							}
						}
						continue
					}
					reply := make(chan []gotp.Exit, 1)
					n.Send(m.pids[i], modelSync{reply})
					got, want := gotptest.Recv(t, reply), m.exits[i]
					m.exits[i] = nil
					if exitSet(got) != exitSet(want) {
						rt.Fatalf("process %d received %v, model says %v", i, got, want)
					}
				}
				for k := range m.links {
					if !m.alive[k[0]] || !m.alive[k[1]] {
						rt.Fatalf("model keeps a link %v to a dead process", k)
					}
				}
				for i := range modelProcs {
					if !m.alive[i] {
						continue
					}
					in, _ := n.ProcessInfo(m.pids[i])
					var want []gotp.PID
					for j := range modelProcs {
						if j != i && m.links[m.key(i, j)] {
							want = append(want, m.pids[j])
						}
					}
					if !slices.Equal(in.Links, want) {
						rt.Fatalf("process %d links %v, model says %v", i, in.Links, want)
					}
				}
			},
		})
	})
}

// exitSet renders Exit messages as a sorted multiset: the order of the
// signals one exit sends to several linked processes is unspecified.
func exitSet(es []gotp.Exit) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = fmt.Sprintf("%v:%v", e.From, e.Reason)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}
