package cluster

import (
	"testing"
	"time"
)

func TestPeersListsConnectedNodesWithHeartbeats(t *testing.T) {
	ms := startCluster(t, "pa", "pb")
	before := time.Now()
	ps := ms[0].c.Peers()
	if len(ps) != 1 || ps[0].Name != "pb" || ps[0].Creation != ms[1].n.Creation() {
		t.Fatalf("Peers = %+v, want pb", ps)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ms[0].c.Peers()[0].LastHeartbeat.After(before) {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat after the mesh formed")
		}
		time.Sleep(10 * time.Millisecond) // heartbeats are periodic: time is the subject
	}
}
