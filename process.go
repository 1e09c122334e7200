package gotp

import (
	"context"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

type procMode uint8

const (
	modeFunc    procMode = iota // a function with its own goroutine
	modeHandler                 // a Handler run on demand
)

// A Process is a running process as seen from its own code: the handle
// passed to its function or handler. Methods that act for the process
// (Receive, Link, Monitor, Demonitor, TrapExit, Send, Spawn, Register,
// Exit) must be called only from the process itself: from its function's
// goroutine, or from its handler while it handles a message. Self, Node and
// Context are safe from any goroutine.
//
// The struct is kept small (an idle process's memory is one of gotp's
// targets): state that few processes need lives in procExtra, made on first
// use.
type Process struct {
	// What a sender touches, and the receiver after it: the first 64
	// bytes, so that a delivery and the receive that takes it touch as
	// few cache lines as the struct allows.
	mu        sync.Mutex // guards the fields from here to extra
	dead      atomic.Bool
	mode      procMode
	inline    bool // handler mode: RunInline may run the handler on the sender's goroutine
	resident  bool // handler mode: one goroutine handles every burst (see Resident)
	trap      bool
	waiting   bool     // function mode: the receiver waits on wake, and no hand-off to it has begun
	running   bool     // handler mode: a goroutine handles messages (or Init runs)
	exited    bool     // exit has finished: links signalled, monitors fired
	limited   bool     // the mailbox has a limit (extra.mbox): senders check it
	rhead     int32    // owned by the receiver (see rbuf); here, where it costs no space
	delivered uint64   // messages put in the mailbox (or handled inline), for MailboxLen
	queue     []any    // messages not yet moved to the receiver's buffer
	wake      chan any // function mode: hands a message (or wakeExit) to a waiting receiver; made by its first wait

	// Owned by the goroutine that receives (function mode) or handles
	// (handler mode); never touched by senders, so that a busy receiver
	// and its senders do not write the same cache lines.
	rbuf    []any
	handled atomic.Uint64 // messages taken from the mailbox; written by the owner only

	n       *Node
	id      uint64 // PID.ID(); the node's name and creation are the rest of the PID
	label   string // the Behaviour spawn option's label
	handler Handler
	started int64                   // unix nanoseconds
	lastTo  atomic.Pointer[Process] // the local process this one last sent to

	// Also guarded by mu.
	reason     error
	name       string
	links      linkSet
	monitors   *refSet[watcher] // monitors of this process; nil until the first
	monitoring *refSet[PID]     // monitors this process holds; nil until the first
	extra      *procExtra       // rarely needed state; nil until first needed
}

// procExtra holds the state of a process that most processes never need.
// It is guarded by the process's mu.
type procExtra struct {
	done   chan struct{} // closed when exit has finished; made by Done
	ctx    context.Context
	cancel context.CancelFunc
	values map[any]any   // process dictionary, set by behaviours
	label  string        // set by SetLabel
	mbox   *mailboxLimit // the mailbox limit, if one was ever set
	// hibernate asks a handler-mode process to drop its mailbox's buffers
	// when next idle (Hibernate).
	hibernate bool
}

// extraLocked returns p.extra, making it if needed. p.mu must be held.
func (p *Process) extraLocked() *procExtra {
	if p.extra == nil {
		p.extra = new(procExtra)
	}
	return p.extra
}

// A Handler handles the messages of a handler-mode process (see
// Node.SpawnHandler). A handler-mode process has no goroutine while its
// mailbox is empty: one is started when a message arrives and ends when the
// mailbox is drained, so an idle process costs only its memory.
type Handler interface {
	// HandleMessage handles one message. It is never called concurrently
	// for one process. Returning stop == true ends the process with reason
	// (nil is a normal exit). A panic ends the process with a *PanicError.
	HandleMessage(p *Process, msg any) (stop bool, reason error)
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(p *Process, msg any) (stop bool, reason error)

// HandleMessage calls f(p, msg).
func (f HandlerFunc) HandleMessage(p *Process, msg any) (bool, error) { return f(p, msg) }

type watcher struct {
	pid    PID        // receives a Down message, or
	fn     func(Down) // is called, or
	remote bool       // the Down goes back through the transport to Ref's node
}

// SpawnOption configures Spawn and SpawnHandler. Options are plain values
// (made by LinkTo, Named, TrapExit, AllowInline, Resident, Behaviour and
// MailboxLimit), so passing them allocates nothing.
type SpawnOption struct {
	kind   spawnOptionKind
	on     bool
	policy Overflow
	n      int32
	pid    PID
	str    string
}

type spawnOptionKind uint8

const (
	optNone spawnOptionKind = iota
	optLink
	optName
	optTrap
	optInline
	optResident
	optBehaviour
	optMailbox
)

type spawnConfig struct {
	link      PID
	name      string
	trap      bool
	inline    bool
	resident  bool
	behaviour string
	limit     int
	policy    Overflow
}

func configOf(opts []SpawnOption) spawnConfig {
	var c spawnConfig
	for i := range opts {
		o := &opts[i]
		switch o.kind {
		case optLink:
			c.link = o.pid
		case optName:
			c.name = o.str
		case optTrap:
			c.trap = o.on
		case optInline:
			c.inline = o.on
		case optResident:
			c.resident = o.on
		case optBehaviour:
			c.behaviour = o.str
		case optMailbox:
			c.limit, c.policy = int(o.n), o.policy
		}
	}
	return c
}

// LinkTo links the new process to pid before it runs, atomically (Erlang's
// spawn_link). If pid is not alive, the spawn fails with ErrNoProc.
func LinkTo(pid PID) SpawnOption { return SpawnOption{kind: optLink, pid: pid} }

// Named registers the new process under a local name before it runs. If
// the name is taken the spawn fails with *AlreadyRegisteredError.
func Named(name string) SpawnOption { return SpawnOption{kind: optName, str: name} }

// TrapExit sets whether the new process traps exits from its start.
func TrapExit(on bool) SpawnOption { return SpawnOption{kind: optTrap, on: on} }

// AllowInline lets Node.RunInline run the new handler-mode process's
// handler on the sender's goroutine while the process is idle. It has no
// effect on a function process (Spawn).
func AllowInline() SpawnOption { return SpawnOption{kind: optInline, on: true} }

// Resident gives the new handler-mode process a goroutine of its own for
// its whole life: a message wakes it instead of starting a goroutine for
// each burst, and it keeps the stack it has grown, which suits a busy
// process whose handler runs deep (a supervisor). An idle resident process
// holds a parked goroutine (a few KB) instead of none. RunInline still
// works on it. It has no effect on a function process (Spawn).
func Resident() SpawnOption { return SpawnOption{kind: optResident, on: true} }

// Behaviour labels the new process for introspection (for example
// "server" or "supervisor").
func Behaviour(label string) SpawnOption { return SpawnOption{kind: optBehaviour, str: label} }

// Spawn starts fn as a new process with its own goroutine and returns its
// PID. The process ends when fn returns, with fn's error as its reason (nil
// is normal), or when an exit signal kills it; a panic in fn ends it with a
// *PanicError. A killed process is dead at once for everyone else (links
// and monitors fire, its name is freed, messages to it are dropped); its
// goroutine learns it from Receive or from Context and should return.
//
// Spawn fails only when the node is stopping (ErrNodeStopped), when the
// name of Named is taken, or when the process of LinkTo is not alive.
func (n *Node) Spawn(fn func(p *Process) error, opts ...SpawnOption) (PID, error) {
	c := configOf(opts)
	p, err := n.newProcess(modeFunc, nil, &c)
	if err != nil {
		return PID{}, err
	}
	n.goroutines.add()
	if err := n.publish(p, &c); err != nil {
		n.goroutines.done()
		return PID{}, err
	}
	go p.runFunc(fn)
	return p.Self(), nil
}

// SpawnHandler starts a handler-mode process that runs h for each message,
// and returns its PID. If init is not nil it runs first, on the caller's
// goroutine, as the new process: Self, Link, Monitor and TrapExit work in
// it, and messages sent meanwhile wait in the mailbox. If init returns an
// error or panics, the process exits with that reason and SpawnHandler
// returns it. Failures are otherwise those of Spawn.
func (n *Node) SpawnHandler(h Handler, init func(p *Process) error, opts ...SpawnOption) (PID, error) {
	c := configOf(opts)
	p, err := n.newProcess(modeHandler, h, &c)
	if err != nil {
		return PID{}, err
	}
	p.running = true // hold messages until init is done
	if err := n.publish(p, &c); err != nil {
		return PID{}, err
	}
	if init != nil {
		if err := p.runInit(init); err != nil {
			p.exit(err)
			return PID{}, err
		}
	}
	p.mu.Lock()
	if p.dead.Load() {
		reason := p.reason
		p.mu.Unlock()
		if reason == nil {
			reason = ErrNoProc
		}
		return PID{}, reason
	}
	if p.resident {
		p.wake = make(chan any, 1)
		n.goroutines.add()
		go p.runResident()
	}
	if len(p.queue) == 0 {
		p.running = false
		p.mu.Unlock()
	} else {
		p.startHandlingLocked()
	}
	return p.Self(), nil
}

// startHandlingLocked gets a goroutine to handle the mailbox of a
// handler-mode process whose running flag the caller has just set (the
// resident one, or a new one), and unlocks p.mu. A new goroutine is
// counted before the unlock: once p is unlocked Stop may end it and find
// nothing else to wait for, and must still wait for this goroutine.
func (p *Process) startHandlingLocked() {
	if p.resident {
		wake := p.wake
		p.mu.Unlock()
		select {
		case wake <- nil:
		default: // a wake-up is already pending
		}
		return
	}
	p.n.goroutines.add()
	p.mu.Unlock()
	go p.runHandler()
}

func (p *Process) runInit(init func(p *Process) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
			p.crashed(err, nil, false, true)
		}
	}()
	return init(p)
}

