package pg

import (
	"cmp"
	"slices"

	"github.com/gotp/gotp"
)

// GroupInfo is one group of a scope with its members by node, for
// introspection.
type GroupInfo struct {
	Name    string
	Members map[string][]gotp.PID // node name → members there, each once
	Joins   int                   // memberships, a process joined k times counted k times
}

// Groups returns every group of the scope with its members on each node,
// sorted by name. It is not subject to the policy: it is meant for
// operators' tools such as the observer. It holds the scope's locks (shared)
// while it copies, so it costs O(members).
func (s *Scope) Groups() []GroupInfo {
	s.mu.RLock()
	s.lockStripes()
	out := make([]GroupInfo, 0, len(s.groups))
	local := s.n.Name()
	for name, g := range s.groups {
		if g.empty() {
			continue
		}
		gi := GroupInfo{Name: name, Members: map[string][]gotp.PID{}, Joins: g.joins()}
		if pids := g.distinctLocal(); len(pids) > 0 {
			gi.Members[local] = slices.Clone(pids)
		}
		for node, m := range g.remote {
			gi.Members[node] = slices.Clone(m.pids)
		}
		out = append(out, gi)
	}
	s.unlockStripes()
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b GroupInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
