package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
)

// Behaviour is the callback module of a server: the methods the server
// process runs. Embed Defaults to implement only what you need.
//
// Every callback runs as the server process, one message at a time, so the
// behaviour's fields need no lock as long as only the callbacks touch them.
// A non-nil error returned by any callback stops the server with that error
// as its exit reason (after Terminate). Errors meant for a caller are
// replies: a reply that is an error value is what Call returns as its
// error, and the server goes on.
type Behaviour interface {
	// Init runs before any message is handled, as the server process
	// (p.Self, p.Link and p.TrapExit work), with Start's ctx: on Start's
	// goroutine, or, when ctx has a deadline, on a goroutine of its own
	// that Start waits for until the deadline (see ErrStartTimeout). An
	// error fails Start with it; ErrIgnore makes Start return ErrIgnore and
	// the process end normally. Init may ask for a timeout (SetTimeout).
	Init(ctx context.Context, p *gotp.Process) error
	// HandleCall answers a Call. Return the reply, or NoReply and answer
	// later with Reply(from, ...). A non-nil error stops the server; a
	// reply returned with it is sent first.
	HandleCall(p *gotp.Process, from From, req any) (reply any, err error)
	// HandleCast handles a Cast.
	HandleCast(p *gotp.Process, msg any) error
	// HandleInfo handles any other message: plain sends, Down and (when
	// the server traps exits) Exit messages from processes other than its
	// parent.
	HandleInfo(p *gotp.Process, msg any) error
	// Terminate runs when the server stops by its own decision, by Stop,
	// or by an exit signal from its parent (or the node) while it traps
	// exits. It is not called when the server is killed, or when an exit
	// signal ends it while it does not trap exits. If it panics, the panic
	// (a *gotp.PanicError) is the server's exit reason instead of reason.
	Terminate(p *gotp.Process, reason error)
}

// Defaults implements every Behaviour method with OTP's defaults; embed it
// in a behaviour and override what you need. HandleCall replies
// ErrUnhandled; HandleCast and HandleInfo log the unexpected message at
// warning level and go on.
type Defaults struct{}

// Init does nothing.
func (Defaults) Init(context.Context, *gotp.Process) error { return nil }

// HandleCall replies ErrUnhandled.
func (Defaults) HandleCall(p *gotp.Process, _ From, req any) (any, error) {
	return fmt.Errorf("%w: call %T", ErrUnhandled, req), nil
}

// HandleCast logs the message and ignores it.
func (Defaults) HandleCast(p *gotp.Process, msg any) error {
	p.Node().Logger().Warn("server: unhandled cast", "pid", p.Self(), "msg", fmt.Sprintf("%T", msg))
	return nil
}

// HandleInfo logs the message and ignores it.
func (Defaults) HandleInfo(p *gotp.Process, msg any) error {
	p.Node().Logger().Warn("server: unhandled message", "pid", p.Self(), "msg", fmt.Sprintf("%T", msg))
	return nil
}

// Terminate does nothing.
func (Defaults) Terminate(*gotp.Process, error) {}

var (
	// ErrUnhandled is the reply of Defaults.HandleCall.
	ErrUnhandled = errors.New("server: unhandled call")
	// ErrIgnore, returned by Init, makes Start return it without starting
	// the server (supervisors then keep the child as not running).
	ErrIgnore = errors.New("server: ignore")
	// ErrAlreadyStarted matches *AlreadyStartedError with errors.Is.
	ErrAlreadyStarted = errors.New("server: already started")
)

// AlreadyStartedError is returned by Start when the name is held by a
// running process (Erlang's already_started).
type AlreadyStartedError struct{ PID gotp.PID }

// Error names the running server.
func (e *AlreadyStartedError) Error() string {
	return fmt.Sprintf("server: already started as %v", e.PID)
}

// Is makes errors.Is(err, ErrAlreadyStarted) true.
func (e *AlreadyStartedError) Is(target error) bool { return target == ErrAlreadyStarted }