func (n *Node) newProcess(mode procMode, h Handler, c *spawnConfig) (*Process, error) {
	if n.stopping.Load() {
		return nil, ErrNodeStopped
	}
	p := &Process{
		n:        n,
		id:       n.nextID.Add(1),
		mode:     mode,
		handler:  h,
		started:  time.Now().UnixNano(),
		trap:     c.trap,
		inline:   c.inline && mode == modeHandler,
		resident: c.resident && mode == modeHandler,
		label:    c.behaviour,
	}
	if c.limit > 0 {
		p.setMailboxLimitLocked(c.limit, c.policy) // not yet visible: no lock needed
	}
	return p, nil
}

// publish makes p visible: named, linked, in the table. On failure p never
// runs. It was in the table meanwhile, so someone may have monitored or
// linked its PID: it exits with ErrNoProc, as a process that did not exist,
// which fires those monitors and links and frees its name.
func (n *Node) publish(p *Process, c *spawnConfig) error {
	n.table.put(p)
	n.count.Add(1)
	fail := func(err error) error {
		p.exit(ErrNoProc)
		return err
	}
	if n.stopping.Load() { // Stop may have listed the table before put
		return fail(ErrNodeStopped)
	}
	if c.name != "" {
		if err := n.register(c.name, p); err != nil {
			return fail(err)
		}
	}
	if !c.link.IsZero() {
		if err := p.link(c.link); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (p *Process) runFunc(fn func(p *Process) error) {
	defer p.n.goroutines.done()
	if p.dead.Load() {
		return
	}
	var reason error
	returned := false
	defer func() {
		if !returned { // runtime.Goexit: the goroutine ends, and the process with it
			p.crashed(ErrGoexit, nil, false, false)
			p.exit(ErrGoexit)
			p.dropBuffer()
		}
	}()
	func() {
		defer func() {
			if v := recover(); v != nil {
				reason = &PanicError{Value: v, Stack: debug.Stack()}
				p.crashed(reason, nil, false, false)
			} else if reason != nil {
				p.crashed(reason, nil, false, false)
			}
		}()
		reason = fn(p)
	}()
	returned = true
	p.exit(reason)
	p.dropBuffer()
}

// dropBuffer lets go of messages left in the receiver's buffer of a dead
// process: a *Process can stay reachable after its death (a sender's
// lastTo, a handle kept by user code), its undelivered messages need not.
// Only the goroutine that owns the buffer may call it.
func (p *Process) dropBuffer() {
	clear(p.rbuf)
	p.rbuf, p.rhead = nil, 0
}

func (p *Process) runHandler() {
	defer p.n.goroutines.done()
	p.drain()
}

// runResident is the goroutine of a Resident process: it drains the
// mailbox each time it is woken, until the process has exited.
func (p *Process) runResident() {
	defer p.n.goroutines.done()
	// A resident goroutine is long-lived and few: label it, so that
	// ProcessStack can find it in the goroutine profile (CPU profiles then
	// show which process spent the time too).
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(pidLabel, p.Self().String())))
	for range p.wake {
		if p.dead.Load() || !p.drain() {
			p.dropBuffer()
			return
		}
	}
}

