package gotp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// held spawns a handler-mode process whose handler, for its first message,
// signals started and then waits until release is closed; every message it
// handles is forwarded to got. It lets a test fill a mailbox that nobody
// takes from.
func held(t *testing.T, n *gotp.Node, release <-chan struct{}, opts ...gotp.SpawnOption) (gotp.PID, <-chan struct{}, <-chan any) {
	t.Helper()
	started := make(chan struct{})
	got := make(chan any, 1024)
	first := true
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if first {
			first = false
			close(started)
			<-release
		}
		got <- msg
		return false, nil
	}), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return pid, started, got
}

func TestMailboxLenCountsWaitingMessages(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	pid, started, got := held(t, n, release)
	n.Send(pid, 0)
	gotptest.Recv(t, started) // message 0 is being handled: not in the mailbox
	if l, ok := n.MailboxLen(pid); !ok || l != 0 {
		t.Fatalf("MailboxLen while handling the only message = %d, %v; want 0, true", l, ok)
	}
	for i := 1; i <= 5; i++ {
		n.Send(pid, i)
	}
	if l, _ := n.MailboxLen(pid); l != 5 {
		t.Fatalf("MailboxLen = %d, want 5", l)
	}
	if in, _ := n.ProcessInfo(pid); in.MailboxLen != 5 || in.MailboxMax != 0 || in.Overflow != 0 {
		t.Fatalf("ProcessInfo: mailbox %d, max %d, overflow %v; want 5, 0, none", in.MailboxLen, in.MailboxMax, in.Overflow)
	}
	close(release)
	for range 6 {
		gotptest.Recv(t, got)
	}
	gotptest.Eventually(t, "the mailbox to drain", func() bool { l, _ := n.MailboxLen(pid); return l == 0 })

	// A function process: messages wait until it receives.
	gate := make(chan struct{})
	fpid, done := run(t, n, func(p *gotp.Process) int {
		<-gate
		before := p.MailboxLen()
		p.Receive(context.Background())
		return before*10 + p.MailboxLen()
	})
	n.Send(fpid, "a")
	n.Send(fpid, "b")
	close(gate)
	if v := gotptest.Recv(t, done); v != 21 {
		t.Fatalf("function process saw %d then %d messages, want 2 then 1", v/10, v%10)
	}
	if _, ok := n.MailboxLen(gotp.PID{}); ok {
		t.Fatal("MailboxLen of the zero PID reports a process")
	}
}

func TestMailboxLimitDropKeepsTheOldestAndCountsEveryDrop(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	pid, started, got := held(t, n, release, gotp.MailboxLimit(3, gotp.OverflowDrop))
	n.Send(pid, 0)
	gotptest.Recv(t, started)
	for i := 1; i <= 10; i++ {
		n.Send(pid, i)
	}
	in, _ := n.ProcessInfo(pid)
	if in.MailboxLen != 3 || in.Dropped != 7 || in.MailboxMax != 3 || in.Overflow != gotp.OverflowDrop {
		t.Fatalf("ProcessInfo: mailbox %d, dropped %d, max %d, %v; want 3, 7, 3, drop", in.MailboxLen, in.Dropped, in.MailboxMax, in.Overflow)
	}
	if d, k := n.MailboxOverflows(); d != 7 || k != 0 {
		t.Fatalf("MailboxOverflows = %d dropped, %d killed; want 7, 0", d, k)
	}
	close(release)
	for want := range 4 {
		if v := gotptest.Recv(t, got); v != want {
			t.Fatalf("handled %v, want %d (the first three queued are kept, in order)", v, want)
		}
	}
	// Room again: the next message is taken.
	n.Send(pid, 11)
	if v := gotptest.Recv(t, got); v != 11 {
		t.Fatalf("handled %v, want 11", v)
	}
	if !n.IsAlive(pid) {
		t.Fatal("a drop limit ended the process")
	}
}

func TestMailboxLimitKillEndsEvenATrappingProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	defer close(release)
	pid, started, _ := held(t, n, release, gotp.MailboxLimit(2, gotp.OverflowKill), gotp.TrapExit(true))
	down := gotptest.Watch(t, n, pid)
	n.Send(pid, 0)
	gotptest.Recv(t, started)
	n.Send(pid, 1)
	n.Send(pid, 2)
	if !n.IsAlive(pid) {
		t.Fatal("killed at the limit, before it was exceeded")
	}
	n.Send(pid, 3)
	if reason := gotptest.Recv(t, down); !errors.Is(reason, gotp.ErrMailboxOverflow) {
		t.Fatalf("exit reason %v, want ErrMailboxOverflow", reason)
	}
	if gotp.IsNormal(gotp.ErrMailboxOverflow) {
		t.Fatal("ErrMailboxOverflow counts as a normal exit")
	}
	if d, k := n.MailboxOverflows(); d != 0 || k != 1 {
		t.Fatalf("MailboxOverflows = %d dropped, %d killed; want 0, 1", d, k)
	}
}

// A linked process learns of the kill by an exit signal with the reason,
// as a supervisor does.
func TestMailboxLimitKillReachesLinks(t *testing.T) {
	n := gotptest.NewNode(t)
	parent := gotptest.NewSink(t, n, gotp.TrapExit(true))
	pid, err := n.Spawn(func(p *gotp.Process) error {
		<-p.Context().Done()
		return nil
	}, gotp.LinkTo(parent.PID()), gotp.MailboxLimit(1, gotp.OverflowKill))
	if err != nil {
		t.Fatal(err)
	}
	n.Send(pid, "one")
	n.Send(pid, "two")
	m := parent.Next(t)
	if e, ok := m.(gotp.Exit); !ok || e.From != pid || !errors.Is(e.Reason, gotp.ErrMailboxOverflow) {
		t.Fatalf("the linked process received %#v, want Exit from %v with ErrMailboxOverflow", m, pid)
	}
}

