package cluster

import (
	"encoding/binary"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
)

// Connections. Every node announces itself on the heartbeat subject
// (discovery); of two nodes that hear each other, the one with the
// smaller name starts a connection (the initiator): a direct link when
// the other advertises one and it can be dialled and authenticated,
// otherwise a three-step handshake over NATS (ask, ack, confirm; each
// side names the connection with an id of its own, and every batch
// carries the receiver's id, so batches of an earlier connection are
// recognised and dropped). The connection is the unit of failure, as an
// Erlang distribution connection is: when it goes (a link closes, ticks
// stop for HeartbeatTimeout, the peer says bye) the peer is down, every
// monitor and link of its processes fires, and a later connection starts
// afresh.

type incarnation struct {
	name     string
	creation uint32
}

// A peer is the current connection to one incarnation of another node.
type peer struct {
	name     string
	creation uint32
	start    int64
	subject  string
	conn     uint64 // this node's id of the connection (NATS batches from the peer carry it)
	link     *link  // the direct link, or nil: the connection runs over NATS
	hdr      []byte // NATS batch header towards the peer (it carries the peer's id)
	since    time.Time
	lastSeen atomic.Int64
	down     atomic.Bool
	msgsIn   atomic.Uint64 // messages received on the connection
	calling  atomic.Int32  // calls to the peer waiting for their answer

	mu        sync.Mutex // guards the queue
	buf       []byte     // frames not yet written (over NATS: after hdr)
	full      [][]byte   // earlier batches, each at most the batch limit
	spare     []byte     // a written batch buffer, for the next batch
	pending   int        // bytes in buf and full
	msgsOut   uint64     // messages queued for the connection
	scheduled bool       // in the writer's ready list (NATS) or its link's writer woken
	writing   bool       // direct: a write is under way (by the writer or a sender)
	lastWrite int64      // direct: when the last write ended (UnixNano)

	// rx is held by the goroutine handling the peer's frames while it
	// handles one; afterDown takes it once, so that nothing the peer sent
	// is delivered after its Downs and its NodeDown.
	rx sync.Mutex
	// inlineTo is the link whose goroutine reads the frame being handled
	// when that frame is the last one read so far: a call in it may run
	// on that goroutine (see link.runCall). Guarded by rx.
	inlineTo *link

	inMu    sync.Mutex            // guards inCalls
	inCalls map[gotp.Ref]gotp.PID // calls from this peer in flight here: ref → server
}

func (p *peer) inc() incarnation { return incarnation{p.name, p.creation} }

// A shake is a connection being made.
type shake struct {
	inc       incarnation
	start     int64
	conn      uint64 // this node's id of the connection
	theirs    uint64 // responder over NATS: the initiator's id
	initiator bool
	dialing   bool // initiator: trying direct links (kept past expires until it gives up)
	expires   time.Time
}

func (c *Cluster) newConnLocked() uint64 {
	c.lastConn++
	return c.lastConn
}

// discovered handles a heartbeat of the incarnation inc: a newer
// incarnation replaces the one connected, and the initiator of a pair not
// yet connected starts a connection.
func (c *Cluster) discovered(inc incarnation, start int64, addrs []string) {
	if inc.name == c.name {
		if inc.creation != c.cr {
			if _, seen := c.logged.LoadOrStore("duplicate "+strconv.FormatUint(uint64(inc.creation), 10), true); !seen {
				c.log.Error("cluster: another node uses this node's name; its messages are ignored", "creation", inc.creation)
			}
		}
		return
	}
	now := time.Now()
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	if _, gone := c.left[inc]; gone {
		c.mu.Unlock()
		return
	}
	var old *peer
	if p := c.peers()[inc.name]; p != nil {
		if p.creation == inc.creation || start < p.start {
			c.mu.Unlock()
			return // connected, or a late heartbeat of an older incarnation
		}
		old = p // a newer incarnation: the old one is gone
		c.removePeerLocked(old)
	}
	var s *shake
	if c.name < inc.name {
		if cur := c.shakes[inc.name]; cur == nil || !cur.initiator || now.After(cur.expires) && !cur.dialing || cur.inc != inc && start > cur.start {
			s = &shake{inc: inc, start: start, conn: c.newConnLocked(), initiator: true, expires: now.Add(c.opts.HeartbeatTimeout)}
			// A direct link when the other advertises one, unless one
			// failed lately: then over NATS at once rather than wait for
			// dials that time out.
			t, failed := c.noLink[inc]
			s.dialing = len(addrs) > 0 && c.ln != nil && !(failed && now.Sub(t) < noLinkFor)
			c.shakes[inc.name] = s
		}
	}
	c.mu.Unlock()
	if old != nil {
		c.afterDown(old)
	}
	switch {
	case s == nil:
	case s.dialing:
		c.wg.Add(1)
		go c.dial(s, addrs)
	default:
		c.askOverNATS(s)
	}
}