// drain handles messages until the mailbox is empty (the process is then
// idle: running is false) or the process has exited; it reports whether
// the process is still alive.
func (p *Process) drain() bool {
	for {
		if int(p.rhead) == len(p.rbuf) && !p.refill() {
			return !p.dead.Load()
		}
		if p.dead.Load() {
			p.dropBuffer()
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return false
		}
		msg := p.rbuf[p.rhead]
		p.rbuf[p.rhead] = nil
		p.rhead++
		p.handled.Add(1)
		if stop, reason := p.handle(msg); stop {
			p.exit(reason)
			p.dropBuffer()
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return false
		}
	}
}

// refill moves queued messages to the handler's buffer. When there are
// none it marks the process idle and returns false; the goroutine then
// ends.
func (p *Process) refill() bool {
	p.mu.Lock()
	if len(p.queue) == 0 || p.dead.Load() {
		p.running = false
		if cap(p.rbuf) > 256 { // do not keep a burst's buffer while idle
			p.rbuf = nil
		} else {
			p.rbuf = p.rbuf[:0]
		}
		p.rhead = 0
		if x := p.extra; x != nil && x.hibernate {
			p.hibernateLocked()
		}
		p.mu.Unlock()
		return false
	}
	p.rbuf, p.queue = p.queue, p.rbuf[:0]
	p.rhead = 0
	p.mu.Unlock()
	return true
}