// Option configures Start. Options are plain values (made by Named,
// WithVia, TrapExit, LinkTo, Dedicated and InlineCalls), so passing them
// allocates nothing.
type Option struct {
	kind optionKind
	pid  gotp.PID
	name string
	via  gotp.Via
	on   bool
}

type optionKind uint8

const (
	optNone optionKind = iota
	optName
	optVia
	optTrap
	optLink
	optDedicated
	optInline
)

type config struct {
	name   string
	via    gotp.Via
	link   gotp.PID
	trap   bool
	parent gotp.PID
	// dedicated runs the server on a goroutine of its own (see Dedicated).
	dedicated bool
	// inline lets calls run on the caller's goroutine (see InlineCalls).
	inline bool
}

func (c *config) apply(o *Option) {
	switch o.kind {
	case optName:
		c.name = o.name
	case optVia:
		c.via = o.via
	case optTrap:
		c.trap = o.on
	case optLink:
		c.link, c.parent = o.pid, o.pid
	case optDedicated:
		c.dedicated = o.on
	case optInline:
		c.inline = o.on
	}
}

// Named registers the server under a local name before Init runs.
func Named(name string) Option { return Option{kind: optName, name: name} }

// WithVia registers the server under a name held by a name service (for
// example a unique registry) before Init runs.
func WithVia(v gotp.Via) Option { return Option{kind: optVia, via: v} }

// TrapExit makes the server trap exits from its start (Init may also call
// p.TrapExit).
func TrapExit(on bool) Option { return Option{kind: optTrap, on: on} }

// LinkTo links the server to pid, atomically with its start, and makes pid
// its parent: an exit signal from the parent stops a server that traps
// exits, with Terminate.
func LinkTo(pid gotp.PID) Option { return Option{kind: optLink, pid: pid} }

// Dedicated runs the server on a goroutine of its own for its whole life
// (gotp.Resident) instead of a goroutine started for each burst of
// messages. It suits a busy server whose callbacks run deep, such as a
// supervisor starting children: the goroutine is woken rather than created
// for each message and keeps its grown stack. An idle dedicated server
// holds a parked goroutine (a few KB) instead of none. Init runs on
// Start's goroutine, as without it.
func Dedicated() Option { return Option{kind: optDedicated, on: true} }

// InlineCalls lets a Call find the server idle (nothing in its mailbox,
// nothing being handled) and then run HandleCall on the caller's goroutine,
// as the server process, instead of waking the server and being woken by
// its reply: two goroutine switches fewer. The server's semantics do not
// change (one message at a time, in order); what changes is that such a
// call waits for HandleCall however long it runs, as an OTP call with an
// infinity timeout does, rather than ending at its deadline. It suits a
// server whose calls are short or must run to completion anyway, such as a
// supervisor. It combines with Dedicated.
func InlineCalls() Option { return Option{kind: optInline, on: true} }

// Start starts a server running b on node n and returns when Init has
// returned. It fails with Init's error, with *AlreadyStartedError when the
// name is taken, with gotp.ErrNodeStopped, or with ErrStartTimeout when
// ctx has a deadline and Init has not returned by then (see Init). The
// server holds no goroutine while its mailbox is empty.
func Start(ctx context.Context, n *gotp.Node, b Behaviour, opts ...Option) (gotp.PID, error) {
	var c config
	for i := range opts {
		c.apply(&opts[i])
	}
	return start(ctx, n, b, &c, nil)
}

// ErrStartTimeout is the error of Start and StartLink when ctx's deadline
// passed before Init returned (OTP's {error, timeout}); it comes wrapped
// with ctx.Err(). The half-started server has been killed (its parent,
// for StartLink, unlinked first so that it gets no exit signal), and a
// name it took is free again. Init itself may still be running on a
// goroutine of its own: Go cannot stop it, so an Init that ignores its
// context keeps that goroutine until it returns.
var ErrStartTimeout = errors.New("server: start timed out")

