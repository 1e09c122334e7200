package gotp

import (
	"errors"
	"sync"
)

// A Transport carries signals from this node to processes of other nodes.
// The cluster package implements it; the root package never talks to a
// network itself. Each method is called without any runtime lock held and
// must not block for long (queue, then return). Signals for an unknown or
// unreachable node are dropped; the transport reports lost nodes through
// Gateway.NodeDown.
type Transport interface {
	// Send delivers msg from the process from (zero if none) to to.
	Send(from, to PID, msg any)
	// Exit delivers an exit signal; viaLink marks one caused by the death
	// of the linked process from.
	Exit(from, to PID, reason error, viaLink bool)
	// Link asks to's node to add from to to's links.
	Link(from, to PID)
	// Unlink asks to's node to remove from from to's links.
	Unlink(from, to PID)
	// Monitor asks target's node to monitor target for ref. watcher is the
	// watching process, or the zero PID for a MonitorFunc watcher; the Down
	// goes back to ref's node either way.
	Monitor(ref Ref, watcher, target PID)
	// Demonitor asks target's node to drop the monitor ref.
	Demonitor(ref Ref, target PID)
	// Down tells ref's node that the monitored process target exited.
	Down(ref Ref, watcher, target PID, reason error)
	// Close is called by Node.Stop; the transport stops its goroutines.
	Close()
}

type remoteState struct {
	t    Transport
	mu   sync.Mutex            // guards mons
	mons map[Ref]remoteMonitor // monitors held by this node on remote processes
}

type remoteMonitor struct {
	target PID
	w      watcher
}

func (r *remoteState) monitor(ref Ref, target PID, w watcher) {
	r.mu.Lock()
	r.mons[ref] = remoteMonitor{target: target, w: w}
	r.mu.Unlock()
	r.t.Monitor(ref, w.pid, target)
}

func (r *remoteState) demonitor(ref Ref, target PID) bool {
	r.mu.Lock()
	_, ok := r.mons[ref]
	delete(r.mons, ref)
	r.mu.Unlock()
	if ok {
		r.t.Demonitor(ref, target)
	}
	return ok
}

// ErrAttached is returned by Attach when the node already has a transport.
var ErrAttached = errors.New("gotp: node already has a transport")

// Attach plugs a cluster transport into the node: from then on signals to
// PIDs of other nodes go through t, and t delivers signals from other nodes
// through the returned Gateway. A node has at most one transport.
func (n *Node) Attach(t Transport) (*Gateway, error) {
	r := &remoteState{t: t, mons: make(map[Ref]remoteMonitor)}
	if !n.remote.CompareAndSwap(nil, r) {
		return nil, ErrAttached
	}
	return &Gateway{n: n, r: r}, nil
}

// Transport returns the transport attached with Attach, or nil when the
// node runs alone. Behaviours use it to find optional capabilities of a
// cluster transport (server.RemoteCaller, for example).
func (n *Node) Transport() Transport {
	if r := n.remote.Load(); r != nil {
		return r.t
	}
	return nil
}

// A Gateway is how a transport delivers signals that arrive from other
// nodes. Its methods are safe for concurrent use; signals for processes
// that are not alive are answered as Erlang does (a link or monitor of a
// dead process reports ErrNoProc back) or dropped.
type Gateway struct {
	n *Node
	r *remoteState
}

// Send delivers a message from a remote process to a local one.
func (g *Gateway) Send(from, to PID, msg any) {
	if p := g.n.lookup(to); p != nil {
		p.deliver(msg)
	}
}

// RunInline is Node.RunInline for a message from a remote process, to any
// local handler-mode process, whether it was spawned with AllowInline or
// not: when to is idle, its handler handles msg on the calling goroutine
// and RunInline returns true once it has returned; otherwise it returns
// false and delivers nothing (use Send). It lets a transport run a call's
// server on the goroutine that read the call, when nothing else waits
// there. That goroutine then waits for the handler however long it runs,
// and a handler that calls runtime.Goexit ends it (after the process has
// exited): the transport must carry on without it.
func (g *Gateway) RunInline(to PID, msg any) bool {
	p := g.n.lookup(to)
	if p == nil || p.mode != modeHandler {
		return false
	}
	return p.runInline(msg)
}

// Exit delivers an exit signal from a remote process to a local one.
func (g *Gateway) Exit(from, to PID, reason error, viaLink bool) {
	if p := g.n.lookup(to); p != nil {
		p.exitSignal(from, reason, viaLink)
	}
}

// Link adds the remote process from to the links of the local process to.
// If to is not alive, from is sent an exit signal with ErrNoProc.
func (g *Gateway) Link(from, to PID) {
	p := g.n.lookup(to)
	if p != nil {
		p.mu.Lock()
		if !p.dead.Load() {
			p.links.add(from)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	g.r.t.Exit(to, from, ErrNoProc, true)
}

// Unlink removes the remote process from from the links of to.
func (g *Gateway) Unlink(from, to PID) {
	if p := g.n.lookup(to); p != nil {
		p.mu.Lock()
		p.links.del(from)
		p.mu.Unlock()
	}
}

// Monitor makes a remote monitor ref of the local process target. If target
// is not alive, a Down with ErrNoProc goes back at once.
func (g *Gateway) Monitor(ref Ref, watcherPID, target PID) {
	g.n.monitor(ref, target, watcher{pid: watcherPID, remote: true})
}

// Demonitor drops a remote monitor of a local process.
func (g *Gateway) Demonitor(ref Ref, target PID) { g.n.dropMonitor(ref, target) }

// Down delivers the Down of a monitor this node holds on a remote process.
func (g *Gateway) Down(ref Ref, target PID, reason error) {
	g.r.mu.Lock()
	m, ok := g.r.mons[ref]
	delete(g.r.mons, ref)
	g.r.mu.Unlock()
	if ok {
		g.n.fire(m.w, Down{Ref: ref, PID: target, Reason: reason})
	}
}

// NodeDown tells the node that the node named node is lost: every monitor
// of its processes fires with ErrNoConnection, every link to them delivers
// an exit signal with ErrNoConnection, and monitors that its processes held
// here are dropped.
func (g *Gateway) NodeDown(node string) {
	n := g.n
	g.r.mu.Lock()
	var fired []Down
	var ws []watcher
	for ref, m := range g.r.mons {
		if m.target.node == node {
			delete(g.r.mons, ref)
			fired = append(fired, Down{Ref: ref, PID: m.target, Reason: ErrNoConnection})
			ws = append(ws, m.w)
		}
	}
	g.r.mu.Unlock()
	for i, d := range fired {
		n.fire(ws[i], d)
	}
	for _, p := range n.table.all() {
		var lost []PID
		p.mu.Lock()
		for l := range p.links.all {
			if l.node == node {
				lost = append(lost, l)
			}
		}
		for ref, w := range p.monitors.all {
			if w.remote && ref.node == node {
				p.monitors.take(ref)
			}
		}
		p.mu.Unlock()
		for _, l := range lost {
			p.exitSignal(l, ErrNoConnection, true)
		}
	}
}
