package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Calls. server.Call to a server on another node goes through
// Cluster.callRemote (the transport is a server.RemoteCaller): one kCall
// frame carries the request and stands for a monitor of the server; the
// server's node delivers a server.Request whose Caller is the caller
// node's sink PID, and when the server replies (to the sink, as to any
// caller) it drops the monitor and sends one kReply frame. If the server
// exits first, the monitor's Down goes back instead; both travel on the
// same ordered connection, so a reply sent just before the server exits
// is never taken for its death. The caller waits in this node's call
// table, not in a process.

// sinkID is the id of the PID that stands for the caller of a call from
// another node: a server.ReplyMessage sent to it goes back as kReply.
const sinkID = math.MaxUint64

type callTable struct {
	mu   sync.Mutex // guards m
	m    map[gotp.Ref]*pendingCall
	pool sync.Pool
}

type pendingCall struct {
	p  *peer           // counts the call in p.calling until it is taken
	to *peer           // the connection the call went out on: its loss fails the call
	ch chan callResult // one answer; whoever takes the entry from m sends it
	t  *time.Timer
}

type callResult struct {
	v      any
	down   bool
	reason error
}

func (t *callTable) init() { t.m = make(map[gotp.Ref]*pendingCall) }

func (t *callTable) get(to *peer) *pendingCall {
	pc, ok := t.pool.Get().(*pendingCall)
	if !ok {
		pc = &pendingCall{ch: make(chan callResult, 1), t: time.NewTimer(time.Hour)}
		pc.t.Stop()
	}
	pc.to = to
	return pc
}

func (t *callTable) put(ref gotp.Ref, pc *pendingCall) {
	t.mu.Lock()
	t.m[ref] = pc
	t.mu.Unlock()
}

// take removes the call ref; the one that takes it answers it.
func (t *callTable) take(ref gotp.Ref) *pendingCall {
	t.mu.Lock()
	pc := t.m[ref]
	if pc != nil {
		delete(t.m, ref)
		pc.taken()
	}
	t.mu.Unlock()
	return pc
}

// taken uncounts a call taken from the table (t.mu held).
func (pc *pendingCall) taken() {
	if pc.p != nil {
		pc.p.calling.Add(-1)
		pc.p = nil
	}
}

func (t *callTable) release(pc *pendingCall) {
	pc.t.Stop()
	pc.to, pc.p = nil, nil
	t.pool.Put(pc)
}

// reply answers the call ref with v, if it still waits.
func (t *callTable) reply(ref gotp.Ref, v any) {
	if pc := t.take(ref); pc != nil {
		pc.ch <- callResult{v: v}
	}
}

// down answers the call ref with the server's end; it reports whether ref
// was a call.
func (t *callTable) down(ref gotp.Ref, reason error) bool {
	pc := t.take(ref)
	if pc == nil {
		return false
	}
	pc.ch <- callResult{down: true, reason: reason}
	return true
}

// nodeDown fails with noconnection every call that went out on the
// connection p, which is lost: not those to another incarnation of the
// same node, nor those on a later connection to it.
func (t *callTable) nodeDown(p *peer) {
	t.mu.Lock()
	var lost []*pendingCall
	for ref, pc := range t.m {
		if pc.to == p {
			delete(t.m, ref)
			pc.taken()
			lost = append(lost, pc)
		}
	}
	t.mu.Unlock()
	for _, pc := range lost {
		pc.ch <- callResult{down: true, reason: gotp.ErrNoConnection}
	}
}

func (t *callTable) failAll() {
	t.mu.Lock()
	m := t.m
	t.m = make(map[gotp.Ref]*pendingCall)
	for _, pc := range m {
		pc.taken()
	}
	t.mu.Unlock()
	for _, pc := range m {
		pc.ch <- callResult{down: true, reason: gotp.ErrNoConnection}
	}
}

// callRemote implements server.RemoteCaller.
func (c *Cluster) callRemote(ctx context.Context, to gotp.Dest, req any, timeout time.Duration) (any, bool, error) {
	var p *peer
	ref := c.n.MakeRef()
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kCall)
	*b = appendShortRef(*b, ref)
	switch d := to.(type) {
	case gotp.PID:
		if d.Node() == c.name {
			return nil, true, gotp.ErrNoProc // of an earlier incarnation of this node
		}
		if p = c.peers()[d.Node()]; p == nil {
			return nil, true, gotp.ErrNoConnection
		}
		if p.creation != d.Creation() {
			return nil, true, gotp.ErrNoProc
		}
		*b = append(*b, callPID)
		*b = appendShortPID(*b, d)
	case Remote:
		if p = c.peers()[d.Node]; p == nil {
			return nil, true, gotp.ErrNoConnection
		}
		*b = append(*b, callName)
		*b = appendStr(*b, d.Name)
	default:
		pid, ok := to.Resolve(c.n)
		if !ok || pid.Node() == c.name {
			return nil, true, gotp.ErrNoProc
		}
		return c.callRemote(ctx, pid, req, timeout)
	}
	var err error
	if *b, err = c.codec.AppendValue(*b, req); err != nil {
		c.stats.encodeErrors.Add(1)
		return nil, false, err
	}
	return c.await(ctx, p, ref, *b, timeout)
}