// Exit and Down messages are signals: a full mailbox still takes them.
func TestMailboxLimitNeverDropsSignals(t *testing.T) {
	n := gotptest.NewNode(t)
	linked, watched := waiter(t, n), waiter(t, n)
	ready, gate := make(chan struct{}), make(chan struct{})
	pid, got := run(t, n, func(p *gotp.Process) []any {
		if err := p.Link(linked); err != nil {
			return []any{err}
		}
		p.Monitor(watched)
		close(ready)
		<-gate
		var msgs []any
		for range 3 {
			m, err := p.Receive(context.Background())
			if err != nil {
				return append(msgs, err)
			}
			msgs = append(msgs, m)
		}
		return msgs
	}, gotp.TrapExit(true), gotp.MailboxLimit(1, gotp.OverflowDrop))
	gotptest.Recv(t, ready)
	n.Send(pid, "fills it")
	n.Send(pid, "dropped")
	linkedDone, watchedDone := gotptest.Watch(t, n, linked), gotptest.Watch(t, n, watched)
	n.Send(linked, errBoom)
	n.Send(watched, errBoom)
	gotptest.Recv(t, linkedDone)
	gotptest.Recv(t, watchedDone)
	in, _ := n.ProcessInfo(pid)
	if in.MailboxLen != 3 || in.Dropped != 1 {
		t.Fatalf("mailbox %d, dropped %d; want 3 (the message, the Exit and the Down), 1", in.MailboxLen, in.Dropped)
	}
	close(gate)
	msgs := gotptest.Recv(t, got)
	if len(msgs) != 3 || msgs[0] != "fills it" {
		t.Fatalf("received %#v, want the message, then the Exit and the Down", msgs)
	}
	var exit, down bool
	for _, m := range msgs[1:] {
		switch m := m.(type) {
		case gotp.Exit:
			exit = m.From == linked && errors.Is(m.Reason, errBoom)
		case gotp.Down:
			down = m.PID == watched && errors.Is(m.Reason, errBoom)
		}
	}
	if !exit || !down {
		t.Fatalf("received %#v, want an Exit from %v and a Down of %v, both with errBoom", msgs, linked, watched)
	}
}

// A limit set on a running process applies from then on: lowered below
// what the mailbox holds, it takes nothing away; removed, the mailbox is
// unbounded again, and the drop count stays.
func TestSetMailboxLimit(t *testing.T) {
	n := gotptest.NewNode(t)
	procs := make(chan *gotp.Process, 1)
	gate := make(chan struct{})
	pid, got := run(t, n, func(p *gotp.Process) int {
		procs <- p
		<-gate
		return p.MailboxLen()
	})
	p := gotptest.Recv(t, procs)
	p.SetMailboxLimit(4, gotp.OverflowDrop)
	for i := range 6 {
		n.Send(pid, i)
	}
	if l, d := p.MailboxLen(), p.Info().Dropped; l != 4 || d != 2 {
		t.Fatalf("limit 4: mailbox %d, dropped %d; want 4, 2", l, d)
	}
	p.SetMailboxLimit(2, gotp.OverflowKill)
	if l := p.MailboxLen(); l != 4 {
		t.Fatalf("after lowering the limit: mailbox %d, want 4 (nothing taken away)", l)
	}
	p.SetMailboxLimit(0, 0)
	for i := range 100 {
		n.Send(pid, i)
	}
	in := p.Info()
	if in.MailboxLen != 104 || in.Dropped != 2 || in.MailboxMax != 0 || in.Overflow != 0 {
		t.Fatalf("after removing the limit: mailbox %d, dropped %d, max %d, %v; want 104, 2, 0, none", in.MailboxLen, in.Dropped, in.MailboxMax, in.Overflow)
	}
	close(gate)
	if l := gotptest.Recv(t, got); l != 104 {
		t.Fatalf("the process saw %d messages, want 104", l)
	}
}

// A Batch's sends obey the limit too.
func TestMailboxLimitInBatch(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	defer close(release)
	dropper, started, _ := held(t, n, release, gotp.MailboxLimit(2, gotp.OverflowDrop))
	n.Send(dropper, 0)
	gotptest.Recv(t, started)
	n.Batch(func(b *gotp.Batch) {
		for i := range 5 {
			b.Send(dropper, i)
		}
	})
	if in, _ := n.ProcessInfo(dropper); in.MailboxLen != 2 || in.Dropped != 3 {
		t.Fatalf("after a batch of 5: mailbox %d, dropped %d; want 2, 3", in.MailboxLen, in.Dropped)
	}
}

func TestMailboxLimitUnknownPolicyPanics(t *testing.T) {
	for _, f := range []func(){
		func() { gotp.MailboxLimit(1, 0) },
		func() { gotp.MailboxLimit(1, gotp.Overflow(9)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic for an unknown Overflow policy")
				}
			}()
			f()
		}()
	}
	if s := fmt.Sprint(gotp.OverflowKill, gotp.OverflowDrop, gotp.Overflow(0)); s != "kill drop none" {
		t.Errorf("Overflow strings %q", s)
	}
}
