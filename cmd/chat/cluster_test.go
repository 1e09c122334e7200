package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProgramCluster: two cmd/chat programs clustered through embedded NATS
// routes (the second names the first as its peer). A direct message and a
// room message cross nodes, WHO on either node lists the users of both,
// and a name held on one node is taken on the other; both stop cleanly.
func TestProgramCluster(t *testing.T) {
	a := startProgram(t, "-data", t.TempDir(), "-node", "a", "-cluster-route", "127.0.0.1:0")
	route := a.waitLog(`msg="chat: cluster routes listening" node=a route=(\S+)`)[1]
	b := startProgram(t, "-data", t.TempDir(), "-node", "b", "-cluster-route", "127.0.0.1:0", "-cluster-peers", route)

	ana := dialLine(t, a.tcp)
	ana.expect("CONNECT ana", "OK")
	bob := dialLine(t, b.tcp)
	bob.expect("CONNECT bob", "OK")

	// The nodes learn of each other's users: WHO lists both, on both.
	waitFor(t, "WHO on a to list bob", func() bool { return ana.do("WHO") == "ONLINE 2 ana bob" })
	waitFor(t, "WHO on b to list ana", func() bool { return bob.do("WHO") == "ONLINE 2 ana bob" })

	// A direct message each way.
	ana.expect("SEND bob olá from node a", "SENT bob")
	if got := bob.line(); got != "MSG ana olá from node a" {
		t.Fatalf("bob got %q", got)
	}
	bob.expect("SEND ana hi from node b", "SENT ana")
	if got := ana.line(); got != "MSG bob hi from node b" {
		t.Fatalf("ana got %q", got)
	}
	// Both see the conversation in HISTORY, on their own node.
	for _, c := range []struct {
		cl   *lineClient
		with string
	}{{ana, "bob"}, {bob, "ana"}} {
		c.cl.expect("HISTORY "+c.with, "HISTORY 2")
		if got := []string{c.cl.line(), c.cl.line()}; got[0] != "ana olá from node a" || got[1] != "bob hi from node b" {
			t.Fatalf("history with %s = %q", c.with, got)
		}
	}

	// A room across nodes.
	ana.expect("JOIN lobby", "OK")
	bob.expect("JOIN lobby", "OK")
	waitFor(t, "a room message to reach node a from node b", func() bool {
		bob.expect("SAY lobby ping", "OK")
		// bob, a member, always gets his own; ana gets it once the
		// membership has reached node b.
		if got := bob.line(); got != "ROOM lobby bob ping" {
			t.Fatalf("bob got %q", got)
		}
		ana.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		l, err := ana.rd.ReadString('\n')
		return err == nil && l == "ROOM lobby bob ping\n"
	})
	// Drain any further pings ana may still get, then check order-free
	// delivery the other way.
	ana.expect("SAY lobby pong", "OK")
	for {
		l := ana.line()
		if l == "ROOM lobby ana pong" {
			break
		}
		if l != "ROOM lobby bob ping" {
			t.Fatalf("ana got %q", l)
		}
	}
	for {
		l := bob.line()
		if l == "ROOM lobby ana pong" {
			break
		}
		if l != "ROOM lobby bob ping" {
			t.Fatalf("bob got %q", l)
		}
	}

	// A name held on one node is taken on the other.
	dialLine(t, b.tcp).expect("CONNECT ana", "ERROR name_taken")

	for _, p := range []*program{b, a} {
		p.signal(syscall.SIGTERM)
		if code := p.exit(); code != 0 {
			t.Fatalf("exit status %d, want 0", code)
		}
		for _, l := range p.log.all() {
			if strings.Contains(l, "level=ERROR") {
				t.Errorf("error logged: %s", l)
			}
		}
	}
}

// do sends one command and returns its one-line reply.
func (c *lineClient) do(cmd string) string {
	c.t.Helper()
	if _, err := c.c.Write([]byte(cmd + "\n")); err != nil {
		c.t.Fatal(err)
	}
	return c.line()
}

