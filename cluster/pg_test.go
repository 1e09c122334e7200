package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
)

type scopeOn struct {
	m     member
	scope *pg.Scope
}

// replicatedScopes starts scope id on every node and replicates it.
func replicatedScopes(t testing.TB, ms []member, id string) []scopeOn {
	t.Helper()
	var out []scopeOn
	for _, m := range ms {
		s, err := pg.Start(context.Background(), m.n, id, pg.Options{})
		must(t, err)
		must(t, m.c.Replicate(s))
		out = append(out, scopeOn{m: m, scope: s})
	}
	return out
}

// joinAs starts k processes on the scope's node that each join group, and
// returns them. They stay until killed (or the node stops).
func joinAs(t testing.TB, s scopeOn, group string, k int) []gotp.PID {
	t.Helper()
	var pids []gotp.PID
	for range k {
		joined := make(chan error, 1)
		pid, err := s.m.n.Spawn(func(p *gotp.Process) error {
			inst, err := s.scope.Open(p)
			if err == nil {
				err = inst.Join(group)
			}
			joined <- err
			if err != nil {
				return err
			}
			_, err = p.Receive(context.Background())
			return err
		})
		must(t, err)
		must(t, <-joined)
		pids = append(pids, pid)
	}
	return pids
}

// members returns the distinct members of group as the scope sees them
// (every node), sorted.
func members(s *pg.Scope, group string) []gotp.PID {
	var out []gotp.PID
	for _, g := range s.Groups() {
		if g.Name == group {
			for _, ps := range g.Members {
				out = append(out, ps...)
			}
		}
	}
	slices.SortFunc(out, func(a, b gotp.PID) int {
		if a.String() < b.String() {
			return -1
		}
		if a.String() > b.String() {
			return 1
		}
		return 0
	})
	return out
}

func countMembers(s *pg.Scope, group string) int { return len(members(s, group)) }

// waitConverged waits until every scope sees the same want members of
// group.
func waitConverged(t testing.TB, scopes []scopeOn, group string, want int) {
	t.Helper()
	waitUntil(t, 15*time.Second, "pg convergence of "+group, func() bool {
		first := members(scopes[0].scope, group)
		if len(first) != want {
			return false
		}
		for _, s := range scopes[1:] {
			if !slices.Equal(first, members(s.scope, group)) {
				return false
			}
		}
		return true
	})
}

func TestPGConvergence(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	// A scope that has members before it is replicated: the full sync at
	// Replicate carries them.
	early, err := pg.Start(context.Background(), ms[1].n, "s", pg.Options{})
	must(t, err)
	pre := joinAs(t, scopeOn{m: ms[1], scope: early}, "g", 2)
	var scopes []scopeOn
	for i, m := range ms {
		s := early
		if i != 1 {
			s, err = pg.Start(context.Background(), m.n, "s", pg.Options{})
			must(t, err)
		}
		must(t, m.c.Replicate(s))
		scopes = append(scopes, scopeOn{m: m, scope: s})
	}
	waitConverged(t, scopes, "g", 2)

	// Joins everywhere.
	onA := joinAs(t, scopes[0], "g", 3)
	joinAs(t, scopes[2], "g", 1)
	joinAs(t, scopes[2], "h", 2)
	waitConverged(t, scopes, "g", 6)
	waitConverged(t, scopes, "h", 2)

	// Remote members show in Monitor and Events; the local variants do not.
	var inst *pg.Instance
	obs, obsCh := inbox(t, ms[2].n)
	_ = obsCh
	as(t, ms[2].n, obs, func(p *gotp.Process) { inst, err = scopes[2].scope.Open(p) })
	must(t, err)
	sub, snap, err := inst.Monitor("g")
	must(t, err)
	defer sub.Close()
	if len(snap) != 6 {
		t.Fatalf("monitor snapshot %v", snap)
	}
	local, err := inst.LocalMembers("g")
	must(t, err)
	if len(local) != 1 {
		t.Fatalf("local members %v", local)
	}

	// Leaves (by exit) propagate, with an event on the remote monitor.
	ms[0].n.Exit(onA[0], gotp.ErrKill)
	select {
	case ev := <-sub.C():
		if ev.Kind != pg.MemberLeft || len(ev.PIDs) != 1 || ev.PIDs[0] != onA[0] {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no left event on c for a's member")
	}
	waitConverged(t, scopes, "g", 5)

	// Broadcast reaches every member once, with one NATS message per node.
	recvd := make(chan gotp.PID, 16)
	var targets []gotp.PID
	for _, s := range scopes {
		for range 2 {
			joined := make(chan struct{})
			pid, err := s.m.n.Spawn(func(p *gotp.Process) error {
				in, err := s.scope.Open(p)
				if err != nil {
					return err
				}
				must(t, in.Join("bc"))
				close(joined)
				msg, err := p.Receive(context.Background())
				if err != nil {
					return err
				}
				if m, ok := msg.(pg.Message); ok && m.Topic == "news" && m.Payload == (Ping{N: 5}) {
					recvd <- p.Self()
				}
				_, err = p.Receive(context.Background())
				return err
			})
			must(t, err)
			<-joined
			targets = append(targets, pid)
		}
	}
	waitConverged(t, scopes, "bc", 6)
	before := ms[0].c.Stats().MessagesOut
	as(t, ms[0].n, obsOn(t, ms[0]), func(p *gotp.Process) {
		in, err := scopes[0].scope.Open(p)
		must(t, err)
		must(t, in.Broadcast("bc", "news", Ping{N: 5}))
	})
	got := map[gotp.PID]bool{}
	for range 6 {
		select {
		case pid := <-recvd:
			got[pid] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("broadcast reached %d of 6", len(got))
		}
	}
	if sent := ms[0].c.Stats().MessagesOut - before; sent != 2 {
		t.Fatalf("broadcast sent %d messages to other nodes, want 2 (one per node)", sent)
	}

	// A node that stops: its members go everywhere.
	stopNode(t, ms[1].n)
	waitConverged(t, []scopeOn{scopes[0], scopes[2]}, "g", 3)
	for _, pid := range pre {
		if slices.Contains(members(scopes[0].scope, "g"), pid) {
			t.Fatalf("member %v of a stopped node still listed", pid)
		}
	}
}

func obsOn(t testing.TB, m member) gotp.PID {
	pid, _ := inbox(t, m.n)
	return pid
}
