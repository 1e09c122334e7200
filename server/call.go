package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
)

// DefaultCallTimeout bounds a Call whose context has no deadline, as
// Erlang's default of five seconds does.
const DefaultCallTimeout = 5 * time.Second

// NoReply, returned by HandleCall as its reply, means the server will
// answer later with Reply.
var NoReply any = noReply{}

type noReply struct{}

// From names the caller of a Call: keep it to answer later with Reply.
type From struct {
	c   *call
	n   *gotp.Node
	pid gotp.PID // for callers on another node: the process that takes the reply
	ref gotp.Ref
}

// Ref returns the reference of the call, unique on the caller's node.
func (f From) Ref() gotp.Ref { return f.ref }

// call is one local call in flight. The pointer itself is the request
// message, so a local call boxes nothing.
type call struct {
	req  any
	from From
	// inline is set while the caller tries to run HandleCall itself
	// (InlineCalls); proc is then set by the server as it handles the
	// call, so that the caller, whose monitor comes after HandleCall, can
	// still learn the server's exit reason (see call1).
	inline bool
	// deferred is set by the server when HandleCall returned NoReply: the
	// answer may then come from any goroutine (see cycle.go).
	deferred atomic.Bool
	proc     *gotp.Process
	answer
}

// answer is where a call's answer (the reply, or a died) arrives. The
// first one is kept and later ones are dropped; a caller that waits is
// woken by closing wait, which only a waiting caller makes: a call
// answered inline (see InlineCalls) makes no channel at all.
type answer struct {
	mu       sync.Mutex // guards the fields below
	answered bool
	value    any
	wait     chan struct{}
}

// set records the answer unless there is one, and wakes the caller.
func (a *answer) set(v any) {
	a.mu.Lock()
	if a.answered {
		a.mu.Unlock()
		return
	}
	a.answered, a.value = true, v
	w := a.wait
	a.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// result returns the answer, if there is one yet.
func (a *answer) result() (any, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.value, a.answered
}

// done returns a channel closed once there is an answer.
func (a *answer) done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wait == nil {
		a.wait = make(chan struct{})
		if a.answered {
			close(a.wait)
		}
	}
	return a.wait
}

// await waits until there is an answer, ctx ends or timeout fires, and
// returns the answer as Call returns it: a died is the server's end.
func (a *answer) await(ctx context.Context, pid gotp.PID, timeout <-chan time.Time) (any, error) {
	select {
	case <-a.done():
	case <-ctx.Done():
		return nil, &CallError{Server: pid, Reason: ctx.Err()}
	case <-timeout:
		return nil, &CallError{Server: pid, Reason: context.DeadlineExceeded}
	}
	v, _ := a.result()
	return outcome(pid, v)
}

// outcome is an answer as Call returns it: a died is the server's end.
func outcome(pid gotp.PID, v any) (any, error) {
	if d, ok := v.(died); ok {
		return nil, &CallError{Server: pid, Reason: reasonOrNoProc(d.reason)}
	}
	return v, nil
}

// died is a call's answer when the server exits before replying.
type died struct{ reason error }

// ReplyMessage is how a reply reaches a caller on another node: sent to
// the process that waits for it.
type ReplyMessage struct {
	Ref   gotp.Ref
	Value any
}

// Reply answers a call whose HandleCall returned NoReply. It may be called
// from any goroutine, at most once per call; a reply to a caller that has
// given up is dropped.
func Reply(from From, value any) { from.reply(value) }

func (f From) reply(v any) {
	if f.c != nil {
		f.c.set(v)
		return
	}
	if f.n != nil && !f.pid.IsZero() {
		f.n.Send(f.pid, ReplyMessage{Ref: f.ref, Value: v})
	}
}

// CallError is the error of a Call that got no reply: Reason is
// gotp.ErrNoProc for a server that is not running, the server's exit
// reason when it died during the call, or the context's error when the
// deadline passed first.
type CallError struct {
	Server gotp.PID
	Reason error
}

// Error names the server and the reason the call failed.
func (e *CallError) Error() string {
	return fmt.Sprintf("server: call to %v: %v", e.Server, e.Reason)
}

// Unwrap returns Reason, so errors.Is(err, gotp.ErrNoProc) and
// errors.Is(err, context.DeadlineExceeded) work.
func (e *CallError) Unwrap() error { return e.Reason }

// ReplyTypeError is returned by Call when the reply is not of the type the
// caller asked for.
type ReplyTypeError struct {
	Reply any
	Want  string
}

// Error names the reply's type and the type wanted.
func (e *ReplyTypeError) Error() string {
	return fmt.Sprintf("server: reply %T is not %s", e.Reply, e.Want)
}

// Caller is who makes a Call: the calling process, or a node.
type Caller interface{ *gotp.Node | *gotp.Process }

