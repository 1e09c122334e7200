package gotp

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultNodeName is the name of a Node whose Options leave Name empty.
const DefaultNodeName = "nonode"

// Options configure a Node. The zero value is a working configuration.
type Options struct {
	// Name names the node in PIDs and in a cluster. Defaults to
	// DefaultNodeName. It must not be empty in a cluster, and must be unique
	// there.
	Name string

	// Creation is the incarnation number of this node: PIDs of an earlier
	// incarnation of a node with the same name stay dead. Zero picks a
	// random non-zero value.
	Creation uint32

	// Logger receives the runtime's logs, crash reports first. A process
	// whose own code ends it abnormally (its function returns an error or
	// panics, its handler stops it with an error or panics, its init
	// panics) logs one record at level Error, message CrashReportMsg,
	// before it exits, with these attributes: pid; name and behaviour
	// when it has them; reason; panic and stack for a panic; last_message
	// for a handler (a CrashReporter handler, such as package server's,
	// adds its own, such as the server's state); in_init for a panic in
	// init; handled, mailbox_len, trap_exit, started; links (at most 32,
	// with links_total when there are more). Normal exits (nil and
	// ErrShutdown, wrapped or not) are not reported, nor a process ended
	// by an exit signal (a link, Exit, a kill): what caused the signal
	// reports for itself, as in Erlang. An init that returns an error is
	// not reported either: SpawnHandler returns the error to its caller.
	//
	// Defaults to slog.Default(). A logger whose handler is not enabled
	// for level Error turns crash reports off; a normal exit never
	// touches the logger.
	Logger *slog.Logger
}

// A Node is one instance of the runtime: it owns processes, their names,
// and the timers that send to them. There is no package-level state, so a
// program or a test may run several nodes side by side.
//
// A Node is safe for concurrent use by multiple goroutines. It must not be
// copied.
type Node struct {
	name     string
	creation uint32
	log      *slog.Logger
	started  time.Time

	nextID  atomic.Uint64
	nextRef atomic.Uint64
	count   atomic.Int64  // live processes
	crashes atomic.Uint64 // crash reports (see Process.crashed)
	table   procTable

	dropped       atomic.Uint64 // messages dropped by mailbox limits (OverflowDrop)
	overflowKills atomic.Uint64 // processes killed by mailbox limits (OverflowKill)

	namesMu sync.RWMutex // guards names
	names   map[string]*Process

	timerMu sync.Mutex // guards timers
	timers  map[Ref]*time.Timer

	remote atomic.Pointer[remoteState]

	goroutines tracker
	stopping   atomic.Bool
	stopMu     sync.Mutex // serialises Stop
}

