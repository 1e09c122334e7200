package pg

import (
	"errors"

	"github.com/gotp/gotp"
)

// A Replicator carries a scope's membership to the other nodes of a
// cluster; the cluster package implements it, one per scope (see
// Scope.Attach). The pg package never talks to a network itself.
//
// Joined and Left are called with the scope's locks held, while the change
// is made: the reports about one process come in the exact order of its
// changes and never concurrently, so that a peer applying them in order
// converges (changes of different processes commute); reports about
// different processes may come concurrently, from several goroutines.
// Broadcast is called without locks. Every method must be safe for
// concurrent use, return quickly without blocking (queue, then return),
// and must not call back into the scope or its Gateway synchronously, nor
// end local processes synchronously (their exit would re-enter the scope).
type Replicator interface {
	// Joined reports that local processes joined group; a process that
	// joined k times appears k times.
	Joined(group string, pids []gotp.PID)
	// Left reports that local processes left group (or exited), counted
	// the same way.
	Left(group string, pids []gotp.PID)
	// Broadcast asks the scope of the same id on node to deliver msg to
	// its local members of msg.Group (with Gateway.Deliver there). It is
	// called once per node that has members of the group.
	Broadcast(node string, msg Message)
	// Detached reports that the scope has closed: the gateway is dead and
	// the replicator should tell its peers to drop this node's members.
	Detached()
}

// ErrAttached is returned by Attach when the scope already has a
// replicator.
var ErrAttached = errors.New("pg: scope already has a replicator")

// Attach plugs a replicator into the scope: from then on local joins and
// leaves are reported to r, broadcasts reach remote members through r, and
// r applies what other nodes report through the returned Gateway. A scope
// has at most one replicator. Attach fails with ErrAttached, or with
// ErrScopeClosed.
func (s *Scope) Attach(r Replicator) (*Gateway, error) {
	if r == nil {
		return nil, invalid("nil replicator")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrScopeClosed
	}
	if s.rep != nil {
		return nil, ErrAttached
	}
	s.rep = r
	return &Gateway{s: s}, nil
}

// A Gateway is how a Replicator applies to its scope what other nodes
// report: their members, full syncs, node losses and broadcasts. Members of
// another node are kept apart from local ones: they show in Members,
// WhichGroups, Monitor and Events (with their events), never in the local
// variants, and they are not reported back through the Replicator. Changes
// from node names equal to the local node's, and PIDs that do not belong to
// the node named, are ignored. The methods are safe for concurrent use and
// do nothing once the scope is closed.
type Gateway struct {
	s *Scope
}

// LocalSnapshot calls fn with every local membership (group → members, a
// process joined k times k times), with the scope's structure lock held
// exclusively: no local change is in progress, every change before it is
// in the snapshot (and was reported before fn is called) and every one
// after it is reported through Replicator.Joined/Left after fn returns. fn must not block and
// must not call into the scope; it typically queues the snapshot for a
// peer, in the same queue as the Joined/Left reports, as a full sync.
func (g *Gateway) LocalSnapshot(fn func(groups map[string][]gotp.PID)) {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := make(map[string][]gotp.PID)
	for name, gr := range s.groups {
		if gr.localJoins.Load() > 0 {
			snap[name] = gr.appendLocal(make([]gotp.PID, 0, gr.localJoins.Load()))
		}
	}
	fn(snap)
}

// Join records that pids of node joined group (a PID repeated k times
// joins k times).
func (g *Gateway) Join(node, group string, pids []gotp.PID) {
	s := g.s
	if !g.valid(node) || group == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	s.remoteJoinLocked(node, group, ownedBy(node, pids))
}

// Leave records that pids of node left group, once per occurrence; leaves
// of processes that are not members are ignored.
func (g *Gateway) Leave(node, group string, pids []gotp.PID) {
	s := g.s
	if !g.valid(node) || group == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	s.remoteLeaveLocked(node, group, ownedBy(node, pids))
}