// noLinkFor is how long a node whose direct links could not be made is
// connected over NATS without trying them again.
const noLinkFor = time.Minute

// askOverNATS starts the NATS handshake of s, unless s is no longer the
// current attempt.
func (c *Cluster) askOverNATS(s *shake) {
	c.mu.Lock()
	cur := c.shakes[s.inc.name] == s && !c.closing
	if cur {
		s.dialing = false
		s.expires = time.Now().Add(c.opts.HeartbeatTimeout)
	}
	c.mu.Unlock()
	if cur {
		c.publishControl(c.nodeSubject(s.inc.name), appendHello(nil, helloAsk, s.inc.creation, s.conn, 0))
	}
}

// onHello handles a handshake step over NATS from inc.
func (c *Cluster) onHello(inc incarnation, start int64, f control) {
	if f.target != c.cr || inc.name == c.name {
		return // meant for another incarnation of this node
	}
	switch f.phase {
	case helloAsk:
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return
		}
		if _, gone := c.left[inc]; gone {
			c.mu.Unlock()
			return
		}
		if p := c.peers()[inc.name]; p != nil && p.start > start {
			c.mu.Unlock()
			return // an older incarnation than the one connected
		}
		s := c.shakes[inc.name]
		if s == nil || s.initiator || s.inc != inc || s.theirs != f.conn {
			// A new half-open connection: it counts once the initiator
			// confirms it, so an ask delivered late (buffered through a
			// partition) disturbs nothing.
			s = &shake{inc: inc, start: start, conn: c.newConnLocked(), theirs: f.conn, expires: time.Now().Add(c.opts.HeartbeatTimeout)}
			c.shakes[inc.name] = s
		}
		conn := s.conn
		c.mu.Unlock()
		c.publishControl(c.nodeSubject(inc.name), appendHello(nil, helloAck, inc.creation, conn, f.conn))
	case helloAck:
		c.mu.Lock()
		s := c.shakes[inc.name]
		ok := s != nil && s.initiator && s.inc == inc && s.conn == f.echo
		c.mu.Unlock()
		if ok {
			c.establish(s, f.conn, nil)
		}
	}
}

// establish makes the connection of s the current one to its incarnation
// (replacing any earlier connection to that node, which goes down first)
// and reports it up. theirs is the peer's id of a NATS connection; l is
// the direct link, or nil. It returns nil if s is no longer wanted (the
// cluster leaves, another attempt replaced it, the incarnation left or
// is older than the one connected).
func (c *Cluster) establish(s *shake, theirs uint64, l *link) *peer {
	np := &peer{
		name: s.inc.name, creation: s.inc.creation, start: s.start, subject: c.nodeSubject(s.inc.name),
		conn: s.conn, link: l, since: time.Now(),
	}
	np.lastSeen.Store(np.since.UnixNano())
	// A link's frames wait until the handshake's last message is out
	// (link.run starts the writing).
	np.writing = l != nil
	if l == nil {
		np.hdr = binary.AppendUvarint(slices.Clip(c.header), theirs)
	}
	c.mu.Lock()
	if c.closing || c.shakes[s.inc.name] != s {
		c.mu.Unlock()
		return nil
	}
	delete(c.shakes, s.inc.name)
	if _, gone := c.left[s.inc]; gone {
		c.mu.Unlock()
		return nil
	}
	old := c.peers()[s.inc.name]
	if old != nil {
		if old.start > s.start {
			c.mu.Unlock()
			return nil
		}
		c.removePeerLocked(old)
	}
	if l == nil && s.initiator {
		// The confirmation is the connection's first frame: queued
		// before any other sender can see the peer.
		_ = c.enqueue(np, []byte{kHello, helloConfirm})
	}
	if l != nil {
		l.p = np
	}
	m := clonePeers(c.peers())
	m[np.name] = np
	c.peersV.Store(&m)
	c.mu.Unlock()
	if old != nil {
		c.afterDown(old)
	}
	c.log.Info("cluster: node up", "peer", np.name, "creation", np.creation, "direct", l != nil)
	c.publish(NodeEvent{Kind: NodeUp, Node: np.name, Creation: np.creation})
	c.pgPeerUp(np)
	c.namesPeerUp(np)
	return np
}

