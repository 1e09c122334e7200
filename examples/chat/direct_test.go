//go:build unix

package chat

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
)

// While a Delivery the history owner mailed to a connection is still in
// its mailbox, the owner mails the next one too instead of queueing it in
// the outbox itself, or the second would reach the client first; with
// none outstanding it queues it itself. A user who sends to itself always
// gets its message mailed (uncounted: nothing else can overtake it), after
// its SENT.
func TestDirectDeliveryWaitsForMailedOnes(t *testing.T) {
	var ct connTracker
	ts := startServiceConfig(t, Config{onConn: ct.add})
	a := connect(t, ts, "a")
	r := connect(t, ts, "r")
	_, rc := ct.of(t, ts, "r")

	rc.mailed.Add(1) // as if a Delivery were waiting in r's mailbox
	a.expect("SEND r one", "SENT r")
	if got := r.line(); got != "MSG a one" {
		t.Fatalf("r got %q", got)
	}
	if d, m := ts.directs.Load(), ts.mails.Load(); d != 0 || m != 1 {
		t.Fatalf("with a Delivery outstanding: %d direct, %d mailed; want 0, 1", d, m)
	}
	if n := rc.mailed.Load(); n != 1 {
		t.Fatalf("mailed = %d once the mailed one was handled, want 1 (the one the test added)", n)
	}

	rc.mailed.Add(-1)
	a.expect("SEND r two", "SENT r")
	if got := r.line(); got != "MSG a two" {
		t.Fatalf("r got %q", got)
	}
	if d, m := ts.directs.Load(), ts.mails.Load(); d != 1 || m != 1 {
		t.Fatalf("with none outstanding: %d direct, %d mailed; want 1, 1", d, m)
	}

	r.expect("SEND r self", "SENT r")
	if got := r.line(); got != "MSG r self" {
		t.Fatalf("r got %q after its SENT", got)
	}
	if d, m := ts.directs.Load(), ts.mails.Load(); d != 1 || m != 1 {
		t.Fatalf("after a send to itself: %d direct, %d mailed (counted); want 1, 1: its Delivery goes uncounted", d, m)
	}
}

// Many users pipelining messages to one recipient make batches large
// (mailed) and small (queued by the owner itself) in turn; the recipient
// gets every message once, each sender's in the order sent.
func TestDeliveriesKeepEachSendersOrder(t *testing.T) {
	ts := startService(t, t.TempDir())
	const senders, each = 24, 40
	r := connect(t, ts, "r")
	clients := make([]*client, senders)
	for i := range clients {
		clients[i] = connect(t, ts, fmt.Sprintf("s%d", i))
	}
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				var b bytes.Buffer
				for k := range each {
					fmt.Fprintf(&b, "SEND r %d %d\n", i, k)
				}
				c.c.Write(b.Bytes())
			})
		}
		wg.Wait()
		next := make([]int, senders)
		for range senders * each {
			l := r.line()
			f := strings.Fields(l)
			if len(f) != 4 || f[0] != "MSG" {
				t.Fatalf("r got %q", l)
			}
			i, _ := strconv.Atoi(f[2])
			k, _ := strconv.Atoi(f[3])
			if f[1] != fmt.Sprintf("s%d", i) || k != next[i] {
				t.Fatalf("round %d: r got %q, want message %d of s%d next", round, l, next[i], i)
			}
			next[i]++
		}
		for i, c := range clients {
			for range each {
				if got := c.line(); got != "SENT r" {
					t.Fatalf("s%d got %q", i, got)
				}
			}
		}
		if ts.directs.Load() > 0 && ts.mails.Load() > 0 {
			return
		}
		if round == 20 {
			t.Fatalf("after %d rounds: %d direct, %d mailed; the test wants both ways taken", round+1, ts.directs.Load(), ts.mails.Load())
		}
	}
}