// await registers the call ref, sends frame to p and waits for the answer:
// reading it from p's direct link itself when the link's socket is free
// (see rsReader), otherwise as the link's goroutine hands it over.
func (c *Cluster) await(ctx context.Context, p *peer, ref gotp.Ref, frame []byte, timeout time.Duration) (any, bool, error) {
	var deadline int64
	if _, ok := ctx.Deadline(); !ok {
		deadline = time.Now().Add(timeout).UnixNano()
	}
	pc := c.calls.get(p)
	pc.p = p
	p.calling.Add(1)
	c.calls.put(ref, pc)
	self := p.link.takeSocket(deadline, ctx)
	if err := c.enqueueNow(p, frame, true); err != nil {
		if self {
			p.link.releaseSocket(p, nil)
		}
		if c.calls.take(ref) == nil {
			r := <-pc.ch // answered meanwhile (the node went down)
			c.calls.release(pc)
			return r.v, r.down, r.reason
		}
		c.calls.release(pc)
		if errors.Is(err, gotp.ErrNoConnection) {
			return nil, true, gotp.ErrNoConnection
		}
		return nil, false, err
	}
	if self {
		c.stats.selfReads.Add(1)
		p.link.readUntil(p, pc.ch)
		select {
		case r := <-pc.ch:
			c.calls.release(pc)
			return r.v, r.down, r.reason
		default:
		}
	}
	var expired <-chan time.Time
	if deadline != 0 {
		pc.t.Reset(time.Duration(deadline - time.Now().UnixNano()))
		expired = pc.t.C
	}
	var reason error
	select {
	case r := <-pc.ch:
		c.calls.release(pc)
		return r.v, r.down, r.reason
	case <-ctx.Done():
		reason = ctx.Err()
	case <-expired:
		reason = context.DeadlineExceeded
	}
	if c.calls.take(ref) == nil {
		r := <-pc.ch // the answer came as the wait ended
		c.calls.release(pc)
		return r.v, r.down, r.reason
	}
	c.calls.release(pc)
	b := c.getBuf()
	*b = append(*b, kCancel)
	*b = appendShortRef(*b, ref)
	_ = c.enqueue(p, *b)
	c.putBuf(b)
	return nil, false, reason
}

// serveCall delivers a call from p to its server, with the monitor that
// reports the server's end if it comes before the reply.
func (c *Cluster) serveCall(p *peer, f frame) {
	target := f.to
	if f.flags == callName {
		pid, ok := c.n.Whereis(f.name)
		if !ok {
			c.sendDown(p, f.ref, gotp.PID{}, gotp.ErrNoProc)
			return
		}
		target = pid
	}
	p.addInCall(f.ref, target)
	gw := c.gateway()
	gw.Monitor(f.ref, gotp.PID{}, target) // a Down goes back at once if it is not alive
	req := server.Request{Caller: gotp.NewPID(p.name, p.creation, sinkID), Ref: f.ref, Body: f.value}
	if l := p.inlineTo; l != nil && !l.pend.ok {
		l.pend = pendingReq{to: target, req: req, ok: true} // run by l.runCall
		return
	}
	gw.Send(gotp.PID{}, target, req)
}

func (c *Cluster) sendDown(p *peer, ref gotp.Ref, target gotp.PID, reason error) {
	b := c.getBuf()
	*b = append(*b, kDown)
	*b = appendShortRef(*b, ref)
	*b = appendShortPID(*b, target)
	*b = c.codec.appendReason(*b, reason)
	_ = c.enqueue(p, *b)
	c.putBuf(b)
}

// sendReply sends the reply of a call from another node (to is that
// node's sink) and drops the call's monitor. A reply the codec refuses
// goes back as an error saying so, so the caller does not wait for its
// deadline.
func (c *Cluster) sendReply(to gotp.PID, rm server.ReplyMessage) error {
	p := c.peerFor(to)
	if p == nil {
		c.stats.dropped.Add(1)
		return gotp.ErrNoConnection
	}
	if target, ok := p.takeInCall(rm.Ref); ok {
		c.gateway().Demonitor(rm.Ref, target)
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kReply)
	*b = appendShortRef(*b, rm.Ref)
	n := len(*b)
	var err error
	if *b, err = c.codec.AppendValue(*b, rm.Value); err != nil {
		c.stats.encodeErrors.Add(1)
		*b, _ = c.codec.AppendValue((*b)[:n], fmt.Errorf("cluster: reply not sent: %w", err))
		_ = c.enqueue(p, *b)
		return err
	}
	if err := c.enqueue(p, *b); errors.Is(err, ErrTooLarge) {
		*b, _ = c.codec.AppendValue((*b)[:n], fmt.Errorf("cluster: reply not sent: %w", err))
		_ = c.enqueue(p, *b)
		return err
	}
	return nil
}