// waitFor retries check until it holds: the nodes learn of each other
// through the cluster with no signal a client can wait on.
func waitFor(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProgramClusterNameClash: the same name asked of both nodes at the same
// moment ends with one holder: either one CONNECT is refused, or both are
// accepted and, as soon as the nodes learn of it, one of the two
// connections gets ERROR name_taken and is closed. The other keeps the
// name, and WHO lists it once on both nodes.
func TestProgramClusterNameClash(t *testing.T) {
	a := startProgram(t, "-data", t.TempDir(), "-node", "a", "-cluster-route", "127.0.0.1:0")
	route := a.waitLog(`msg="chat: cluster routes listening" node=a route=(\S+)`)[1]
	b := startProgram(t, "-data", t.TempDir(), "-node", "b", "-cluster-route", "127.0.0.1:0", "-cluster-peers", route)
	wa, wb := dialLine(t, a.tcp), dialLine(t, b.tcp)
	wa.expect("CONNECT watcher-a", "OK")
	wb.expect("CONNECT watcher-b", "OK")
	waitFor(t, "the nodes to see each other", func() bool { return wa.do("WHO") == "ONLINE 2 watcher-a watcher-b" })

	clashes := 0
	for round := range 5 {
		name := fmt.Sprintf("zed%d", round)
		ca, cb := dialLine(t, a.tcp), dialLine(t, b.tcp)
		for _, c := range []*lineClient{ca, cb} {
			if _, err := c.c.Write([]byte("CONNECT " + name + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		ra, rb := ca.line(), cb.line()
		var winner *lineClient
		switch {
		case ra == "OK" && rb == "ERROR name_taken":
			winner = ca
		case rb == "OK" && ra == "ERROR name_taken":
			winner = cb
		case ra == "OK" && rb == "OK":
			clashes++
			winner = clashLoser(t, name, ca, cb)
		default:
			t.Fatalf("round %d: CONNECT %s → %q on a, %q on b", round, name, ra, rb)
		}
		// The winner holds the name: WHO lists it once on both nodes, and a
		// message reaches it.
		for _, w := range []*lineClient{wa, wb} {
			waitFor(t, "WHO to settle", func() bool {
				return strings.Count(w.do("WHO")+" ", " "+name+" ") == 1
			})
		}
		winner.expect("WHO", "ONLINE 3 watcher-a watcher-b "+name)
		wa.expect("SEND "+name+" you won", "SENT "+name)
		if got := winner.line(); got != "MSG watcher-a you won" {
			t.Fatalf("round %d: the holder of %s got %q", round, name, got)
		}
		winner.expect("QUIT", "BYE")
		waitFor(t, name+" to go", func() bool { return wb.do("WHO") == "ONLINE 2 watcher-a watcher-b" })
	}
	t.Logf("%d of 5 rounds were accepted on both nodes and resolved afterwards", clashes)
}

// clashLoser waits until one of a and b, both told OK for name, gets
// ERROR name_taken and then the end of its stream; it returns the other.
func clashLoser(t *testing.T, name string, a, b *lineClient) *lineClient {
	t.Helper()
	type state struct {
		c       *lineClient
		partial string
		lines   []string
		ended   bool
	}
	ss := []*state{{c: a}, {c: b}}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range ss {
			if s.ended {
				continue
			}
			s.c.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			l, err := s.c.rd.ReadString('\n')
			s.partial += l
			if err == nil {
				s.lines = append(s.lines, strings.TrimSuffix(s.partial, "\n"))
				s.partial = ""
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				s.ended = true
				if len(s.lines) != 1 || s.lines[0] != "ERROR name_taken" {
					t.Fatalf("%s: the connection that lost ended after %q, want ERROR name_taken", name, s.lines)
				}
				other := ss[1-i]
				if len(other.lines) != 0 {
					t.Fatalf("%s: the connection that kept the name got %q", name, other.lines)
				}
				return other.c
			}
		}
	}
	t.Fatalf("%s held by two connections and no conflict resolved: %q, %q", name, ss[0].lines, ss[1].lines)
	return nil
}

// TestProgramClusterNodeDies: when a clustered program is killed outright
// (SIGKILL: no goodbye to its peers), the other node stops listing its
// users, a SEND to one of them ends in ERROR unknown_recipient, and its
// names can be taken again; the survivor keeps serving its own users.
func TestProgramClusterNodeDies(t *testing.T) {
	a := startProgram(t, "-data", t.TempDir(), "-node", "a", "-cluster-route", "127.0.0.1:0")
	route := a.waitLog(`msg="chat: cluster routes listening" node=a route=(\S+)`)[1]
	b := startProgram(t, "-data", t.TempDir(), "-node", "b", "-cluster-route", "127.0.0.1:0", "-cluster-peers", route)
	ana := dialLine(t, a.tcp)
	ana.expect("CONNECT ana", "OK")
	ana.expect("JOIN lobby", "OK")
	bob := dialLine(t, b.tcp)
	bob.expect("CONNECT bob", "OK")
	bob.expect("JOIN lobby", "OK")
	waitFor(t, "a to list bob", func() bool { return ana.do("WHO") == "ONLINE 2 ana bob" })

	b.cmd.Process.Kill()
	b.exit()
	waitFor(t, "a to forget bob", func() bool { return ana.do("WHO") == "ONLINE 1 ana" })
	ana.expect("SEND bob are you there?", "ERROR unknown_recipient")
	ana.expect("SAY lobby alone", "OK")
	if got := ana.line(); got != "ROOM lobby ana alone" {
		t.Fatalf("ana got %q", got)
	}
	bob2 := dialLine(t, a.tcp)
	bob2.expect("CONNECT bob", "OK")
	ana.expect("SEND bob welcome back", "SENT bob")
	if got := bob2.line(); got != "MSG ana welcome back" {
		t.Fatalf("bob got %q", got)
	}
	a.signal(syscall.SIGTERM)
	if code := a.exit(); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
}
