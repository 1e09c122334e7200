package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"

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
	// Init runs before any message is handled, on the goroutine of Start
	// (ctx is Start's), as the server process: p.Self, p.Link and
	// p.TrapExit work. An error fails Start with it; ErrIgnore makes Start
	// return ErrIgnore and the process end normally.
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
	// signal ends it while it does not trap exits.
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
// name is taken, or with gotp.ErrNodeStopped. The server holds no goroutine
// while its mailbox is empty.
func Start(ctx context.Context, n *gotp.Node, b Behaviour, opts ...Option) (gotp.PID, error) {
	var c config
	for i := range opts {
		c.apply(&opts[i])
	}
	return start(ctx, n, b, &c)
}

func start(ctx context.Context, n *gotp.Node, b Behaviour, c *config) (gotp.PID, error) {
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
	init := func(p *gotp.Process) error {
		if c.via != nil {
			if err := c.via.RegisterName(n, p.Self()); err != nil {
				if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok {
					return &AlreadyStartedError{PID: e.Owner}
				}
				return err
			}
		}
		err := b.Init(ctx, p)
		if errors.Is(err, ErrIgnore) && !c.link.IsZero() {
			// OTP's ignore ends the process normally: the parent that
			// started it linked must not get an exit signal for it.
			p.Unlink(c.link)
		}
		return err
	}
	if c.dedicated {
		sopts = append(sopts, gotp.Resident())
	}
	pid, err := n.SpawnHandler(g, init, sopts...)
	if err != nil {
		if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok && e.Name == c.name {
			return gotp.PID{}, &AlreadyStartedError{PID: e.Owner}
		}
		return gotp.PID{}, err
	}
	return pid, nil
}

// StartLink starts a server linked to the calling process parent, which
// becomes its parent (see LinkTo).
func StartLink(ctx context.Context, parent *gotp.Process, b Behaviour, opts ...Option) (gotp.PID, error) {
	var c config
	for i := range opts {
		c.apply(&opts[i])
	}
	c.link, c.parent = parent.Self(), parent.Self()
	return start(ctx, parent.Node(), b, &c)
}

// labelPrefix starts the gotp.Behaviour label of every server.
const labelPrefix = "server "

func behaviourLabel(b Behaviour) string {
	t := reflect.TypeOf(b)
	return labelPrefix + t.String()
}

// gen is the gotp.Handler that runs a Behaviour.
type gen struct {
	b      Behaviour
	parent gotp.PID
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

func (g *gen) HandleMessage(p *gotp.Process, msg any) (stop bool, reason error) {
	var reply any
	var from From
	var replying bool
	err := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &gotp.PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		switch m := msg.(type) {
		case *call:
			from, replying = m.from, true
			if m.inline { // on the caller's goroutine: see call1
				m.proc = p
			}
			reply, err = g.b.HandleCall(p, m.from, m.req)
			return err
		case Request:
			from, replying = From{n: p.Node(), pid: m.Caller, ref: m.Ref}, true
			reply, err = g.b.HandleCall(p, from, m.Body)
			return err
		case CastMessage:
			return g.b.HandleCast(p, m.Body)
		case StopRequest:
			return stopping{m.Reason}
		case stateQuery:
			m.a.set(g.formatState())
			return nil
		case gotp.Exit:
			if m.From == g.parent || m.From.IsZero() {
				return stopping{m.Reason}
			}
		}
		return g.b.HandleInfo(p, msg)
	}()
	if replying && reply != NoReply && (err == nil || reply != nil) {
		from.reply(reply)
	}
	if err == nil {
		return false, nil
	}
	if s, ok := errors.AsType[stopping](err); ok {
		err = s.reason
	}
	g.terminate(p, err)
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

func (g *gen) terminate(p *gotp.Process, reason error) {
	defer func() {
		if v := recover(); v != nil {
			p.Node().Logger().Error("server: terminate panicked", "pid", p.Self(), "panic", v)
		}
	}()
	g.b.Terminate(p, reason)
}