// Call sends req to the server to and waits for its reply, which it returns
// as an R. c is the caller: inside a process (a server's callback, for
// example) pass the process itself, p, so that the call knows who waits
// for it (see below); from any other goroutine pass the node. The wait ends
// at ctx's deadline, or after DefaultCallTimeout if ctx has none. It fails
// with *CallError when the server is not running, dies during the call, or
// does not answer in time; with the reply itself when the reply is an error
// value; and with *ReplyTypeError when the reply is neither an R nor an
// error. A reply that comes after Call has returned is dropped: it never
// reaches the caller's mailbox. Call may be used from any goroutine.
//
// A call made by a process that would wait for itself fails at once
// instead of at its deadline: a process calling itself, with ErrCallingSelf
// (OTP exits with calling_self), and a server whose call closes a cycle of
// servers each waiting for the next (A calls B while B calls A, directly
// or through any chain of local servers, of inline calls and of servers
// waiting for the Init of a server they start), with a *CallCycleError
// naming the cycle. Both come inside the *CallError, for errors.Is with
// ErrCallingSelf and ErrCallCycle. See the package documentation for what
// the detection sees. A call whose caller is a node never takes part in
// it, and costs nothing for it.
func Call[R any, C Caller](ctx context.Context, c C, to gotp.Dest, req any) (R, error) {
	var zero R
	var reply any
	var err error
	switch c := any(c).(type) {
	case *gotp.Process:
		reply, err = call1(ctx, c.Node(), c, to, req)
	case *gotp.Node:
		reply, err = call1(ctx, c, nil, to, req)
	}
	if err != nil {
		return zero, err
	}
	if e, ok := reply.(error); ok {
		return zero, e
	}
	if r, ok := reply.(R); ok {
		return r, nil
	}
	if reply == nil {
		return zero, nil
	}
	return zero, &ReplyTypeError{Reply: reply, Want: fmt.Sprintf("%T", (*R)(nil))[1:]}
}

// call1 makes a call on node n; p is the calling process, or nil for a
// call made with the node. A call by a process to itself fails at once; a
// call by a server to a local server takes part in the detection of call
// cycles (see cycle.go). A call with the node runs none of that. A call
// to another node goes to the node's transport when it is a RemoteCaller.
func call1(ctx context.Context, n *gotp.Node, p *gotp.Process, to gotp.Dest, req any) (any, error) {
	var pid gotp.PID
	ok := false
	switch d := to.(type) {
	case gotp.PID:
		pid, ok = d, !d.IsZero()
	case RemoteDest:
		if d.DestNode() != n.Name() {
			if rc, isRC := n.Transport().(RemoteCaller); isRC {
				return callVia(ctx, rc, gotp.PID{}, to, req)
			}
		}
		pid, ok = d.Resolve(n)
	default:
		pid, ok = to.Resolve(n)
	}
	if !ok {
		return nil, &CallError{Reason: gotp.ErrNoProc}
	}
	local := pid.Node() == n.Name() && pid.Creation() == n.Creation()
	if !local {
		if rc, isRC := n.Transport().(RemoteCaller); isRC {
			return callVia(ctx, rc, pid, pid, req)
		}
	}
	var me *gen // the calling server, for a tracked call
	if p != nil {
		if pid == p.Self() {
			return nil, &CallError{Server: pid, Reason: ErrCallingSelf}
		}
		if local {
			me, _ = p.Handler().(*gen)
		}
	}
	var c *call
	ran := false // HandleCall has run: wait for a deferred reply
	if local {
		if me == nil {
			c = &call{req: req, inline: true}
		} else {
			tc := &trackedCall{call: call{req: req, inline: true}} // one allocation for both
			c = &tc.call
			tc.edge.call = c
			x, prev, err := me.await(n, pid, &tc.edge)
			defer x.waiting.Store(prev)
			if err != nil {
				return nil, &CallError{Server: pid, Reason: err}
			}
		}
		c.from = From{c: c, n: n, ref: n.MakeRef()}
		if ran = n.RunInline(pid, c); ran {
			// HandleCall ran here (see InlineCalls). Unless it deferred
			// its reply, the reply (or the server's end) is waiting.
			if v, ok := c.result(); ok {
				return outcome(pid, v)
			}
		}
	}
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(DefaultCallTimeout)
		defer t.Stop()
		timeout = t.C
	}
	if !local {
		return callRemote(ctx, n, pid, req, timeout)
	}
	// A call that ran inline is monitored only now, after HandleCall: if
	// the server has exited meanwhile the monitor says ErrNoProc, and the
	// reason is asked of the process itself.
	mon := n.MonitorFunc(pid, func(d gotp.Down) {
		reason := d.Reason
		if c.proc != nil && reason == gotp.ErrNoProc {
			if r, ok := c.proc.ExitReason(); ok {
				reason = r
			}
		}
		c.set(died{reason})
	})
	if !ran {
		c.inline = false
		n.Send(pid, c)
	}
	v, err := c.await(ctx, pid, timeout)
	n.Demonitor(mon, pid)
	return v, err
}