// handle runs the handler on msg; a panic becomes a stop with a
// *PanicError. A handler that calls runtime.Goexit ends the goroutine that runs it,
// whatever handle does; the process is then ended here, with ErrGoexit,
// before the goroutine goes.
func (p *Process) handle(msg any) (stop bool, reason error) {
	returned := false
	defer func() {
		if v := recover(); v != nil {
			stop, reason = true, &PanicError{Value: v, Stack: debug.Stack()}
			p.crashed(reason, msg, true, false)
		} else if !returned {
			p.crashed(ErrGoexit, msg, true, false)
			p.exit(ErrGoexit)
		} else if reason != nil && stop {
			p.crashed(reason, msg, true, false)
		}
	}()
	stop, reason = p.handler.HandleMessage(p, msg)
	returned = true
	return stop, reason
}

// RunInline handles msg as the process to, on the calling goroutine, when
// to is a local handler-mode process spawned with AllowInline that is idle:
// alive, with an empty mailbox and no message being handled. It then
// returns true after the handler has returned; msg was the only message
// handled, and messages that arrived meanwhile are handled as usual, on a
// goroutine of the process's own. Otherwise it returns false and msg is
// not delivered: send it instead.
//
// Running a handler inline saves the two goroutine switches of a request
// whose sender waits for the answer anyway (a call). The sender then waits
// for the handler however long it runs; a handler that stops the process
// or panics ends the process, never the sender. RunInline is safe from any
// goroutine, including another process's. While the handler runs inline,
// Node.Stop waits for it as for a goroutine of the process's own.
func (n *Node) RunInline(to PID, msg any) bool {
	p := n.lookup(to)
	if p == nil || !p.inline {
		return false
	}
	return p.runInline(msg)
}

// runInline is RunInline once the process is known to be one it may run.
func (p *Process) runInline(msg any) bool {
	n := p.n
	p.mu.Lock()
	if p.running || len(p.queue) > 0 || p.dead.Load() {
		p.mu.Unlock()
		return false
	}
	p.running = true
	p.delivered++
	n.goroutines.add() // this goroutine runs the process for now
	p.mu.Unlock()
	defer n.goroutines.done()
	p.handled.Add(1)
	stop, reason := p.handle(msg)
	if stop {
		p.exit(reason)
	}
	p.mu.Lock()
	if stop || len(p.queue) == 0 || p.dead.Load() {
		p.running = false
		if x := p.extra; x != nil && x.hibernate {
			p.hibernateLocked()
		}
		p.mu.Unlock()
		return true
	}
	p.startHandlingLocked()
	return true
}

// Hibernate asks a handler-mode process to let go, once its mailbox is
// next empty, of the memory it keeps for its next burst of messages (the
// buffers of its mailbox, up to a few KB), instead of reusing it: Erlang's
// hibernate, as far as Go allows. An idle handler-mode process holds no
// goroutine anyway, and a Resident one's parked goroutine has its stack
// shrunk by Go's garbage collector; what hibernation adds is that the
// process then costs only its own small structs until a message arrives,
// at the price of allocating the buffers again for the next burst. Call
// it from the process's handler (a server's callback); the request lasts
// until the process is next idle, and messages already waiting are handled
// first. It does nothing for a function process.
func (p *Process) Hibernate() {
	if p.mode != modeHandler {
		return
	}
	p.mu.Lock()
	p.extraLocked().hibernate = true
	p.mu.Unlock()
}