// Sync replaces everything the scope knows of node's members with groups
// (group → members, a process joined k times k times), as a peer's full
// sync does. Subscribers see only the difference: joined events for what
// was added, left events for what was removed.
func (g *Gateway) Sync(node string, groups map[string][]gotp.PID) {
	s := g.s
	if !g.valid(node) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	// Groups node no longer has members in.
	for name := range s.nodes[node] {
		if _, ok := groups[name]; !ok {
			s.remoteDropLocked(node, name)
		}
	}
	for name, pids := range groups {
		if name == "" {
			continue
		}
		want := make(map[gotp.PID]int)
		for _, pid := range ownedBy(node, pids) {
			want[pid]++
		}
		var have map[gotp.PID]int
		if gr := s.groups[name]; gr != nil {
			if m := gr.remote[node]; m != nil {
				have = make(map[gotp.PID]int, len(m.pids))
				for i, pid := range m.pids {
					have[pid] = m.counts[i]
				}
			}
		}
		var joined, left []gotp.PID
		for pid, n := range want {
			if d := n - have[pid]; d > 0 {
				joined = append(joined, repeat(pid, d)...)
			}
		}
		for pid, n := range have {
			if d := n - want[pid]; d > 0 {
				left = append(left, repeat(pid, d)...)
			}
		}
		s.remoteLeaveLocked(node, name, left)
		s.remoteJoinLocked(node, name, joined)
	}
}

// NodeDown drops every member of node: each group it had members in gets
// one left event with them.
func (g *Gateway) NodeDown(node string) {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	for name := range s.nodes[node] {
		s.remoteDropLocked(node, name)
	}
}

// Deliver delivers a broadcast that arrived from another node to the local
// members of msg.Group (each once), as the sender's Broadcast does for its
// own node. The policy was the sender's to check.
func (g *Gateway) Deliver(msg Message) {
	s := g.s
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return
	}
	pids, _, _ := s.targetsRLocked(msg.Group, true)
	s.mu.RUnlock()
	var boxed any = msg
	for _, pid := range pids {
		s.n.Send(pid, boxed)
	}
}

func (g *Gateway) valid(node string) bool {
	return node != "" && node != g.s.n.Name()
}

// ownedBy returns the PIDs of pids that belong to node.
func ownedBy(node string, pids []gotp.PID) []gotp.PID {
	for _, pid := range pids {
		if pid.Node() != node {
			out := make([]gotp.PID, 0, len(pids))
			for _, p := range pids {
				if p.Node() == node {
					out = append(out, p)
				}
			}
			return out
		}
	}
	return pids
}

func (s *Scope) remoteJoinLocked(node, name string, pids []gotp.PID) {
	if len(pids) == 0 {
		return
	}
	g := s.groups[name]
	if g == nil {
		g = &group{}
		s.groups[name] = g
	}
	if g.remote == nil {
		g.remote = make(map[string]*memberSet)
	}
	m := g.remote[node]
	if m == nil {
		m = &memberSet{}
		g.remote[node] = m
		gs := s.nodes[node]
		if gs == nil {
			gs = make(map[string]struct{})
			s.nodes[node] = gs
		}
		gs[name] = struct{}{}
	}
	for _, pid := range pids {
		m.add(pid, 1)
	}
	if g.remoteJoins == 0 {
		s.whichGen.Add(1)
	}
	g.remoteJoins += len(pids)
	s.publishLocked(MemberJoined, name, pids)
}

func (s *Scope) remoteLeaveLocked(node, name string, pids []gotp.PID) {
	g := s.groups[name]
	if g == nil || len(pids) == 0 {
		return
	}
	m := g.remote[node]
	if m == nil {
		return
	}
	left := pids[:0:0]
	for _, pid := range pids {
		if n, _ := m.remove(pid, 1); n == 1 {
			left = append(left, pid)
		}
	}
	s.afterRemoteLeaveLocked(node, name, g, m, left)
}

// remoteDropLocked removes every member of node from name.
func (s *Scope) remoteDropLocked(node, name string) {
	g := s.groups[name]
	if g == nil {
		return
	}
	m := g.remote[node]
	if m == nil {
		return
	}
	left := m.appendTo(make([]gotp.PID, 0, m.joins))
	*m = memberSet{}
	s.afterRemoteLeaveLocked(node, name, g, m, left)
}

func (s *Scope) afterRemoteLeaveLocked(node, name string, g *group, m *memberSet, left []gotp.PID) {
	g.remoteJoins -= len(left)
	if len(left) > 0 && g.remoteJoins == 0 {
		s.whichGen.Add(1)
	}
	if m.joins == 0 {
		delete(g.remote, node)
		if gs := s.nodes[node]; gs != nil {
			delete(gs, name)
			if len(gs) == 0 {
				delete(s.nodes, node)
			}
		}
	}
	if g.empty() {
		delete(s.groups, name)
	}
	if len(left) > 0 {
		s.publishLocked(MemberLeft, name, left)
	}
}
