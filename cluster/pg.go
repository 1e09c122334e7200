package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
)

// pg replication. Each replicated scope tells every connected peer of its
// local joins and leaves, in order, on the same ordered stream as every
// other signal to that peer; a peer that comes up (or a scope attached
// later) gets a full sync first. Frames:
//
//	kPG op(1) str(scope) ...
//	op join/leave: str(group) uvarint(n) n*shortPID
//	op sync:       flags(1: asks for the peer's sync back) uvarint(groups) groups*(str(group) uvarint(n) n*shortPID)
//	op broadcast:  str(group) str(topic) shortPID(from) value(payload)
const (
	pgJoin      = 1
	pgLeave     = 2
	pgSync      = 3
	pgBroadcast = 4
)

const maxPGList = 1 << 20

type pgState struct {
	mu     sync.Mutex // guards scopes
	scopes map[string]*pgScope
}

type pgScope struct {
	c     *Cluster
	id    string
	scope *pg.Scope
	gw    *pg.Gateway
}

func (s *pgState) init() { s.scopes = make(map[string]*pgScope) }

// ErrScopeReplicated is returned by Replicate for a scope id that is
// already replicated by this cluster.
var ErrScopeReplicated = errors.New("cluster: a scope with this id is already replicated")

// Replicate makes the pg scope span the cluster: its members are told to
// every node whose scope of the same id is replicated too, and theirs
// show here (Members, WhichGroups, Monitor and Events see them; the Local
// variants do not). Broadcast reaches remote members with one NATS
// message per node that has members; BroadcastLocal stays local. When a
// node is lost its members leave every group here (one left event per
// group). Membership is eventually consistent: it converges after joins,
// leaves, node loss and a partition that heals. Broadcast payloads go
// through the codec: an unregistered payload type is not sent to remote
// members (it is logged once per type and counted in Stats.EncodeErrors).
//
// Call Replicate once per scope on every node, after pg.Start; it fails
// with pg.ErrAttached if the scope already has a replicator.
func (c *Cluster) Replicate(s *pg.Scope) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if s == nil || s.Node() != c.n {
		return errors.New("cluster: Replicate needs a scope of this cluster's node")
	}
	ps := &pgScope{c: c, id: s.ID(), scope: s}
	c.pg.mu.Lock()
	if _, dup := c.pg.scopes[ps.id]; dup {
		c.pg.mu.Unlock()
		return ErrScopeReplicated
	}
	c.pg.scopes[ps.id] = ps
	c.pg.mu.Unlock()
	gw, err := s.Attach(ps)
	if err != nil {
		c.pg.mu.Lock()
		delete(c.pg.scopes, ps.id)
		c.pg.mu.Unlock()
		return err
	}
	c.pg.mu.Lock()
	ps.gw = gw
	c.pg.mu.Unlock()
	// Tell every peer what this node has, and ask for theirs.
	for _, p := range c.peers() {
		ps.sendSync(p, true)
	}
	return nil
}

func (c *Cluster) pgScopes() []*pgScope {
	c.pg.mu.Lock()
	defer c.pg.mu.Unlock()
	out := make([]*pgScope, 0, len(c.pg.scopes))
	for _, s := range c.pg.scopes {
		if s.gw != nil {
			out = append(out, s)
		}
	}
	return out
}

func (c *Cluster) pgScope(id string) *pgScope {
	c.pg.mu.Lock()
	defer c.pg.mu.Unlock()
	if s := c.pg.scopes[id]; s != nil && s.gw != nil {
		return s
	}
	return nil
}

// pgPeerUp sends p this node's memberships: both ends of a new connection
// do, so neither has to ask.
func (c *Cluster) pgPeerUp(p *peer) {
	for _, s := range c.pgScopes() {
		s.sendSync(p, false)
	}
}

func (c *Cluster) pgPeerDown(p *peer) {
	for _, s := range c.pgScopes() {
		s.gw.NodeDown(p.name)
	}
}

// sendSync queues the scope's local membership for p, atomically with
// respect to later joins and leaves (which are queued after it).
func (s *pgScope) sendSync(p *peer, ask bool) {
	s.gw.LocalSnapshot(func(groups map[string][]gotp.PID) {
		b := s.c.getBuf()
		defer s.c.putBuf(b)
		*b = s.header(*b, pgSync)
		if ask {
			*b = append(*b, 1)
		} else {
			*b = append(*b, 0)
		}
		*b = binary.AppendUvarint(*b, uint64(len(groups)))
		for g, pids := range groups {
			*b = appendStr(*b, g)
			*b = appendPIDList(*b, pids)
		}
		if err := s.c.enqueue(p, *b); err != nil && errors.Is(err, ErrTooLarge) {
			s.c.log.Error("cluster: pg sync too large for MaxMessageSize", "scope", s.id, "err", err)
		}
	})
}

func (s *pgScope) header(b []byte, op byte) []byte {
	b = append(b, kPG, op)
	return appendStr(b, s.id)
}

