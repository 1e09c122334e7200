package cluster

import "sync/atomic"

// EventKind tells a node coming up from one going down.
type EventKind int

const (
	// NodeUp: a node (an incarnation of it) is connected.
	NodeUp EventKind = iota + 1
	// NodeDown: a node was lost (heartbeat timeout, partition), left, or
	// was replaced by a new incarnation. Monitors of its processes have
	// fired with gotp.ErrNoConnection by the time the event is queued.
	NodeDown
	// AuthFailed: credentials were refused between this node's embedded
	// server and another's, for the first time for that peer; Err is the
	// *AuthError and Node the peer's route URL or address (not a node
	// name: a refused server never says who it is). NATS keeps retrying;
	// a refusal that goes on is logged again but not published again.
	AuthFailed
)

// String returns "nodeup" or "nodedown".
func (k EventKind) String() string {
	switch k {
	case NodeUp:
		return "nodeup"
	case NodeDown:
		return "nodedown"
	case AuthFailed:
		return "authfailed"
	}
	return "unknown"
}

// NodeEvent reports a change in the set of connected nodes, or a refusal
// of credentials (AuthFailed).
type NodeEvent struct {
	Kind     EventKind
	Node     string
	Creation uint32
	Err      error // AuthFailed: the *AuthError
}

// SubscriptionBuffer is the capacity of a Subscription's channel.
const SubscriptionBuffer = 64

// A Subscription receives node events in the order they happened. Its
// channel holds SubscriptionBuffer events; when a slow reader lets it
// fill, later events are dropped and counted (Dropped). The channel is
// closed by Close and when the cluster leaves.
type Subscription struct {
	c       *Cluster
	ch      chan NodeEvent
	dropped atomic.Uint64
	closed  bool // guarded by c.mu
}

// Subscribe returns a subscription to node events and, atomically with
// it, the nodes connected at that moment: every later change arrives as an
// event.
func (c *Cluster) Subscribe() (*Subscription, []NodeInfo) {
	s := &Subscription{c: c, ch: make(chan NodeEvent, SubscriptionBuffer)}
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := c.Nodes()
	if c.closed.Load() || c.closing {
		s.closed = true
		close(s.ch)
		return s, nodes
	}
	c.evSubs[s] = struct{}{}
	return s, nodes
}

// C returns the channel of events.
func (s *Subscription) C() <-chan NodeEvent { return s.ch }

// Dropped returns how many events were dropped because the channel was
// full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes its channel. It is idempotent.
func (s *Subscription) Close() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.closeLocked()
}

func (s *Subscription) closeLocked() {
	if s.closed {
		return
	}
	s.closed = true
	delete(s.c.evSubs, s)
	close(s.ch)
}

// publish queues ev for every subscriber; it never blocks.
func (c *Cluster) publish(ev NodeEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.evSubs {
		select {
		case s.ch <- ev:
		default:
			s.dropped.Add(1)
		}
	}
}