// start starts a server; parent, if not nil, is the calling process that
// waits for Init (StartLink's parent): while it waits it is a link of the
// wait-for graph of calls (see cycle.go).
func start(ctx context.Context, n *gotp.Node, b Behaviour, c *config, parent *gotp.Process) (gotp.PID, error) {
	g := &gen{b: b, parent: c.parent}
	var buf [6]gotp.SpawnOption
	sopts := append(buf[:0], gotp.Behaviour(behaviourLabel(b)), gotp.TrapExit(c.trap))
	if c.name != "" {
		sopts = append(sopts, gotp.Named(c.name))
	}
	if !c.link.IsZero() {
		sopts = append(sopts, gotp.LinkTo(c.link))
	}
	if c.inline {
		sopts = append(sopts, gotp.AllowInline())
	}
	if c.dedicated {
		sopts = append(sopts, gotp.Resident())
	}
	var waiting *edge // the parent's wait for Init
	if parent != nil {
		if pg, ok := parent.Handler().(*gen); ok {
			waiting = &edge{target: g}
			px := pg.extra()
			prev := px.waiting.Swap(waiting)
			defer px.waiting.Store(prev)
		}
	}
	st := starting{ctx: ctx, n: n, b: b, g: g, via: c.via, link: c.link, waiting: waiting}
	var pid gotp.PID
	var err error
	if _, ok := ctx.Deadline(); ok {
		// On the heap: the bounded start's goroutine may outlive this
		// call. st stays on the stack in the plain start.
		hp := new(starting)
		*hp = st
		pid, err = startBounded(ctx, n, g, hp.init, c.link, sopts)
	} else {
		pid, err = n.SpawnHandler(g, st.init, sopts...)
	}
	if err != nil {
		if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok && e.Name == c.name {
			return gotp.PID{}, &AlreadyStartedError{PID: e.Owner}
		}
		return gotp.PID{}, err
	}
	return pid, nil
}

// starting is what a server's start needs while Init runs; its init is
// the init function of the server's process.
type starting struct {
	ctx     context.Context
	n       *gotp.Node
	b       Behaviour
	g       *gen
	via     gotp.Via
	link    gotp.PID
	waiting *edge // the parent's wait for Init, if the parent is a server
}

func (st *starting) init(p *gotp.Process) error {
	st.g.proc = p
	if st.via != nil {
		if err := st.via.RegisterName(st.n, p.Self()); err != nil {
			if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok {
				return &AlreadyStartedError{PID: e.Owner}
			}
			return err
		}
	}
	err := st.b.Init(st.ctx, p)
	if st.waiting != nil {
		st.waiting.over.Store(true) // before any message: the parent waits no more
	}
	if errors.Is(err, ErrIgnore) && !st.link.IsZero() {
		// OTP's ignore ends the process normally: the parent that
		// started it linked must not get an exit signal for it.
		p.Unlink(st.link)
	}
	if err == nil {
		st.g.afterCallback(p)
	}
	return err
}