func appendPIDList(b []byte, pids []gotp.PID) []byte {
	b = binary.AppendUvarint(b, uint64(len(pids)))
	for _, pid := range pids {
		b = appendShortPID(b, pid)
	}
	return b
}

func (d *reader) pidList(node string) []gotp.PID {
	n := d.uvarint()
	if n > maxPGList || n > uint64(len(d.b)) {
		d.fail("pid list too long")
		return nil
	}
	out := make([]gotp.PID, 0, n)
	for range n {
		out = append(out, d.shortPID(node))
	}
	return out
}

// Joined implements pg.Replicator: it queues the join for every peer.
func (s *pgScope) Joined(group string, pids []gotp.PID) { s.delta(pgJoin, group, pids) }

// Left implements pg.Replicator.
func (s *pgScope) Left(group string, pids []gotp.PID) { s.delta(pgLeave, group, pids) }

func (s *pgScope) delta(op byte, group string, pids []gotp.PID) {
	peers := s.c.peers()
	if len(peers) == 0 {
		return
	}
	b := s.c.getBuf()
	defer s.c.putBuf(b)
	*b = s.header(*b, op)
	*b = appendStr(*b, group)
	*b = appendPIDList(*b, pids)
	for _, p := range peers {
		_ = s.c.enqueue(p, *b)
	}
}

// Broadcast implements pg.Replicator: one message to node.
func (s *pgScope) Broadcast(node string, msg pg.Message) {
	c := s.c
	p := c.peers()[node]
	if p == nil {
		c.stats.dropped.Add(1)
		return
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = s.header(*b, pgBroadcast)
	*b = appendStr(*b, msg.Group)
	*b = appendStr(*b, msg.Topic)
	*b = appendShortPID(*b, msg.From)
	var err error
	*b, err = c.codec.AppendValue(*b, msg.Payload)
	if err != nil {
		c.stats.encodeErrors.Add(1)
		key := fmt.Sprintf("pg %T", msg.Payload)
		if _, seen := c.logged.LoadOrStore(key, true); !seen {
			c.log.Warn("cluster: pg broadcast not sent to remote members (logged once per type)", "scope", s.id, "group", msg.Group, "err", err)
		}
		return
	}
	_ = c.enqueue(p, *b)
}

// Detached implements pg.Replicator: the scope closed, peers drop this
// node's members.
func (s *pgScope) Detached() {
	c := s.c
	c.pg.mu.Lock()
	if c.pg.scopes[s.id] == s {
		delete(c.pg.scopes, s.id)
	}
	c.pg.mu.Unlock()
	for _, p := range c.peers() {
		b := c.getBuf()
		*b = s.header(*b, pgSync)
		*b = append(*b, 0, 0) // no request, no groups
		_ = c.enqueue(p, *b)
		c.putBuf(b)
	}
}

// pgFrameDecoded is a decoded pg frame (for dispatch and the fuzzer).
type pgFrameDecoded struct {
	op      byte
	scope   string
	group   string
	topic   string
	pids    []gotp.PID
	groups  map[string][]gotp.PID
	ask     bool
	from    gotp.PID
	payload any
}

func decodePG(codec *Codec, sender string, d *reader) (f pgFrameDecoded, err error) {
	f.op = d.byte1()
	f.scope = d.str()
	switch f.op {
	case pgJoin, pgLeave:
		f.group = d.str()
		f.pids = d.pidList(sender)
	case pgSync:
		f.ask = d.byte1() == 1
		n := d.uvarint()
		if n > maxPGList || n > uint64(len(d.b)) {
			d.fail("too many groups")
			break
		}
		f.groups = make(map[string][]gotp.PID, n)
		for range n {
			g := d.str()
			f.groups[g] = append(f.groups[g], d.pidList(sender)...)
		}
	case pgBroadcast:
		f.group = d.str()
		f.topic = d.str()
		f.from = d.shortPID(sender)
		if d.err == nil {
			f.payload, err = codec.decodeValue(d)
		}
	default:
		d.fail(fmt.Sprintf("bad pg op %d", f.op))
	}
	if err == nil {
		err = d.err
	}
	if err == nil && len(d.b) != 0 {
		err = fmt.Errorf("%w: trailing bytes in pg frame", ErrDecode)
	}
	return f, err
}

func (c *Cluster) pgFrame(p *peer, d *reader) error {
	f, err := decodePG(c.codec, p.name, d)
	if err != nil {
		return err
	}
	s := c.pgScope(f.scope)
	if s == nil {
		return nil // not replicated here
	}
	switch f.op {
	case pgJoin:
		s.gw.Join(p.name, f.group, f.pids)
	case pgLeave:
		s.gw.Leave(p.name, f.group, f.pids)
	case pgSync:
		s.gw.Sync(p.name, f.groups)
		if f.ask {
			s.sendSync(p, false)
		}
	case pgBroadcast:
		s.gw.Deliver(pg.Message{Scope: f.scope, Group: f.group, Topic: f.topic, Payload: f.payload, From: f.from})
	}
	return nil
}