// hibernateLocked drops the mailbox's buffers of an idle handler-mode
// process (Hibernate). p.mu must be held, and the caller must be the one
// that ran the process until now (it owns the receiver's buffer).
func (p *Process) hibernateLocked() {
	p.extra.hibernate = false
	p.rbuf, p.rhead = nil, 0
	p.queue = nil
}

// Handler returns the Handler of a handler-mode process, or nil for a
// function process. Behaviours built on the runtime use it to reach their
// own state from the Process their callbacks are given. It is safe from
// any goroutine. Calling the handler's HandleMessage from outside the
// process breaks the rule that a process handles one message at a time:
// only the runtime should.
func (p *Process) Handler() Handler { return p.handler }

// deliverDeferred appends msg to the mailbox like deliver, except that an
// idle handler-mode process without a goroutine of its own is not given
// one: it is marked as running, deliverDeferred returns true, and the
// caller must then get it handled (runHandler, or a Batch's workers). The
// first time it does so for a caller (*held is false) it counts a
// goroutine on the node's tracker before unlocking, so that Stop waits for
// the caller to start what handles the process, and sets *held: the caller
// then owns that count.
func (p *Process) deliverDeferred(msg any, held *bool) (idle bool) {
	p.mu.Lock()
	if p.limited && p.overflowedLocked() {
		return false
	}
	if p.mode != modeHandler || p.running || p.resident || p.dead.Load() {
		p.deliverLocked(msg)
		return false
	}
	p.delivered++
	p.queue = append(p.queue, msg)
	p.running = true
	if !*held {
		p.n.goroutines.add()
		*held = true
	}
	p.mu.Unlock()
	return true
}

// deliver appends msg to the mailbox and wakes the process, unless the
// mailbox has a limit and is full (see SetMailboxLimit).
func (p *Process) deliver(msg any) {
	p.mu.Lock()
	if p.limited && p.overflowedLocked() {
		return
	}
	p.deliverLocked(msg)
}

// wakeExit is handed to a waiting receiver when its process exits.
type wakeExit struct{}

func isWakeExit(m any) bool { _, ok := m.(wakeExit); return ok }

// deliverLocked appends msg with p.mu held, and unlocks it. It ignores the
// mailbox limit: the signals of links and monitors (Exit, Down) come this
// way directly; messages come through deliver or deliverDeferred.
//
// A function process waits in Receive only when its mailbox is empty, so a
// message for a waiting receiver is the next one it takes: it is handed
// over through the wake channel instead of the queue, and the receiver
// need not take the lock again to fetch it. Only the first sender to find
// the receiver waiting hands over (it clears waiting); the channel's buffer
// of one is then always free.
func (p *Process) deliverLocked(msg any) {
	if p.dead.Load() {
		p.mu.Unlock()
		return
	}
	p.delivered++
	if p.mode == modeFunc && p.waiting {
		p.waiting = false
		wake := p.wake
		p.mu.Unlock()
		wake <- msg // never blocks: see above
		return
	}
	p.queue = append(p.queue, msg)
	if p.mode == modeFunc {
		// The receiver is running: it finds msg in the queue.
	} else if !p.running {
		p.running = true
		p.startHandlingLocked()
		return
	}
	p.mu.Unlock()
}

// Self returns the process's PID.
func (p *Process) Self() PID { return PID{node: p.n.name, creation: p.n.creation, id: p.id} }

// Alive reports whether the process has not exited. It is safe from any
// goroutine and never blocks; a process killed by an exit signal is not
// alive from that moment on, even while its goroutine still runs.
func (p *Process) Alive() bool { return !p.dead.Load() }

// ExitReason returns the reason the process exited with, and whether it
// has exited; a live process returns nil and false. It is safe from any
// goroutine. It lets code that holds the process learn why it ended when
// a monitor came too late to tell (a monitor of a dead process reports
// ErrNoProc).
func (p *Process) ExitReason() (reason error, exited bool) {
	if !p.dead.Load() {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reason, true
}

// Node returns the node the process runs on.
func (p *Process) Node() *Node { return p.n }

// Context returns a context that is cancelled when the process exits. It
// is made on first use.
func (p *Process) Context() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.extraLocked()
	if x.ctx == nil {
		x.ctx, x.cancel = context.WithCancel(context.Background())
		if p.dead.Load() {
			x.cancel()
		}
	}
	return x.ctx
}

