package observer

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gotp/gotp/cluster"
)

// ClusterSource shows the nodes of cluster c: those connected, with their
// last heartbeat and the messages exchanged with each; those seen since
// the observer started that are no longer connected (down), with the last
// heartbeat heard from them; and the addresses whose credentials were
// refused (cluster.AuthError). The row of this node carries the
// cluster's totals.
func ClusterSource(c *cluster.Cluster) Source {
	return &clusterSource{c: c, seen: map[string]time.Time{}}
}

type clusterSource struct {
	c    *cluster.Cluster
	mu   sync.Mutex           // guards seen
	seen map[string]time.Time // node → last heartbeat heard
}

func (cs *clusterSource) Observe(_ context.Context, s *Snapshot) {
	nodes := cs.c.Nodes()
	st := cs.c.Stats()
	refused := cs.c.AuthFailures()
	s.ClusterTotals = &ClusterTotals{
		MessagesIn: st.MessagesIn, MessagesOut: st.MessagesOut, BytesIn: st.BytesIn, BytesOut: st.BytesOut,
		Dropped: st.Dropped, EncodeErrors: st.EncodeErrors, DecodeErrors: st.DecodeErrors,
		AuthFailures: len(refused),
	}
	up := make(map[string]bool, len(nodes))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	s.Cluster = append(s.Cluster, ClusterPeer{
		Node: cs.c.Node().Name(), Up: true, Self: true, LastHeartbeat: time.Now(),
		MessagesIn: st.MessagesIn, MessagesOut: st.MessagesOut,
	})
	for _, p := range nodes {
		up[p.Name] = true
		cs.seen[p.Name] = p.LastSeen
		s.Cluster = append(s.Cluster, ClusterPeer{
			Node: p.Name, Up: true, LastHeartbeat: p.LastSeen,
			MessagesIn: p.MessagesIn, MessagesOut: p.MessagesOut, Pending: p.Pending,
		})
	}
	var down []ClusterPeer
	for name, last := range cs.seen {
		if !up[name] {
			down = append(down, ClusterPeer{Node: name, Up: false, LastHeartbeat: last})
		}
	}
	slices.SortFunc(down, func(a, b ClusterPeer) int { return strings.Compare(a.Node, b.Node) })
	s.Cluster = append(s.Cluster, down...)
	for _, e := range refused {
		s.Cluster = append(s.Cluster, ClusterPeer{Node: e.Peer, Refused: e.Error()})
	}
}
