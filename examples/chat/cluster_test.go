package chat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/pg"
)

// startClustered runs a chat on a new node named name, joined to the
// cluster through the route URLs peers; it returns the service and its
// route URL for the next node.
func startClustered(t *testing.T, name string, peers ...string) (*testService, string) {
	t.Helper()
	n := quietNode(name)
	codec := cluster.NewCodec()
	if err := RegisterTypes(codec); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := cluster.Join(ctx, n, cluster.Options{
		Cluster:           "chattest",
		RouteListen:       "127.0.0.1:0",
		Peers:             peers,
		Codec:             codec,
		HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTimeout:  2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Start(ctx, n, Config{DataDir: t.TempDir(), TCPAddr: "127.0.0.1:0", Cluster: c})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testService{Service: svc, n: n}
	t.Cleanup(func() { ts.stop(t) })
	return ts, c.RouteURL()
}

func waitNodes(t *testing.T, a, b *testService) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.cfg.Cluster.WaitFor(ctx, b.n.Name()); err != nil {
		t.Fatal(err)
	}
	if err := b.cfg.Cluster.WaitFor(ctx, a.n.Name()); err != nil {
		t.Fatal(err)
	}
}

func TestClusteredChat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded NATS servers")
	}
	a, route := startClustered(t, "chat-a")
	b, _ := startClustered(t, "chat-b", route)
	waitNodes(t, a, b)

	ana := connect(t, a, "ana")
	bob := connect(t, b, "bob")
	eventually(t, "both users in WHO on both nodes", func() bool {
		return ana.do("WHO") == "ONLINE 2 ana bob" && bob.do("WHO") == "ONLINE 2 ana bob"
	})
	dial(t, b).expect("CONNECT ana", "ERROR name_taken")

	ana.expect("SEND bob across the cluster", "SENT bob")
	if got := bob.line(); got != "MSG ana across the cluster" {
		t.Fatalf("bob got %q", got)
	}
	bob.expect("SEND ana and back", "SENT ana")
	if got := ana.line(); got != "MSG bob and back" {
		t.Fatalf("ana got %q", got)
	}
	// Both nodes keep the conversation.
	for _, c := range []*client{ana, bob} {
		c.send("HISTORY " + map[*client]string{ana: "bob", bob: "ana"}[c])
		if got := c.line(); got != "HISTORY 2" {
			t.Fatalf("history: %q", got)
		}
		c.line()
		c.line()
	}

	// A JOIN reply means every connected node has the membership: bob's
	// broadcast right after reaches ana, with nothing to wait for.
	ana.expect("JOIN lobby", "OK")
	bob.expect("JOIN lobby", "OK")
	bob.expect("SAY lobby hello from b", "OK")
	if got := bob.line(); got != "ROOM lobby bob hello from b" {
		t.Fatalf("bob got %q", got)
	}
	if got := ana.line(); got != "ROOM lobby bob hello from b" {
		t.Fatalf("ana got %q", got)
	}
}

// TestClusteredNameClash connects the same name on both nodes at the same
// moment: as soon as the nodes learn of it, one of the two connections
// gets ERROR name_taken and is closed, and the name is held once.
func TestClusteredNameClash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded NATS servers")
	}
	a, route := startClustered(t, "clash-a")
	b, _ := startClustered(t, "clash-b", route)
	waitNodes(t, a, b)

	for round := range 5 {
		ca, cb := dial(t, a), dial(t, b)
		name := "carol" + string(rune('0'+round))
		var wg sync.WaitGroup
		for _, c := range []*client{ca, cb} {
			wg.Go(func() { c.send("CONNECT " + name) })
		}
		wg.Wait()
		// Each client reads until it knows its fate: a lone ERROR
		// name_taken, or OK followed by nothing (the winner) or by ERROR
		// name_taken and a closed connection (the loser).
		connected := map[*client]bool{} // got OK before its fate was known
		lost := func(c *client) bool {
			first := c.line()
			if first == "ERROR name_taken" {
				return true
			}
			connected[c] = true
			if first != "OK" {
				t.Fatalf("CONNECT %s → %q", name, first)
			}
			// Ask WHO until the nodes agree: the loser is told before.
			for range 200 {
				c.send("WHO")
				got := c.line()
				if got == "ERROR name_taken" {
					return true
				}
				if strings.Count(got+" ", " "+name+" ") == 1 && whoAgrees(a, b, name) {
					return false
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Fatalf("no agreement on %s", name)
			return false
		}
		la, lb := lost(ca), lost(cb)
		if la == lb {
			t.Fatalf("round %d: lost on a = %v, lost on b = %v: want exactly one loser", round, la, lb)
		}
		loser := ca
		if lb {
			loser = cb
		}
		if connected[loser] {
			// A connection that held the name and lost it is closed. (One
			// refused at CONNECT stays open, as for any taken name.)
			loser.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				_, err := loser.rd.ReadString('\n')
				if err == nil {
					continue
				}
				if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
					t.Fatalf("round %d: the losing connection was not closed", round)
				}
				break // closed, as it should be
			}
		}
		eventually(t, "the name held once", func() bool { return whoAgrees(a, b, name) })
	}
}

// whoAgrees reports whether both nodes see name held by one and the same
// process.
func whoAgrees(a, b *testService, name string) bool {
	var holders []gotp.PID
	for _, s := range []*testService{a, b} {
		scope := s.findScopeOrNil()
		if scope == nil {
			return false
		}
		var pids []gotp.PID
		for _, g := range scope.Groups() {
			if g.Name == userGroup(name) {
				for _, ps := range g.Members {
					pids = append(pids, ps...)
				}
			}
		}
		if len(pids) != 1 {
			return false
		}
		holders = append(holders, pids[0])
	}
	return holders[0] == holders[1]
}

func (ts *testService) findScopeOrNil() *pg.Scope {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := pg.Lookup(ctx, ts.n, ScopeID)
	if err != nil {
		return nil
	}
	return s
}

// TestClusteredJoinThenSay is the room-message-after-join gap: a room
// message sent from one node right after a user of the other node got the
// JOIN reply reaches that user, every time, also after the other node
// restarted (once its connection is up: see the package doc for the
// window before that).
func TestClusteredJoinThenSay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded NATS servers")
	}
	a, route := startClustered(t, "say-a")
	b, _ := startClustered(t, "say-b", route)
	waitNodes(t, a, b)
	check := func(a, b *testService, round string) {
		t.Helper()
		ana := connect(t, a, "ana"+round)
		bob := connect(t, b, "bob"+round)
		for i := range 20 {
			room := fmt.Sprintf("r%s-%d", round, i)
			ana.expect("JOIN "+room, "OK")
			bob.expect("JOIN "+room, "OK")
			ana.expect("SAY "+room+" hi", "OK")
			if got := ana.line(); got != "ROOM "+room+" ana"+round+" hi" {
				t.Fatalf("ana got %q", got)
			}
			if got := bob.line(); got != "ROOM "+room+" ana"+round+" hi" {
				t.Fatalf("round %s room %d: bob got %q", round, i, got)
			}
		}
		ana.send("QUIT")
		bob.send("QUIT")
	}
	check(a, b, "x")
	// b restarts (a new node incarnation, its service afresh).
	b.stop(t)
	b2, _ := startClustered(t, "say-b", route)
	waitNodes(t, a, b2)
	check(a, b2, "y")
}

func (ts *testService) findScope(t *testing.T) *pg.Scope {
	t.Helper()
	s := ts.findScopeOrNil()
	if s == nil {
		t.Fatal("no chat scope")
	}
	return s
}