// cancelCall drops the monitor of a call whose caller gave up.
func (c *Cluster) cancelCall(p *peer, ref gotp.Ref) {
	if target, ok := p.takeInCall(ref); ok {
		c.gateway().Demonitor(ref, target)
	}
}

func (p *peer) addInCall(ref gotp.Ref, pid gotp.PID) {
	p.inMu.Lock()
	if !p.down.Load() {
		if p.inCalls == nil {
			p.inCalls = make(map[gotp.Ref]gotp.PID)
		}
		p.inCalls[ref] = pid
	}
	p.inMu.Unlock()
}

func (p *peer) takeInCall(ref gotp.Ref) (gotp.PID, bool) {
	p.inMu.Lock()
	pid, ok := p.inCalls[ref]
	if ok {
		delete(p.inCalls, ref)
	}
	p.inMu.Unlock()
	return pid, ok
}

// Remote names the process registered under Name on node Node (Erlang's
// {Name, Node}). server.Call to it sends the call there, where the name
// is looked up when it arrives: a name nobody holds fails the call with
// gotp.ErrNoProc, as a server that is not running does. Everything else
// (Node.SendTo, server.Cast, server.Stop, Cluster methods taking a Dest)
// resolves it with Resolve, which asks that node, waiting up to the
// heartbeat timeout. Remote implements gotp.Dest and server.RemoteDest.
type Remote struct {
	Node string
	Name string
}

// DestNode returns r.Node.
func (r Remote) DestNode() string { return r.Node }

// Resolve returns the process registered under r.Name on r.Node: looked up
// on n itself for its own name, otherwise asked of that node over the
// cluster (one round trip). It reports false if nobody holds the name,
// the node is not connected, or n has no cluster.
func (r Remote) Resolve(n *gotp.Node) (gotp.PID, bool) {
	if r.Node == n.Name() {
		return n.Whereis(r.Name)
	}
	t, ok := n.Transport().(transport)
	if !ok {
		return gotp.PID{}, false
	}
	return t.c.whereis(r.Node, r.Name)
}

// String returns "name@node"-like text: {Name, Node}.
func (r Remote) String() string { return "{" + r.Name + ", " + r.Node + "}" }

// whereis asks node which process holds name there.
func (c *Cluster) whereis(node, name string) (gotp.PID, bool) {
	p := c.peers()[node]
	if p == nil {
		return gotp.PID{}, false
	}
	ref := c.n.MakeRef()
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kWhereis)
	*b = appendShortRef(*b, ref)
	*b = appendStr(*b, name)
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.HeartbeatTimeout)
	defer cancel()
	v, down, err := c.await(ctx, p, ref, *b, c.opts.HeartbeatTimeout)
	if down || err != nil {
		return gotp.PID{}, false
	}
	pid, ok := v.(gotp.PID)
	return pid, ok && !pid.IsZero()
}

func (c *Cluster) answerWhereis(p *peer, ref gotp.Ref, name string) {
	var v any
	if pid, ok := c.n.Whereis(name); ok && name != "" {
		v = pid
	}
	b := c.getBuf()
	*b = append(*b, kReply)
	*b = appendShortRef(*b, ref)
	*b, _ = c.codec.AppendValue(*b, v)
	_ = c.enqueue(p, *b)
	c.putBuf(b)
}

// Barrier returns once every node connected when it was called has
// handled everything this node sent it before the call (a round trip on
// each connection, which keeps its order): joins and leaves of replicated
// pg scopes, name registrations, messages. A node lost meanwhile counts as
// done. It returns ctx's error if ctx ends first, ErrClosed after Leave.
func (c *Cluster) Barrier(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	peers := c.peers()
	errs := make(chan error, len(peers))
	for _, p := range peers {
		go func() { // ends with its round trip, bounded by ctx
			ref := c.n.MakeRef()
			b := append(appendShortRef([]byte{kWhereis}, ref), 0) // the empty name: no lookup
			_, down, err := c.await(ctx, p, ref, b, DefaultBarrierTimeout)
			if down {
				err = nil
			}
			errs <- err
		}()
	}
	var first error
	for range peers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// DefaultBarrierTimeout bounds a Barrier whose context has no deadline.
const DefaultBarrierTimeout = 5 * time.Second