// The history owner answers a quiet chat's SENDs itself (conn.sentDirect),
// without waking the sender's process. Commands a client pipelines behind
// a SEND wait for its SENT, and the owner wakes the process for them once
// it has answered: every reply comes, in the order of the commands.
func TestSentDirectKeepsRepliesInOrder(t *testing.T) {
	ts := startServiceConfig(t, Config{CommandRate: -1})
	a := connect(t, ts, "a")
	r := connect(t, ts, "r")
	const n = 200
	var b bytes.Buffer
	for k := range n {
		fmt.Fprintf(&b, "SEND r m%d\nSEND nobody x\n", k)
	}
	if _, err := a.c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if got := a.line(); got != "SENT r" {
			t.Fatalf("reply %d: %q, want SENT r", 2*k, got)
		}
		if got := a.line(); got != "ERROR unknown_recipient" {
			t.Fatalf("reply %d: %q, want ERROR unknown_recipient", 2*k+1, got)
		}
	}
	for k := range n {
		if got, want := r.line(), fmt.Sprintf("MSG a m%d", k); got != want {
			t.Fatalf("r got %q, want %q", got, want)
		}
	}
	direct, wakes := ts.sentDirects.Load(), ts.sentWakes.Load()
	t.Logf("%d of %d SENDs answered by the history owner, %d of them with a wake", direct, n, wakes)
	if direct == 0 || wakes == 0 {
		t.Fatalf("%d SENDs answered by the owner, %d woken: the test wants both", direct, wakes)
	}
}

// A command read while the history owner answers the SEND before it (the
// owner has claimed the answer and not yet queued the SENT) waits for the
// SENT: its reply comes second. The test holds the owner between its claim
// and its SENT until the next command has either been set waiting (right)
// or answered (its reply would overtake the SENT).
func TestCommandAfterClaimedSendWaits(t *testing.T) {
	var ct connTracker
	claimed := make(chan *appendReq, 1)
	proceed := make(chan struct{})
	ts := startServiceConfig(t, Config{CommandRate: -1, onConn: ct.add, onClaim: func(r *appendReq) {
		select {
		case claimed <- r:
			<-proceed
		default: // only the first SEND is held
		}
	}})
	a := connect(t, ts, "a")
	connect(t, ts, "r")
	_, ac := ct.of(t, ts, "a")
	a.send("SEND r one")
	r := <-claimed
	before := ac.out.replied.Load()
	a.send("SEND nobody x")
	for !r.waits.Load() && ac.out.replied.Load() == before {
		runtime.Gosched() // until the second command has been handled one way or the other
	}
	close(proceed)
	if got := a.line(); got != "SENT r" {
		t.Fatalf("first reply %q, want SENT r (the command after the SEND was answered first)", got)
	}
	if got := a.line(); got != "ERROR unknown_recipient" {
		t.Fatalf("second reply %q, want ERROR unknown_recipient", got)
	}
}

// An owner killed after it has claimed a SEND's answer still gives it (its
// goroutine goes on with the handler it is in): the sender's process, told
// of the owner's Down meanwhile, does not answer it too. The client reads
// one SENT and no ERROR unavailable, and the restarted owner takes the
// next SEND.
func TestOwnerKilledAfterClaimAnswersOnce(t *testing.T) {
	var ct connTracker
	var held atomic.Bool
	claimed := make(chan *appendReq, 1)
	proceed := make(chan struct{})
	ts := startServiceConfig(t, Config{CommandRate: -1, onConn: ct.add, onClaim: func(r *appendReq) {
		if held.CompareAndSwap(false, true) {
			claimed <- r
			<-proceed
		}
	}})
	a := connect(t, ts, "a")
	r := connect(t, ts, "r")
	_, ac := ct.of(t, ts, "a")
	a.send("SEND r one")
	req := <-claimed
	before := ac.out.replied.Load()
	owner, _ := ts.n.Whereis(historyName)
	ts.n.Exit(owner, gotp.ErrKill)
	a.send("SEND nobody x")
	for !req.waits.Load() && ac.out.replied.Load() == before {
		runtime.Gosched() // until the command waits behind the SEND, or (wrongly) has run
	}
	close(proceed)
	if got := a.line(); got != "SENT r" {
		t.Fatalf("first reply %q, want SENT r", got)
	}
	if got := a.line(); got != "ERROR unknown_recipient" {
		t.Fatalf("second reply %q, want ERROR unknown_recipient (one answer to the SEND)", got)
	}
	if got := r.line(); got != "MSG a one" {
		t.Fatalf("r got %q", got)
	}
	// The restarted owner takes the next SEND (ERROR unavailable while
	// it restarts is the protocol's answer too).
	for {
		a.send("SEND r two")
		if got := a.line(); got == "SENT r" {
			break
		} else if got != "ERROR unavailable" {
			t.Fatalf("a SEND after the restart: %q", got)
		}
	}
	if got := r.line(); got != "MSG a two" {
		t.Fatalf("r got %q", got)
	}
}
