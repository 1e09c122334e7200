package cluster

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"pgregory.net/rapid"
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
		gotptest.Must(t, err)
		gotptest.Must(t, m.c.Replicate(s))
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
		gotptest.Must(t, err)
		gotptest.Must(t, <-joined)
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
	gotptest.EventuallyWithin(t, 15*time.Second, "pg convergence of "+group, func() bool {
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
	gotptest.Must(t, err)
	pre := joinAs(t, scopeOn{m: ms[1], scope: early}, "g", 2)
	var scopes []scopeOn
	for i, m := range ms {
		s := early
		if i != 1 {
			s, err = pg.Start(context.Background(), m.n, "s", pg.Options{})
			gotptest.Must(t, err)
		}
		gotptest.Must(t, m.c.Replicate(s))
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
	obsSink := gotptest.NewSink(t, ms[2].n)
	obsSink.Do(t, func(p *gotp.Process) { inst, err = scopes[2].scope.Open(p) })
	gotptest.Must(t, err)
	sub, snap, err := inst.Monitor("g")
	gotptest.Must(t, err)
	defer sub.Close()
	if len(snap) != 6 {
		t.Fatalf("monitor snapshot %v", snap)
	}
	local, err := inst.LocalMembers("g")
	gotptest.Must(t, err)
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
	localRecvd := make(chan gotp.PID, 16)
	var targets []gotp.PID
	for _, s := range scopes {
		for range 2 {
			joined := make(chan struct{})
			pid, err := s.m.n.Spawn(func(p *gotp.Process) error {
				in, err := s.scope.Open(p)
				if err != nil {
					return err
				}
				gotptest.Must(t, in.Join("bc"))
				close(joined)
				for {
					msg, err := p.Receive(context.Background())
					if err != nil {
						return err
					}
					if m, ok := msg.(pg.Message); ok && m.Topic == "news" && m.Payload == (Ping{N: 5}) {
						recvd <- p.Self()
					} else if ok && m.Topic == "local" {
						localRecvd <- p.Self()
					}
				}
			})
			gotptest.Must(t, err)
			<-joined
			targets = append(targets, pid)
		}
	}
	// A connection of a's that drops and comes back while a's messages
	// are counted (a loaded machine can miss heartbeats) adds its full
	// sync to the count, and may cost members the broadcast: the count is
	// then taken again, at most three times. (CI saw 4 messages once.)
	events, _ := ms[0].c.Subscribe()
	defer events.Close()
	reconnected := func() bool { // whether a node event came since the last call
		seen := false
		for {
			select {
			case <-events.C():
				seen = true
			default:
				return seen
			}
		}
	}
	for attempt := 1; ; attempt++ {
		waitConverged(t, scopes, "bc", 6)
		reconnected()
		before, peersBefore := ms[0].c.Stats().MessagesOut, ms[0].c.Nodes()
		obsOn(t, ms[0]).Do(t, func(p *gotp.Process) {
			in, err := scopes[0].scope.Open(p)
			gotptest.Must(t, err)
			gotptest.Must(t, in.Broadcast("bc", "news", Ping{N: 5}))
		})
		got := map[gotp.PID]int{}
		reached := 0
	receive:
		for range len(targets) {
			select {
			case pid := <-recvd:
				got[pid]++
				reached++
			case <-time.After(5 * time.Second):
				break receive
			}
		}
		sent := ms[0].c.Stats().MessagesOut - before
		once := reached == len(targets)
		for _, pid := range targets {
			once = once && got[pid] == 1
		}
		if once && sent == 2 {
			break
		}
		if reconnected() && attempt < 3 {
			t.Logf("attempt %d: a's connections changed while it broadcast (%d messages sent, reached %v): again", attempt, sent, got)
			for len(recvd) > 0 {
				<-recvd
			}
			continue
		}
		if !once {
			t.Fatalf("broadcast reached %d deliveries for %d members, want each once (all: %v)", reached, len(targets), got)
		}
		t.Fatalf("broadcast sent %d messages to other nodes, want 2 (one per node); a's connections before %+v, after %+v", sent, peersBefore, ms[0].c.Nodes())
	}
	// BroadcastLocal stays on the node.
	for attempt := 1; ; attempt++ {
		reconnected()
		before := ms[0].c.Stats().MessagesOut
		obsOn(t, ms[0]).Do(t, func(p *gotp.Process) {
			in, err := scopes[0].scope.Open(p)
			gotptest.Must(t, err)
			gotptest.Must(t, in.BroadcastLocal("bc", "local", 1))
		})
		sent := ms[0].c.Stats().MessagesOut - before
		if sent == 0 {
			break
		}
		if reconnected() && attempt < 3 {
			t.Logf("attempt %d: a's connections changed while it broadcast locally (%d messages sent): again", attempt, sent)
			gotptest.RecvWithin(t, 5*time.Second, localRecvd)
			gotptest.RecvWithin(t, 5*time.Second, localRecvd)
			continue
		}
		t.Fatalf("BroadcastLocal sent %d messages to other nodes", sent)
	}
	// It reaches the two members on a (the first two targets), once each.
	gotLocal := map[gotp.PID]int{}
	for range 2 {
		gotLocal[gotptest.RecvWithin(t, 5*time.Second, localRecvd)]++
	}
	if gotLocal[targets[0]] != 1 || gotLocal[targets[1]] != 1 {
		t.Fatalf("BroadcastLocal reached %v, want %v and %v once each", gotLocal, targets[0], targets[1])
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

func obsOn(t testing.TB, m member) *gotptest.Sink {
	return gotptest.NewSink(t, m.n)
}

// Property: whatever joins and exits happen on which nodes, once the
// cluster is quiet every node sees, for every group, exactly the union of
// each node's local members (the model), with the same join counts.
func TestPGConvergesProperty(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	scopes := replicatedScopes(t, ms, "prop")
	type live struct {
		node int
		pid  gotp.PID
	}
	var procs []live
	groups := []string{"g0", "g1", "g2"}
	rapid.Check(t, func(rt *rapid.T) {
		for range rapid.IntRange(1, 12).Draw(rt, "ops") {
			if len(procs) > 0 && rapid.Bool().Draw(rt, "kill") {
				i := rapid.IntRange(0, len(procs)-1).Draw(rt, "victim")
				ms[procs[i].node].n.Exit(procs[i].pid, gotp.ErrKill)
				procs = append(procs[:i], procs[i+1:]...)
				continue
			}
			node := rapid.IntRange(0, 2).Draw(rt, "node")
			var gs []string
			for range rapid.IntRange(1, 3).Draw(rt, "joins") {
				gs = append(gs, rapid.SampledFrom(groups).Draw(rt, "group"))
			}
			s := scopes[node]
			joined := make(chan error, 1)
			pid, err := s.m.n.Spawn(func(p *gotp.Process) error {
				inst, err := s.scope.Open(p)
				for _, g := range gs {
					if err == nil {
						err = inst.Join(g) // the same group twice counts twice
					}
				}
				joined <- err
				if err != nil {
					return err
				}
				_, err = p.Receive(context.Background())
				return err
			})
			if err != nil {
				rt.Fatal(err)
			}
			if err := <-joined; err != nil {
				rt.Fatal(err)
			}
			procs = append(procs, live{node, pid})
		}
		// The model: each node's own local members, joined counts included.
		model := func() map[string]int {
			m := map[string]int{}
			for _, s := range scopes {
				for _, g := range s.scope.Groups() {
					for _, pid := range g.Members[s.m.n.Name()] {
						m[g.Name+"/"+pid.String()]++
					}
				}
			}
			return m
		}
		view := func(s scopeOn) map[string]int {
			m := map[string]int{}
			for _, g := range s.scope.Groups() {
				m["#joins/"+g.Name] = g.Joins
				for _, ps := range g.Members {
					for _, pid := range ps {
						m[g.Name+"/"+pid.String()]++
					}
				}
			}
			return m
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			want := model()
			first := view(scopes[0])
			members := maps.Clone(first)
			maps.DeleteFunc(members, func(k string, _ int) bool { return strings.HasPrefix(k, "#joins/") })
			ok := maps.Equal(members, want)
			for _, s := range scopes[1:] {
				if !maps.Equal(view(s), first) {
					ok = false
				}
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				rt.Fatalf("views did not converge: model %v, views %v / %v / %v", want, view(scopes[0]), view(scopes[1]), view(scopes[2]))
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
