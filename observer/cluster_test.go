package observer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/observer"
)

func TestClusterSourceShowsUpAndDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded NATS servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := func(name string, peers ...string) (*gotp.Node, *cluster.Cluster) {
		n := gotp.NewNode(gotp.Options{Name: name, Logger: slog.New(slog.DiscardHandler)})
		c, err := cluster.Join(ctx, n, cluster.Options{Cluster: "obs", RouteListen: "127.0.0.1:0", Peers: peers,
			HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Stop(context.Background()) })
		return n, c
	}
	na, ca := join("oa")
	nb, cb := join("ob", ca.RouteURL())
	if err := ca.WaitFor(ctx, "ob"); err != nil {
		t.Fatal(err)
	}
	_ = cb
	o := observer.New(na, observer.Options{Sources: []observer.Source{observer.ClusterSource(ca)}})
	snap := func() map[string]observer.ClusterPeer {
		_, body := get(t, o, "/observer/api/snapshot")
		var s observer.Snapshot
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		out := map[string]observer.ClusterPeer{}
		for _, p := range s.Cluster {
			out[p.Node] = p
		}
		return out
	}
	if s := snap(); !s["oa"].Up || !s["ob"].Up || s["ob"].LastHeartbeat.IsZero() {
		t.Fatalf("cluster rows %+v, want oa and ob up", s)
	}
	nb.Stop(ctx)
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := snap()
		if p, ok := s["ob"]; ok && !p.Up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ob not shown down: %+v", s)
		}
		time.Sleep(20 * time.Millisecond) // node loss is noticed by heartbeat timeout: time is the subject
	}
}
