package pg

import (
	"sync/atomic"

	"github.com/gotp/gotp"
)

// EventKind tells a member joining from a member leaving.
type EventKind uint8

// The event kinds. Their String is Wippy's event kind.
const (
	MemberJoined EventKind = iota + 1 // "member.joined"
	MemberLeft                        // "member.left"
)

// String returns "member.joined" or "member.left".
func (k EventKind) String() string {
	switch k {
	case MemberJoined:
		return "member.joined"
	case MemberLeft:
		return "member.left"
	}
	return "unknown"
}

// An Event reports that members joined or left a group. PIDs has one entry
// per join or leave: a process that joined twice and exits appears twice in
// one MemberLeft event. One Join or Leave of one group by one process makes
// an event with one PID; a batch makes one event per group; changes
// reported by another node (see Gateway) may carry several processes.
// On one subscription, the events of one process come in the order of its
// changes, and every event comes after the change it reports is visible to
// Members; changes of different processes made at the same time come in
// either order. PIDs is shared by every subscriber: do not modify it.
type Event struct {
	Kind  EventKind
	Scope string
	Group string
	PIDs  []gotp.PID
}

// A Subscription delivers the events of one group (Instance.Monitor) or of
// every group (Instance.Events) on a channel buffered to the scope's
// Buffer (DefaultBuffer, 64). The scope never waits for a subscriber: when
// the channel is full, further events for this subscription are dropped
// and counted by Dropped, and the subscription goes on with the events
// that fit (a consumer that sees Dropped grow should rebuild its view with
// a new Monitor). Other subscriptions are not affected.
//
// A Subscription is safe for concurrent use by multiple goroutines.
type Subscription struct {
	s       *Scope
	inst    *Instance
	group   string // "" for an Events subscription
	all     bool
	ch      chan Event
	dropped atomic.Uint64
	closed  bool // guarded by s.mu
}

// C returns the channel the events arrive on. It is closed when the
// subscription is closed (Close, CloseFlush, Release of its instance, exit
// of its process, or the scope's close).
func (sub *Subscription) C() <-chan Event { return sub.ch }

// Dropped returns how many events were dropped because the channel was
// full.
func (sub *Subscription) Dropped() uint64 { return sub.dropped.Load() }

// Group returns the monitored group, or "" for a subscription to every
// group (Events).
func (sub *Subscription) Group() string { return sub.group }

// Close unsubscribes and closes the channel, discarding the events still
// queued in it: once Close returns no event is delivered, and a receive
// reports the channel closed as soon as a receiver that raced with Close
// has taken what it was taking. Close is idempotent.
func (sub *Subscription) Close() { sub.close(false) }

// CloseFlush unsubscribes and closes the channel, keeping the events
// already queued in it: no event is added after CloseFlush returns, and the
// consumer receives the queued ones, in order, before it sees the channel
// closed. It is Wippy's close({flush = true}). Closing an already closed
// subscription does nothing.
func (sub *Subscription) CloseFlush() { sub.close(true) }

func (sub *Subscription) close(flush bool) {
	s := sub.s
	s.mu.Lock()
	sub.closeLocked(flush)
	s.mu.Unlock()
}

// closeLocked unsubscribes and closes the channel. Publishing happens only
// with s.mu held and to subscriptions still registered, so no send can
// race with the close of the channel.
func (sub *Subscription) closeLocked(flush bool) {
	if sub.closed {
		return
	}
	sub.closed = true
	s := sub.s
	if sub.all {
		delete(s.ssubs, sub)
	} else if subs := s.gsubs[sub.group]; subs != nil {
		delete(subs, sub)
		if len(subs) == 0 {
			delete(s.gsubs, sub.group)
		}
	}
	if sub.inst.subs != nil {
		delete(sub.inst.subs, sub)
	}
	if !flush {
		for {
			select {
			case <-sub.ch:
				continue
			default:
			}
			break
		}
	}
	close(sub.ch)
}

func (sub *Subscription) offer(ev Event) {
	select {
	case sub.ch <- ev:
	default:
		sub.dropped.Add(1)
	}
}

// watchedLocked reports whether an event of group has a subscriber.
func (s *Scope) watchedLocked(group string) bool {
	return len(s.ssubs) > 0 || len(s.gsubs[group]) > 0
}

// publishLocked offers an event to every subscriber of group.
func (s *Scope) publishLocked(kind EventKind, group string, pids []gotp.PID) {
	if !s.watchedLocked(group) {
		return
	}
	ev := Event{Kind: kind, Scope: s.id, Group: group, PIDs: pids}
	for sub := range s.gsubs[group] {
		sub.offer(ev)
	}
	for sub := range s.ssubs {
		sub.offer(ev)
	}
}
