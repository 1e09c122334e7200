package cluster

import (
	"slices"
	"strings"
	"time"
)

// PeerInfo describes a connected node for introspection.
type PeerInfo struct {
	Name          string
	Creation      uint32
	LastHeartbeat time.Time // when this node last heard from it
}

// Peers returns the nodes currently connected with the time each was last
// heard from, sorted by name. It takes no lock.
func (c *Cluster) Peers() []PeerInfo {
	m := c.peers()
	out := make([]PeerInfo, 0, len(m))
	for _, p := range m {
		out = append(out, PeerInfo{Name: p.name, Creation: p.creation, LastHeartbeat: time.Unix(0, p.lastSeen.Load())})
	}
	slices.SortFunc(out, func(a, b PeerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
