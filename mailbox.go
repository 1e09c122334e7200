package gotp

import "fmt"

// Overflow is the policy of a mailbox limit: what happens to a message sent
// to a process whose mailbox already holds as many messages as its limit
// allows. See MailboxLimit.
type Overflow uint8

const (
	// OverflowKill kills the process, as Erlang's max_heap_size with kill
	// does: it exits at once with ErrMailboxOverflow, whether or not it
	// traps exits, and its mailbox (the new message too) is dropped with
	// it. Links and monitors see that reason, so a supervisor restarts a
	// permanent or transient child and counts the restart against its
	// intensity. The node logs the kill at level Error.
	OverflowKill Overflow = iota + 1

	// OverflowDrop drops the new message and counts it: the process lives
	// on with the messages it already has. Every drop is counted in the
	// process's ProcessInfo.Dropped and in Node.MailboxOverflows (which the
	// observer shows and exports as a metric), and the first drop of each
	// process is logged at level Warn.
	OverflowDrop
)

// String returns "kill" or "drop" (or "none" for the zero value: no
// limit).
func (o Overflow) String() string {
	switch o {
	case OverflowKill:
		return "kill"
	case OverflowDrop:
		return "drop"
	case 0:
		return "none"
	}
	return fmt.Sprintf("Overflow(%d)", uint8(o))
}

// mailboxLimit is the limit of a process that has one (Process.limited);
// it lives in procExtra and is guarded by the process's mu.
type mailboxLimit struct {
	max     int
	policy  Overflow
	dropped uint64 // messages dropped by OverflowDrop
}

// MailboxLimit limits the mailbox of the new process to max messages (see
// Process.SetMailboxLimit). A max of zero or less means no limit, the
// default. It panics if policy is not OverflowKill or OverflowDrop.
func MailboxLimit(max int, policy Overflow) SpawnOption {
	checkOverflow(policy)
	return SpawnOption{kind: optMailbox, n: int32(min(max, 1<<31-1)), policy: policy}
}

func checkOverflow(policy Overflow) {
	if policy != OverflowKill && policy != OverflowDrop {
		panic(fmt.Sprintf("gotp: mailbox limit with unknown Overflow policy %d (use OverflowKill or OverflowDrop)", uint8(policy)))
	}
}

// SetMailboxLimit limits the process's mailbox to max messages, from now
// on, with policy for a message that finds it full; max of zero or less
// removes the limit (mailboxes are unbounded by default, as Erlang's are).
// A mailbox is full when it holds max messages that the process has not
// yet taken (MailboxLen): the message being handled does not count, and
// messages already queued beyond a new, lower limit stay.
//
// The limit applies to every message sent (Send, Batch, timers, messages
// from other nodes, server calls and casts). It does not apply to the
// signals of links and monitors (Exit and Down messages): there is at most
// one of each per link and monitor, and a process that traps exits must
// not lose them. A server (gen_server) whose limit drops a call leaves the
// caller waiting until its deadline.
//
// It is safe from any goroutine, and panics if policy is not OverflowKill
// or OverflowDrop while max > 0.
func (p *Process) SetMailboxLimit(max int, policy Overflow) {
	if max > 0 {
		checkOverflow(policy)
	}
	p.mu.Lock()
	p.setMailboxLimitLocked(max, policy)
	p.mu.Unlock()
}

func (p *Process) setMailboxLimitLocked(max int, policy Overflow) {
	if max <= 0 {
		p.limited = false
		if p.extra != nil && p.extra.mbox != nil {
			p.extra.mbox.max, p.extra.mbox.policy = 0, 0 // keep the drop count
		}
		return
	}
	x := p.extraLocked()
	if x.mbox == nil {
		x.mbox = new(mailboxLimit)
	}
	x.mbox.max, x.mbox.policy = max, policy
	p.limited = true
}

// MailboxLen returns the number of messages in the process's mailbox:
// delivered and not yet taken by Receive or the handler (the message being
// handled is not counted). It is zero once the process has exited. It is
// safe from any goroutine, allocates nothing and takes the process's lock
// briefly; the figure is a moment's, since senders and the receiver go on
// meanwhile.
func (p *Process) MailboxLen() int {
	p.mu.Lock()
	l := p.mailboxLenLocked()
	p.mu.Unlock()
	return l
}

// MailboxLen returns the mailbox length of the live local process pid (see
// Process.MailboxLen), and whether pid is such a process. It allocates
// nothing.
func (n *Node) MailboxLen(pid PID) (int, bool) {
	p := n.lookup(pid)
	if p == nil {
		return 0, false
	}
	return p.MailboxLen(), true
}

// MailboxOverflows returns how many messages mailbox limits with
// OverflowDrop have dropped on this node since it started, and how many
// processes limits with OverflowKill have killed. Both only grow: they are
// counters, and include processes that have since exited.
func (n *Node) MailboxOverflows() (dropped, killed uint64) {
	return n.dropped.Load(), n.overflowKills.Load()
}

// overflowedLocked is the check of a process with a mailbox limit
// (p.limited) for a message about to be delivered, with p.mu held. If the
// mailbox is full it applies the limit's policy to the message, unlocks
// p.mu and returns true; otherwise it returns false with p.mu still held.
// It is kept out of line, so that the send path of a process without a
// limit grows by one test only.
//
//go:noinline
func (p *Process) overflowedLocked() bool {
	m := p.extra.mbox
	max := m.max
	if p.mailboxLenLocked() < max {
		return false
	}
	if m.policy == OverflowDrop {
		m.dropped++
		first := m.dropped == 1
		p.mu.Unlock()
		p.n.dropped.Add(1)
		if first {
			p.n.log.Warn("gotp: mailbox full: dropping new messages", "pid", p.Self(), "limit", max)
		}
		return true
	}
	p.mu.Unlock()
	if p.exit(ErrMailboxOverflow) {
		p.n.overflowKills.Add(1)
		p.n.log.Error("gotp: mailbox full: process killed", "pid", p.Self(), "limit", max, "reason", ErrMailboxOverflow)
	}
	return true
}