// startBounded runs the spawn and Init on a goroutine of their own and
// waits for them until ctx ends; then it kills the half-started server
// (unlinked from link first) and returns ErrStartTimeout. Init that
// returns in time costs a goroutine more than an unbounded start.
func startBounded(ctx context.Context, n *gotp.Node, g *gen, init func(p *gotp.Process) error, link gotp.PID, sopts []gotp.SpawnOption) (gotp.PID, error) {
	if err := ctx.Err(); err != nil {
		return gotp.PID{}, fmt.Errorf("%w: %w", ErrStartTimeout, err)
	}
	type result struct {
		pid gotp.PID
		err error
	}
	var mu sync.Mutex
	var proc *gotp.Process // the new process, once Init runs
	abandoned := false     // the caller gave up: kill what starts
	kill := func(p *gotp.Process) {
		if !link.IsZero() {
			// Unlink only touches the two processes' link sets under
			// their locks, so it is safe here although the process's
			// own goroutine may still be in Init.
			p.Unlink(link)
		}
		n.Exit(p.Self(), gotp.ErrKill)
	}
	opts := slices.Clone(sopts) // sopts is on the caller's stack: it must not escape
	res := make(chan result, 1)
	go func() {
		pid, err := n.SpawnHandler(g, func(p *gotp.Process) error {
			mu.Lock()
			proc = p
			gone := abandoned
			mu.Unlock()
			if gone { // given up before Init could run: do not run it
				if !link.IsZero() {
					p.Unlink(link)
				}
				return fmt.Errorf("%w: %w", ErrStartTimeout, ctx.Err())
			}
			return init(p)
		}, opts...)
		mu.Lock()
		gone, p := abandoned, proc
		mu.Unlock()
		if gone && err == nil {
			kill(p)
		}
		res <- result{pid, err}
	}()
	select {
	case r := <-res:
		return r.pid, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	abandoned = true
	p := proc
	mu.Unlock()
	if p != nil {
		kill(p)
	}
	return gotp.PID{}, fmt.Errorf("%w: %w", ErrStartTimeout, ctx.Err())
}

// StartLink starts a server linked to the calling process parent, which
// becomes its parent (see LinkTo).
func StartLink(ctx context.Context, parent *gotp.Process, b Behaviour, opts ...Option) (gotp.PID, error) {
	var c config
	for i := range opts {
		c.apply(&opts[i])
	}
	c.link, c.parent = parent.Self(), parent.Self()
	return start(ctx, parent.Node(), b, &c, parent)
}

// labelPrefix starts the gotp.Behaviour label of every server.
const labelPrefix = "server "

func behaviourLabel(b Behaviour) string {
	t := reflect.TypeOf(b)
	return labelPrefix + t.String()
}

// gen is the gotp.Handler that runs a Behaviour. It is kept small (an
// idle server's memory is one of gotp's figures): what few servers need
// is in a genExtra, made on first use.
type gen struct {
	b      Behaviour
	parent gotp.PID
	proc   *gotp.Process            // set before Init runs
	x      atomic.Pointer[genExtra] // nil until the server times out, calls a server or starts one linked
}

// genExtra is the state of a server that has asked for a timeout, called
// another server or started one linked.
type genExtra struct {
	// waiting is what the server waits for while one of its callbacks is
	// blocked in a Call (or in the start of a server it links to): an edge
	// of the wait-for graph that call cycles are found in (cycle.go).
	waiting atomic.Pointer[edge]

	// The timeout a callback asked for (SetTimeout), and the one running.
	// Only the server touches them.
	timeoutAsk   time.Duration
	timeoutAsked bool
	timerOn      bool
	timerSeq     uint64 // the running timeout's number; 0 until the first
	timer        gotp.Ref
}

// extra returns g's genExtra, making it if needed. Only the server itself
// (its callbacks, and Start for its parent) calls it, so there is one
// writer; other goroutines only load the pointer.
func (g *gen) extra() *genExtra {
	if x := g.x.Load(); x != nil {
		return x
	}
	x := new(genExtra)
	g.x.Store(x)
	return x
}

// Request is the message of a call from another node: Caller takes the
// reply (a ReplyMessage with Ref), Body is the request HandleCall sees. A
// local Call uses a faster private form; this one exists so that a cluster
// transport can carry calls.
type Request struct {
	Caller gotp.PID
	Ref    gotp.Ref
	Body   any
}

// CastMessage is the message Cast sends: the server hands Body to
// HandleCast. Sending one directly is the same as calling Cast.
type CastMessage struct{ Body any }

// StopRequest is the message Stop sends: the server stops with Reason
// (nil is normal), running Terminate.
type StopRequest struct{ Reason error }

// genMessage reports whether msg is one that handleGen handles, not
// (always) the behaviour's HandleInfo. Its types are handleGen's cases:
// a case added there must be added here.
func genMessage(msg any) bool {
	switch msg.(type) {
	case *call, Request, CastMessage, StopRequest, stateQuery, sysGetState, sysReplaceState, gotp.Exit:
		return true
	}
	return false
}

// handleGen handles a message of genMessage's: a call, a cast, a stop, a
// system message, or an exit signal, which stops the server if it comes
// from its parent (otherwise HandleInfo gets it). For a call it sets
// *reply, *from and *replying. Its cases are genMessage's types: a case
// added here must be added there.
//
//go:noinline
func (g *gen) handleGen(p *gotp.Process, msg any, reply *any, from *From, replying *bool) (err error) {
	switch m := msg.(type) {
	case *call:
		*from, *replying = m.from, true
		if m.inline { // on the caller's goroutine: see call1
			m.proc = p
		}
		*reply, err = g.b.HandleCall(p, m.from, m.req)
		if *reply == NoReply {
			m.deferred.Store(true) // the caller now waits for Reply, from anywhere: see cycle.go
		}
		return err
	case Request:
		*from, *replying = From{n: p.Node(), pid: m.Caller, ref: m.Ref}, true
		*reply, err = g.b.HandleCall(p, *from, m.Body)
		return err
	case CastMessage:
		return g.b.HandleCast(p, m.Body)
	case StopRequest:
		return stopping{m.Reason}
	case stateQuery:
		m.a.set(g.formatState())
		return nil
	case sysGetState:
		m.a.set(stateReply{g.b})
		return nil
	case sysReplaceState:
		m.a.set(g.replaceState(m.fn))
		return nil
	case gotp.Exit:
		if m.From == g.parent || m.From.IsZero() {
			return stopping{m.Reason}
		}
	}
	return g.b.HandleInfo(p, msg)
}

func (g *gen) HandleMessage(p *gotp.Process, msg any) (stop bool, reason error) {
	if x := g.x.Load(); x != nil && x.timerSeq != 0 { // it has used timeouts: see timeout.go
		var ok bool
		if msg, ok = x.timeoutFilter(p, msg); !ok {
			return false, nil
		}
	}
	var reply any
	var from From
	var replying bool
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &gotp.PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		if !genMessage(msg) {
			// A plain message goes to HandleInfo from a small frame: a
			// process run inline runs its handler on the stack of the
			// goroutine that sent it (see gotp.Node.RunInline), which the
			// locals of every case of handleGen would take a share of.
			return g.b.HandleInfo(p, msg)
		}
		return g.handleGen(p, msg, &reply, &from, &replying)
	}()
	if replying && reply != NoReply && (err == nil || reply != nil) {
		from.reply(reply)
	}
	if err == nil {
		g.afterCallback(p)
		return false, nil
	}
	if s, ok := errors.AsType[stopping](err); ok {
		err = s.reason
	}
	g.cancelTimeout(p)
	if crash := g.terminate(p, err); crash != nil {
		err = crash
	}
	return true, err
}

// StopReason returns an error that, returned by a callback, stops the
// server with reason as its exit reason, including nil (a normal exit):
// return server.StopReason(nil) is how a server ends normally by its own
// decision (Erlang's {stop, normal, State}). Terminate runs with reason.
func StopReason(reason error) error { return stopping{reason} }

// stopping carries a requested stop reason (which may be nil) through the
// callback error path.
type stopping struct{ reason error }

func (s stopping) Error() string { return fmt.Sprint("stop: ", s.reason) }

// terminate runs Terminate and returns its panic, if it panicked, as a
// *gotp.PanicError: as in OTP, a crash in terminate replaces the reason
// the server was stopping with, and is the exit reason its links and
// monitors see.
func (g *gen) terminate(p *gotp.Process, reason error) (crash error) {
	defer func() {
		if v := recover(); v != nil {
			crash = &gotp.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	g.b.Terminate(p, reason)
	return nil
}