// RemoteCaller is implemented by a cluster transport (see
// gotp.Node.Transport) that carries calls to servers on other nodes
// itself: the cluster package's transport sends the request and an
// implied monitor as one signal, and the server's node drops the monitor
// as it sends the reply, so a call costs one signal each way and no
// process on the caller's node. Without one, Call uses a call proxy (see
// callRemote).
type RemoteCaller interface {
	// CallRemote sends req to the server to (a PID of another node, or a
	// RemoteDest) and waits for its answer until ctx ends, or for timeout
	// when ctx has no deadline. It returns the reply; or down true and
	// the reason the server is gone (its exit reason, nil for a normal
	// exit, gotp.ErrNoProc when it was not running, gotp.ErrNoConnection
	// when its node is not connected or was lost); or down false and the
	// context's error. It must be safe for concurrent use.
	CallRemote(ctx context.Context, to gotp.Dest, req any, timeout time.Duration) (reply any, down bool, reason error)
}

// A RemoteDest names a process that only its own node can resolve, such
// as a name registered on another node (Erlang's {Name, Node}; the cluster
// package's Remote is one). Call hands it to the node's RemoteCaller when
// DestNode is another node; its Resolve is what every other use of it
// (Cast, Stop, Node.SendTo) does.
type RemoteDest interface {
	gotp.Dest
	// DestNode returns the name of the node that resolves the
	// destination.
	DestNode() string
}

// callVia makes a call through a RemoteCaller; pid is the server when it
// is known (to a PID), for the CallError.
func callVia(ctx context.Context, rc RemoteCaller, pid gotp.PID, to gotp.Dest, req any) (any, error) {
	v, down, reason := rc.CallRemote(ctx, to, req, DefaultCallTimeout)
	if down {
		return nil, &CallError{Server: pid, Reason: reasonOrNoProc(reason)}
	}
	if reason != nil {
		return nil, &CallError{Server: pid, Reason: reason}
	}
	return v, nil
}

// callRemote calls a server on another node through a transport that is
// not a RemoteCaller. A handler process on this node (the "call proxy")
// monitors the server and takes the reply, sent
// as a ReplyMessage: since both reach its mailbox in the order the
// server's node sent them, a reply sent just before the server exits is
// never mistaken for its death. The request travels as a Request, which a
// cluster codec can encode.
func callRemote(ctx context.Context, n *gotp.Node, pid gotp.PID, req any, timeout <-chan time.Time) (any, error) {
	var a answer
	var mon gotp.Ref
	proxy, err := n.SpawnHandler(gotp.HandlerFunc(func(_ *gotp.Process, msg any) (bool, error) {
		var v any
		switch m := msg.(type) {
		case ReplyMessage:
			if m.Ref != mon {
				return false, nil
			}
			v = m.Value
		case gotp.Down:
			if m.Ref != mon {
				return false, nil
			}
			v = died{m.Reason}
		default:
			return false, nil
		}
		a.set(v)
		return true, nil
	}), func(p *gotp.Process) error {
		mon = p.Monitor(pid)
		return nil
	}, gotp.Behaviour("server call proxy"))
	if err != nil {
		return nil, &CallError{Server: pid, Reason: err}
	}
	n.Send(pid, Request{Caller: proxy, Ref: mon, Body: req})
	v, err := a.await(ctx, pid, timeout)
	n.Exit(proxy, gotp.ErrKill) // its monitor of the server goes with it
	return v, err
}

func reasonOrNoProc(reason error) error {
	if reason == nil {
		return errNormal
	}
	return reason
}

// errNormal is the reason a CallError carries when the server ended
// normally during the call.
var errNormal = fmt.Errorf("server exited normally")

// Cast sends msg to the server's HandleCast and returns at once. A cast to
// a server that is not running is dropped.
func Cast(n *gotp.Node, to gotp.Dest, msg any) {
	n.SendTo(to, CastMessage{Body: msg})
}

// Stop asks the server to stop with reason (nil is normal), and waits until
// it has run Terminate and exited, or ctx ends. It fails with *CallError
// (gotp.ErrNoProc) if the server is not running.
func Stop(ctx context.Context, n *gotp.Node, to gotp.Dest, reason error) error {
	pid, ok := to.Resolve(n)
	if !ok {
		return &CallError{Reason: gotp.ErrNoProc}
	}
	died := make(chan error, 1)
	mon := n.MonitorFunc(pid, func(d gotp.Down) { died <- d.Reason })
	n.Send(pid, StopRequest{Reason: reason})
	select {
	case r := <-died:
		if r == gotp.ErrNoProc {
			return &CallError{Server: pid, Reason: r}
		}
		return nil
	case <-ctx.Done():
		n.Demonitor(mon, pid)
		return &CallError{Server: pid, Reason: ctx.Err()}
	}
}
