package chat

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotp/gotp"
)

// Killing the history owner outright (gotp.ErrKill, as the observer's kill
// button does: no Terminate) restarts it with every message intact, and
// leaves nothing running once the service and the node have stopped.
func TestHistoryOwnerKilled(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	ana.expect("SEND bob before the kill", "SENT bob")
	bob.line()
	old, _ := ts.n.Whereis(historyName)
	ts.n.Exit(old, gotp.ErrKill)
	eventually(t, "a new history owner", func() bool {
		pid, ok := ts.n.Whereis(historyName)
		return ok && pid != old
	})
	ana.expect("SEND bob after the kill", "SENT bob")
	bob.line()
	bob.expect("HISTORY ana", "HISTORY 2")
	if a, b := bob.line(), bob.line(); a != "ana before the kill" || b != "ana after the kill" {
		t.Fatalf("history = %q, %q", a, b)
	}
	// Nothing of the service may outlive it, the killed owner's store
	// included (an *sql.DB left open keeps a goroutine).
	stopAndVerifyNone(t, ts, ana, bob)
}

// A history owner killed just before a transaction does not start it: the
// sender's ERROR unavailable then means its message was not stored, and
// the recipient never gets it. (Killed during the transaction, the owner
// finishes it: the error then means "not known to be stored"; see the
// package doc.)
func TestHistoryOwnerKilledBeforeCommitStoresNothing(t *testing.T) {
	var node atomic.Pointer[gotp.Node]
	var kill atomic.Bool
	ts := startServiceConfig(t, Config{onCommit: func(int) {
		if kill.CompareAndSwap(true, false) { // on the owner's goroutine, as its handler would be killed
			n := node.Load()
			pid, _ := n.Whereis(historyName)
			n.Exit(pid, gotp.ErrKill)
		}
	}})
	node.Store(ts.n)
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	old, _ := ts.n.Whereis(historyName)
	kill.Store(true)
	ana.expect("SEND bob lost", "ERROR unavailable")
	eventually(t, "a new history owner", func() bool {
		pid, ok := ts.n.Whereis(historyName)
		return ok && pid != old
	})
	ana.expect("SEND bob kept", "SENT bob")
	if got := bob.line(); got != "MSG ana kept" {
		t.Fatalf("bob got %q, want the message sent after the restart (the first was refused)", got)
	}
	bob.expect("HISTORY ana", "HISTORY 1")
	if got := bob.line(); !strings.HasSuffix(got, "kept") {
		t.Fatalf("history holds %q, want only the message sent after the restart", got)
	}
	stopAndVerifyNone(t, ts, ana, bob)
}

// Killing any process of the tree outright, as the observer's kill button
// does, is survived: the online registry (its users register again), the
// connection supervisor (its clients are disconnected, new ones served) and
// one connection (only that user goes). Nothing outlives the service.
func TestTreeProcessesKilled(t *testing.T) {
	t.Run("online", func(t *testing.T) {
		ts := startService(t, t.TempDir())
		ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
		old, _ := ts.n.Whereis(onlineName)
		ts.n.Exit(old, gotp.ErrKill)
		eventually(t, "both users to register again", func() bool {
			pid, ok := ts.n.Whereis(onlineName)
			return ok && pid != old && bob.do("WHO") == "ONLINE 2 ana bob"
		})
		ana.expect("SEND bob back", "SENT bob")
		if got := bob.line(); got != "MSG ana back" {
			t.Fatalf("bob got %q", got)
		}
		stopAndVerifyNone(t, ts, ana, bob)
	})
	t.Run("connections", func(t *testing.T) {
		ts := startService(t, t.TempDir())
		ana := connect(t, ts, "ana")
		old, _ := ts.n.Whereis(connectionsName)
		ts.n.Exit(old, gotp.ErrKill)
		ana.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if l, err := ana.rd.ReadString('\n'); err == nil {
			t.Fatalf("ana read %q after her connection's supervisor was killed", l)
		}
		eventually(t, "a new connection supervisor", func() bool {
			pid, ok := ts.n.Whereis(connectionsName)
			return ok && pid != old
		})
		var ana2 *client
		eventually(t, "ana's name to be free", func() bool {
			c := dial(t, ts)
			if c.do("CONNECT ana") != "OK" {
				c.c.Close()
				return false
			}
			ana2 = c
			return true
		})
		ana2.expect("WHO", "ONLINE 1 ana")
		stopAndVerifyNone(t, ts, ana, ana2)
	})
	t.Run("connection", func(t *testing.T) {
		ts := startService(t, t.TempDir())
		ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
		e, _ := ts.Users().Find("ana")
		ts.n.Exit(e.PID, gotp.ErrKill)
		ana.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if l, err := ana.rd.ReadString('\n'); err == nil {
			t.Fatalf("ana read %q after her connection was killed", l)
		}
		eventually(t, "ana to go offline", func() bool { return bob.do("WHO") == "ONLINE 1 bob" })
		stopAndVerifyNone(t, ts, ana, bob)
	})
}

// stopAndVerifyNone closes the clients, stops the service and its node, and
// checks that no goroutine is left.
func stopAndVerifyNone(t *testing.T, ts *testService, clients ...*client) {
	t.Helper()
	for _, c := range clients {
		c.c.Close()
	}
	ts.stop(t)
	goleak.VerifyNone(t)
}