// NewNode returns a running Node configured by opts.
func NewNode(opts Options) *Node {
	n := &Node{
		name:     opts.Name,
		creation: opts.Creation,
		log:      opts.Logger,
		started:  time.Now(),
		names:    make(map[string]*Process),
		timers:   make(map[Ref]*time.Timer),
	}
	if n.name == "" {
		n.name = DefaultNodeName
	}
	if n.creation == 0 {
		var b [4]byte
		for n.creation == 0 {
			_, _ = rand.Read(b[:])
			n.creation = binary.LittleEndian.Uint32(b[:])
		}
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.table.init()
	return n
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Started returns the time NewNode made the node.
func (n *Node) Started() time.Time { return n.started }

// Creation returns the node's incarnation number.
func (n *Node) Creation() uint32 { return n.creation }

// Logger returns the node's logger, for behaviours built on the runtime.
func (n *Node) Logger() *slog.Logger { return n.log }

// MakeRef returns a new reference, unique within this node incarnation.
func (n *Node) MakeRef() Ref {
	return Ref{node: n.name, creation: n.creation, id: n.nextRef.Add(1)}
}

// isLocal reports whether pid names a process of this node incarnation.
func (n *Node) isLocal(pid PID) bool {
	return pid.node == n.name && pid.creation == n.creation
}

// lookup returns the live local process named pid, or nil.
func (n *Node) lookup(pid PID) *Process {
	if !n.isLocal(pid) {
		return nil
	}
	return n.table.get(pid.id)
}

// Send delivers msg to the mailbox of the process to. It never blocks and
// never fails: a message to a process that has exited, to an unknown PID or
// to the zero PID is dropped. Messages from one sender to one receiver
// arrive in the order they were sent; there is no order across senders.
// Send is safe to call from any goroutine.
//
// A message to a process on another node goes through the node's cluster
// transport (see Attach); without one it is dropped.
func (n *Node) Send(to PID, msg any) {
	n.send(PID{}, to, msg)
}

// SendTo resolves to (a PID, a Name or a via name) and sends msg there. It
// reports whether to named a process at the time of the call.
func (n *Node) SendTo(to Dest, msg any) bool {
	pid, ok := to.Resolve(n)
	if !ok {
		return false
	}
	n.send(PID{}, pid, msg)
	return true
}

func (n *Node) send(from, to PID, msg any) {
	if p := n.lookup(to); p != nil {
		p.deliver(msg)
		return
	}
	if to.node != n.name && !to.IsZero() {
		if r := n.remote.Load(); r != nil {
			r.t.Send(from, to, msg)
		}
	}
}

// Exit sends an exit signal with reason to the process pid, as if from
// outside any process (Exit.From is the zero PID). A process that does not
// trap exits dies with reason, unless reason is nil (normal), which it
// ignores; one that traps exits receives an Exit message instead. ErrKill
// kills even a process that traps exits; it then exits with ErrKilled.
func (n *Node) Exit(pid PID, reason error) {
	n.exitSignal(PID{}, pid, reason, false)
}

func (n *Node) exitSignal(from, to PID, reason error, viaLink bool) {
	if p := n.lookup(to); p != nil {
		p.exitSignal(from, reason, viaLink)
		return
	}
	if to.node != n.name && !to.IsZero() {
		if r := n.remote.Load(); r != nil {
			r.t.Exit(from, to, reason, viaLink)
		}
	}
}

// IsAlive reports whether pid names a live process of this node.
func (n *Node) IsAlive(pid PID) bool {
	p := n.lookup(pid)
	return p != nil && !p.dead.Load()
}

// Processes returns the PIDs of every live process, in spawn order.
func (n *Node) Processes() []PID {
	ps := n.table.all()
	out := make([]PID, len(ps))
	for i, p := range ps {
		out[i] = p.Self()
	}
	return out
}

// ProcessCount returns the number of live processes.
func (n *Node) ProcessCount() int { return int(n.count.Load()) }

// Stop ends every process and waits for their goroutines. Processes are
// sent ErrShutdown in spawn order, oldest first, and Stop waits for each
// process that traps exits to end before signalling the next: a supervisor
// (which traps exits) therefore stops its own tree top-down, children in
// reverse start order, before anything younger is signalled. Timers are
// cancelled.
//
// Stop is safe to call more than once and from several goroutines. No
// process can be spawned once Stop has begun. If ctx ends first, Stop kills
// every remaining process with ErrKill and returns ctx.Err(); goroutines of
// function processes that neither receive nor watch their context may then
// still be running, and a later Stop waits for them again.
func (n *Node) Stop(ctx context.Context) error {
	n.stopMu.Lock()
	defer n.stopMu.Unlock()
	n.stopping.Store(true)

	n.timerMu.Lock()
	for ref, t := range n.timers {
		t.Stop()
		delete(n.timers, ref)
	}
	n.timerMu.Unlock()

	for _, p := range n.table.all() {
		if p.dead.Load() {
			continue
		}
		p.exitSignal(PID{}, ErrShutdown, false)
		p.mu.Lock()
		trapping := p.trap && !p.dead.Load()
		p.mu.Unlock()
		if !trapping {
			continue
		}
		if err := p.waitDead(ctx); err != nil {
			n.killAll()
			return err
		}
	}
	n.closeTransport()
	if err := n.goroutines.wait(ctx); err != nil {
		n.killAll()
		return err
	}
	return nil
}

// killAll kills every remaining process and closes the transport: what a
// Stop whose context ended leaves behind is only goroutines that ignore
// their process's end.
func (n *Node) killAll() {
	for _, p := range n.table.all() {
		p.exit(ErrKilled)
	}
	n.closeTransport()
}

func (n *Node) closeTransport() {
	if r := n.remote.Load(); r != nil {
		r.t.Close()
	}
}

// tracker counts the goroutines a node owns, so that Stop can wait for
// them with a context (sync.WaitGroup cannot).
type tracker struct {
	n       atomic.Int64
	mu      sync.Mutex // guards waiters
	waiters chan struct{}
}

func (t *tracker) add() { t.n.Add(1) }

func (t *tracker) addN(k int) { t.n.Add(int64(k)) }

func (t *tracker) done() {
	if t.n.Add(-1) != 0 {
		return
	}
	t.mu.Lock()
	if t.waiters != nil {
		close(t.waiters)
		t.waiters = nil
	}
	t.mu.Unlock()
}

func (t *tracker) wait(ctx context.Context) error {
	for {
		t.mu.Lock()
		if t.waiters == nil {
			t.waiters = make(chan struct{})
		}
		ch := t.waiters
		t.mu.Unlock()
		if t.n.Load() == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
