package cluster

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// TestWrongTokenFailsJoin: a node whose token its peer refuses fails Join
// with *AuthError naming the peer, and both sides log an ERROR.
func TestWrongTokenFailsJoin(t *testing.T) {
	for _, tc := range []struct{ name, token string }{{"wrong", "guess"}, {"missing", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			aLog := gotptest.NewLogRecorder()
			oa := fastOpts(t)
			oa.Token, oa.Logger = "s3cret", aLog.Logger()
			a := startNode(t, "a", oa)

			bLog := gotptest.NewLogRecorder()
			ob := fastOpts(t)
			ob.Token, ob.Logger = tc.token, bLog.Logger()
			ob.Peers = []string{a.c.RouteURL()}
			n := gotp.NewNode(gotp.Options{Name: "b"})
			defer stopNode(t, n)
			start := time.Now()
			_, err := Join(gotptest.Context(t), n, ob)
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("Join with a %s token: %v, want ErrAuth", tc.name, err)
			}
			ae, ok := errors.AsType[*AuthError](err)
			if !ok || ae.Inbound || ae.Peer != a.c.RouteURL() {
				t.Fatalf("Join's error %#v, want an outbound refusal by %s", err, a.c.RouteURL())
			}
			if d := time.Since(start); d > ob.HeartbeatTimeout {
				t.Errorf("Join took %v to give up, more than the heartbeat timeout", d)
			}
			r := bLog.Wait(t, "cluster: a peer refused this node's credentials")
			if r.Level != slog.LevelError || r.Attrs["peer"] != a.c.RouteURL() || r.Attrs["err"] == nil {
				t.Errorf("b's log: %v %v", r.Level, r.Attrs)
			}
			r = aLog.Wait(t, "cluster: refused a server's credentials")
			if r.Level != slog.LevelError || r.Attrs["peer"] == nil {
				t.Errorf("a's log: %v %v", r.Level, r.Attrs)
			}
		})
	}
}

// TestStartAloneAfterRefusal: with StartAlone the refused node runs alone;
// AuthFailures says why, the peer publishes AuthFailed, and neither side
// sees the other.
func TestStartAloneAfterRefusal(t *testing.T) {
	oa := fastOpts(t)
	oa.Token = "s3cret"
	a := startNode(t, "a", oa)
	sub, _ := a.c.Subscribe()
	defer sub.Close()

	ob := fastOpts(t)
	ob.Token, ob.StartAlone = "guess", true
	ob.Peers = []string{a.c.RouteURL()}
	b := startNode(t, "b", ob)
	fails := b.c.AuthFailures()
	if !slices.ContainsFunc(fails, func(e *AuthError) bool { return !e.Inbound && e.Peer == a.c.RouteURL() }) {
		t.Fatalf("b's AuthFailures %v", fails)
	}
	select {
	case ev := <-sub.C():
		if ev.Kind != AuthFailed || !errors.Is(ev.Err, ErrAuth) {
			t.Fatalf("a's event %+v, want AuthFailed", ev)
		}
		if ae, _ := errors.AsType[*AuthError](ev.Err); !ae.Inbound {
			t.Fatalf("a's refusal %+v is not inbound", ae)
		}
	case <-time.After(gotptest.Timeout):
		t.Fatal("a published no AuthFailed event")
	}
	if len(a.c.Nodes()) != 0 || len(b.c.Nodes()) != 0 {
		t.Fatalf("a sees %v, b sees %v", a.c.Nodes(), b.c.Nodes())
	}
}

// TestPeerMessageCounters: NodeInfo counts the messages exchanged with
// each peer, on both sides.
func TestPeerMessageCounters(t *testing.T) {
	ms := startCluster(t, "a", "b", "c")
	a, b := ms[0], ms[1]
	got := gotptest.NewSink(t, b.n)
	const k = 25
	for i := range k {
		gotptest.Must(t, a.c.Send(got.PID(), Ping{Note: "x", N: i}))
	}
	for range k {
		got.Next(t)
	}
	find := func(nodes []NodeInfo, name string) NodeInfo {
		for _, ni := range nodes {
			if ni.Name == name {
				return ni
			}
		}
		t.Fatalf("%s not in %v", name, nodes)
		return NodeInfo{}
	}
	if out := find(a.c.Nodes(), "b").MessagesOut; out < k {
		t.Errorf("a counts %d messages to b, want at least %d", out, k)
	}
	if in := find(b.c.Nodes(), "a").MessagesIn; in < k {
		t.Errorf("b counts %d messages from a, want at least %d", in, k)
	}
	if c := find(a.c.Nodes(), "c"); c.MessagesOut >= k {
		t.Errorf("a counts %d messages to c, which was sent none of the pings", c.MessagesOut)
	}
}