// Done returns a channel that is closed when the process has exited.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.doneLocked()
}

// doneLocked returns the channel closed when exit has finished, making it
// on first use (most processes are never waited for). p.mu must be held.
func (p *Process) doneLocked() chan struct{} {
	if p.exited { // asked for after the exit: rare, and no package state for it
		c := make(chan struct{})
		close(c)
		return c
	}
	x := p.extraLocked()
	if x.done == nil {
		x.done = make(chan struct{})
	}
	return x.done
}

// Receive returns the next message in the mailbox, waiting for one until
// ctx ends (it then returns ctx.Err()). If the process has been killed it
// returns *ExitedError with the exit reason; the function should then
// return. Only a function process (Spawn) may receive.
func (p *Process) Receive(ctx context.Context) (any, error) {
	return p.receive(ctx, nil)
}

// ReceiveFunc is a selective receive: it returns the oldest message for
// which match returns true, leaving the others in the mailbox in order.
// match runs on the calling goroutine and must not block. Errors are those
// of Receive.
func (p *Process) ReceiveFunc(ctx context.Context, match func(msg any) bool) (any, error) {
	return p.receive(ctx, match)
}

// ExitedError is returned by Receive when the process has been ended by an
// exit signal while its goroutine was still running.
type ExitedError struct{ Reason error }

// Error says the process exited, with its reason.
func (e *ExitedError) Error() string {
	if e.Reason == nil {
		return "gotp: process exited"
	}
	return "gotp: process exited: " + e.Reason.Error()
}

// Unwrap returns the exit reason.
func (e *ExitedError) Unwrap() error { return e.Reason }

func (p *Process) receive(ctx context.Context, match func(any) bool) (any, error) {
	if p.mode != modeFunc {
		return nil, ErrNotProcess
	}
	scanned := int(p.rhead)
	for {
		// A killed process must not go on taking messages it had already
		// moved out of its (now discarded) mailbox.
		if p.dead.Load() {
			return nil, p.exitedError()
		}
		if msg, ok := p.takeLocal(match, scanned); ok {
			return msg, nil
		}
		scanned = len(p.rbuf)
		p.mu.Lock()
		if p.dead.Load() {
			reason := p.reason
			p.mu.Unlock()
			return nil, &ExitedError{Reason: reason}
		}
		if len(p.queue) > 0 {
			if int(p.rhead) == len(p.rbuf) {
				p.rbuf, p.queue = p.queue, p.rbuf[:0]
				p.rhead, scanned = 0, 0
			} else {
				p.rbuf = append(p.rbuf, p.queue...)
				clear(p.queue)
				p.queue = p.queue[:0]
			}
			p.mu.Unlock()
			continue
		}
		if p.wake == nil { // made on the first wait: many processes never wait
			p.wake = make(chan any, 1)
		}
		p.waiting = true
		p.mu.Unlock()
		var msg any
		if done := ctx.Done(); done == nil {
			// A context that never ends (context.Background): a plain
			// channel receive parks and wakes faster than a select.
			msg = <-p.wake
		} else {
			select {
			case msg = <-p.wake:
			case <-done:
				p.mu.Lock()
				handing := !p.waiting // a sender (or exit) has begun a hand-off
				p.waiting = false
				p.mu.Unlock()
				if handing {
					// Take it, so that the channel is free for the next
					// wait; a message goes to the buffer, in order (the
					// queue holds only later ones).
					if m := <-p.wake; !isWakeExit(m) {
						p.rbuf = append(p.rbuf, m)
					}
				}
				return nil, ctx.Err()
			}
		}
		if isWakeExit(msg) || p.dead.Load() {
			continue // the loop returns *ExitedError
		}
		if match == nil {
			// The buffer held nothing (takeLocal found nothing), so msg is
			// the oldest message.
			p.handled.Add(1)
			return msg, nil
		}
		p.rbuf = append(p.rbuf, msg) // scanned next, from index scanned
	}
}

func (p *Process) exitedError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &ExitedError{Reason: p.reason}
}

