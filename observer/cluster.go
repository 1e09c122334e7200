package observer

import (
	"context"
	"sync"
	"time"

	"github.com/gotp/gotp/cluster"
)

// ClusterSource shows the nodes of cluster c: those connected, with their
// last heartbeat, and those seen since the observer started that are no
// longer connected (down), with the last heartbeat heard from them. The
// message counters are the node's totals (the cluster counts messages per
// node, not per peer), shown on the row of this node.
func ClusterSource(c *cluster.Cluster) Source {
	return &clusterSource{c: c, seen: map[string]time.Time{}}
}

type clusterSource struct {
	c    *cluster.Cluster
	mu   sync.Mutex           // guards seen
	seen map[string]time.Time // node → last heartbeat heard
}

func (cs *clusterSource) Observe(_ context.Context, s *Snapshot) {
	peers := cs.c.Peers()
	st := cs.c.Stats()
	up := make(map[string]bool, len(peers))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	s.Cluster = append(s.Cluster, ClusterPeer{
		Node: cs.c.Node().Name(), Up: true, LastHeartbeat: time.Now(),
		MessagesIn: st.MessagesIn, MessagesOut: st.MessagesOut,
	})
	for _, p := range peers {
		up[p.Name] = true
		cs.seen[p.Name] = p.LastHeartbeat
		s.Cluster = append(s.Cluster, ClusterPeer{Node: p.Name, Up: true, LastHeartbeat: p.LastHeartbeat})
	}
	for name, last := range cs.seen {
		if !up[name] {
			s.Cluster = append(s.Cluster, ClusterPeer{Node: name, Up: false, LastHeartbeat: last})
		}
	}
}
