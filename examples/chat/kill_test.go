package chat

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
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

// Every SEND ends in exactly one reply while the history owner is killed
// again and again in the middle of quiet batches: its claims race the
// Downs its senders get. Each client pipelines a SEND and a command behind
// it, round after round, and must read, in order, one answer to the SEND
// (SENT or ERROR unavailable) and then the command's reply; each
// recipient gets every message that was acknowledged, once and in order
// (five users in a ring, and one who sends to itself). The owner answers
// the SENDs itself (a quiet chat), or through the senders' processes (as
// for a busy chat's large batches). GOTP_STRESS=1 kills the owner 300
// times instead of 20.
func TestSendsEndUnderRepeatedOwnerKills(t *testing.T) {
	kills := 20
	if os.Getenv("GOTP_STRESS") != "" {
		kills = 300
	}
	for _, tc := range []struct {
		name     string
		noDirect bool
	}{{"owner answers", false}, {"processes answer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sendsUnderOwnerKills(t, kills, tc.noDirect)
		})
	}
}

func sendsUnderOwnerKills(t *testing.T, kills int, noDirect bool) {
	ts := startServiceConfig(t, Config{CommandRate: -1, Intensity: 10 * kills, Period: time.Minute, noDirect: noDirect})
	const users = 6
	target := func(i int) int { // q0..q4 in a ring; q5 to itself
		if i == users-1 {
			return i
		}
		return (i + 1) % (users - 1)
	}
	clients := make([]*client, users)
	for i := range clients {
		clients[i] = connect(t, ts, fmt.Sprintf("q%d", i))
	}
	var killed atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		defer killed.Store(true)
		for k := range kills {
			// Each owner commits a few messages before it is killed, at
			// a point that varies, so that kills land in answers.
			committed := ts.committed.Load()
			for ts.committed.Load() < committed+uint64(1+k%4) {
				if t.Failed() {
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
			if pid, ok := ts.n.Whereis(historyName); ok {
				ts.n.Exit(pid, gotp.ErrKill)
			}
		}
	})
	acked := make([][]int, users)    // acked[i]: the messages of q<i> that got SENT, in order
	received := make([][]int, users) // received[i]: the MSGs q<i> read, in order
	unavailable := make([]int, users)
	for i, c := range clients {
		to := fmt.Sprintf("q%d", target(i))
		wg.Go(func() {
			c.c.SetDeadline(time.Now().Add(time.Minute))
			// next reads one line that is not a MSG (noting the MSGs).
			next := func() (string, bool) {
				for {
					l, err := c.rd.ReadString('\n')
					if err != nil {
						t.Errorf("q%d: read: %v", i, err)
						return "", false
					}
					l = strings.TrimSuffix(l, "\n")
					var k int
					if _, err := fmt.Sscanf(l, "MSG q%d m%d", new(int), &k); err == nil {
						received[i] = append(received[i], k)
						continue
					}
					return l, true
				}
			}
			for k := 0; !killed.Load() || k < 20; k++ {
				if _, err := fmt.Fprintf(c.c, "SEND %s m%d\nSEND nobody x\n", to, k); err != nil {
					t.Errorf("q%d: write: %v", i, err)
					return
				}
				switch l, ok := next(); {
				case !ok:
					return
				case l == "SENT "+to:
					acked[i] = append(acked[i], k)
				case l == "ERROR unavailable":
					unavailable[i]++
				default:
					t.Errorf("q%d: the answer to SEND m%d: %q", i, k, l)
					return
				}
				if l, ok := next(); !ok {
					return
				} else if l != "ERROR unknown_recipient" {
					t.Errorf("q%d: the reply after SEND m%d: %q, want ERROR unknown_recipient", i, k, l)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for from := range clients {
		i := target(from) // q<i> receives the messages of q<from>
		c := clients[i]
		want := acked[from]
		// The MSGs of the last acknowledged messages may still be on their way.
		for len(want) > 0 && (len(received[i]) == 0 || received[i][len(received[i])-1] < want[len(want)-1]) {
			var k int
			if _, err := fmt.Sscanf(c.line(), "MSG q%d m%d", new(int), &k); err != nil {
				t.Fatalf("q%d: %v", i, err)
			}
			received[i] = append(received[i], k)
		}
		if !slices.IsSorted(received[i]) || len(slices.Compact(slices.Clone(received[i]))) != len(received[i]) {
			t.Fatalf("q%d received q%d's messages out of order or twice: %v (acknowledged: %v)", i, from, received[i], want)
		}
		for _, k := range want {
			if _, found := slices.BinarySearch(received[i], k); !found {
				t.Fatalf("q%d never received q%d's m%d, which got SENT", i, from, k)
			}
		}
	}
	total, errs := 0, 0
	for i := range users {
		total += len(acked[i]) + unavailable[i]
		errs += unavailable[i]
	}
	t.Logf("%d kills, %d SENDs: %d SENT, %d ERROR unavailable; %d answered by the owner itself", kills, total, total-errs, errs, ts.sentDirects.Load())
	if errs == total {
		t.Fatalf("all %d SENDs met a dead owner", total)
	}
	if direct := ts.sentDirects.Load(); noDirect != (direct == 0) {
		t.Fatalf("%d SENDs answered by the owner itself, with noDirect %v", direct, noDirect)
	}
}