// takeLocal takes a message from the receiver's buffer: the first one, or
// with match the first that matches at or after index from.
func (p *Process) takeLocal(match func(any) bool, from int) (any, bool) {
	if match == nil {
		if int(p.rhead) == len(p.rbuf) {
			return nil, false
		}
		msg := p.rbuf[p.rhead]
		p.rbuf[p.rhead] = nil
		p.rhead++
		if int(p.rhead) == len(p.rbuf) {
			p.rbuf, p.rhead = p.rbuf[:0], 0
		}
		p.handled.Add(1)
		return msg, true
	}
	from = max(from, int(p.rhead))
	for i := from; i < len(p.rbuf); i++ {
		if msg := p.rbuf[i]; match(msg) {
			p.removeLocal(i)
			p.handled.Add(1)
			return msg, true
		}
	}
	return nil, false
}

func (p *Process) removeLocal(i int) {
	copy(p.rbuf[i:], p.rbuf[i+1:])
	p.rbuf[len(p.rbuf)-1] = nil
	p.rbuf = p.rbuf[:len(p.rbuf)-1]
	if int(p.rhead) == len(p.rbuf) {
		p.rbuf, p.rhead = p.rbuf[:0], 0
	}
}

// Send sends msg to the process to, from this process. See Node.Send.
func (p *Process) Send(to PID, msg any) {
	// A process usually sends to the same peer many times in a row (a
	// reply, a stream, a fan-in), so it remembers the last local process
	// it found. A PID never names another process, and a dead process
	// stays dead (deliver drops the message), so a remembered process is
	// always the right one; the table lookup is skipped.
	if q := p.lastTo.Load(); q != nil && q.id == to.id && q.Self() == to {
		if q.dead.Load() {
			p.lastTo.Store(nil) // do not keep a dead process reachable
			return
		}
		q.deliver(msg)
		return
	}
	if q := p.n.lookup(to); q != nil {
		p.lastTo.Store(q)
		q.deliver(msg)
		return
	}
	p.n.send(p.Self(), to, msg)
}

// Spawn starts a process, as Node.Spawn.
func (p *Process) Spawn(fn func(p *Process) error, opts ...SpawnOption) (PID, error) {
	return p.n.Spawn(fn, opts...)
}

// SpawnLink starts a process linked to this one (Erlang's spawn_link).
func (p *Process) SpawnLink(fn func(p *Process) error, opts ...SpawnOption) (PID, error) {
	return p.n.Spawn(fn, append(opts, LinkTo(p.Self()))...)
}

// TrapExit sets whether exit signals reach this process as Exit messages
// instead of ending it, and returns the previous setting. ErrKill is never
// trapped.
func (p *Process) TrapExit(on bool) (was bool) {
	p.mu.Lock()
	was, p.trap = p.trap, on
	p.mu.Unlock()
	return was
}

// Exit sends an exit signal with reason from this process to pid; see
// Node.Exit for its effect. Sent to Self with a non-nil reason, it ends this
// process (unless it traps exits, when an Exit message arrives instead).
func (p *Process) Exit(pid PID, reason error) { p.n.exitSignal(p.Self(), pid, reason, false) }

// Register registers this process under a local name. See Node.Register.
func (p *Process) Register(name string) error { return p.n.register(name, p) }

// SetValue stores a value in the process dictionary; behaviours use it to
// attach what introspection shows. It is safe from any goroutine.
func (p *Process) SetValue(key, value any) {
	p.mu.Lock()
	x := p.extraLocked()
	if x.values == nil {
		x.values = make(map[any]any)
	}
	x.values[key] = value
	p.mu.Unlock()
}

// SetLabel describes this process for people: the observer shows it beside
// the PID, and a crash report carries it (attribute label), as Erlang's
// proc_lib:set_label. A connection process, say, is labelled with its
// user. Unlike Behaviour, which names what kind of process it is and is
// used to group processes (in metrics, for example), a label may be
// different for every process. It is safe from any goroutine; an empty
// label removes it.
func (p *Process) SetLabel(label string) {
	p.mu.Lock()
	if p.extra != nil || label != "" {
		p.extraLocked().label = label
	}
	p.mu.Unlock()
}

// Value returns a value from the process dictionary. It is safe from any
// goroutine.
func (p *Process) Value(key any) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.extra == nil {
		return nil
	}
	return p.extra.values[key]
}

// waitDead waits until the process has exited or ctx ends.
func (p *Process) waitDead(ctx context.Context) error {
	select {
	case <-p.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