func clonePeers(m map[string]*peer) map[string]*peer {
	out := make(map[string]*peer, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// removePeerLocked takes p out of the peer table; c.mu is held.
func (c *Cluster) removePeerLocked(p *peer) bool {
	cur := c.peers()
	if cur[p.name] != p {
		return false
	}
	m := clonePeers(cur)
	delete(m, p.name)
	c.peersV.Store(&m)
	p.mu.Lock()
	p.down.Store(true)
	bufs := p.full
	if p.buf != nil {
		bufs = append(bufs, p.buf)
	}
	p.buf, p.full, p.pending = nil, nil, 0
	p.mu.Unlock()
	for _, b := range bufs {
		c.putBatch(b)
	}
	p.inMu.Lock()
	p.inCalls = nil
	p.inMu.Unlock()
	return true
}

// nodeDown declares the connection p lost: monitors of its processes fire
// with noconnection, links deliver exit signals, its calls fail, its group
// members and names go. leaving marks an incarnation that left for good.
func (c *Cluster) nodeDown(p *peer, leaving bool) { c.dropConn(p, leaving, false) }

// dropConn is nodeDown; inRx tells that the caller is handling p's frames
// (holds p.rx).
func (c *Cluster) dropConn(p *peer, leaving, inRx bool) {
	c.mu.Lock()
	ok := c.removePeerLocked(p)
	if ok && leaving {
		c.left[p.inc()] = time.Now()
	}
	c.mu.Unlock()
	if ok {
		c.afterDownRx(p, inRx)
	}
}

func (c *Cluster) afterDown(p *peer) { c.afterDownRx(p, false) }

func (c *Cluster) afterDownRx(p *peer, inRx bool) {
	if p.link != nil {
		p.link.close()
	}
	if !inRx {
		// Wait for a frame of p being handled now; later ones see p
		// down and are dropped.
		p.rx.Lock()
		//lint:ignore SA2001 an empty critical section is the barrier
		p.rx.Unlock()
	}
	c.log.Info("cluster: node down", "peer", p.name, "creation", p.creation)
	c.calls.nodeDown(p)
	c.pgPeerDown(p)
	c.namesPeerDown(p)
	c.gateway().NodeDown(p.name)
	c.publish(NodeEvent{Kind: NodeDown, Node: p.name, Creation: p.creation})
}

var tickFrame = []byte{kTick}

// heartbeats announces this node, ticks every connection, and drops the
// connections that stayed silent for HeartbeatTimeout.
func (c *Cluster) heartbeats() {
	defer c.wg.Done()
	hb := appendHeartbeat(nil, c.addrs)
	c.publishControl(c.hbSubj, hb)
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.publishControl(c.hbSubj, hb)
		now := time.Now()
		for _, p := range c.peers() {
			if now.UnixNano()-p.lastSeen.Load() > int64(c.opts.HeartbeatTimeout) {
				c.log.Info("cluster: node timed out", "peer", p.name, "direct", p.link != nil)
				c.timeOut(p)
				continue
			}
			_ = c.enqueue(p, tickFrame)
		}
		c.mu.Lock()
		for name, s := range c.shakes {
			if now.After(s.expires) && !s.dialing {
				delete(c.shakes, name)
			}
		}
		for k, t := range c.left {
			if now.Sub(t) > 10*c.opts.HeartbeatTimeout {
				delete(c.left, k)
			}
		}
		for k, t := range c.noLink {
			if now.Sub(t) > noLinkFor {
				delete(c.noLink, k)
			}
		}
		c.mu.Unlock()
	}
}

// timeOut drops the connection p after a silence, and tells the peer so
// that it treats this node as lost too, as a torn-down connection would in
// Erlang (a closed link says so by itself).
func (c *Cluster) timeOut(p *peer) {
	if p.link == nil {
		c.publishTo(p, []byte{kBye, 0})
	}
	c.nodeDown(p, false)
}
