package server

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/gotp/gotp"
)

// Call cycles.
//
// While a server's callback is blocked in a Call to a local server, the
// caller's genExtra.waiting points at an edge naming the call and the gen
// of the server called: "A waits for B" in the wait-for graph. A server
// that waits for the Init of a server it starts with StartLink has such an
// edge too, to the new server, until Init returns. A callback that is
// about to wait sets its edge first and then follows the edges from the
// server it calls: if they lead back to itself, every server on the way
// waits for the next and none can handle the message that would free it,
// so the call fails at once. Of two calls that close one cycle at the same
// moment at least one sees it; both may fail.
//
// An edge does not count once its call has been answered (the caller is
// about to wake), nor when the server called deferred its reply
// (HandleCall returned NoReply: the answer may come from any goroutine, so
// the caller need not be waiting for the server's mailbox). Only calls
// whose caller is a server are edges; calls to another node end the walk.
// The cost falls on calls made by servers only: a node's call sets no
// edge and follows none.

var (
	// ErrCallingSelf is the reason of a Call a process makes to itself: it
	// could only end at its deadline (OTP exits with calling_self).
	ErrCallingSelf = errors.New("server: calling self")
	// ErrCallCycle matches *CallCycleError with errors.Is.
	ErrCallCycle = errors.New("server: call cycle")
)

// CallCycleError is the reason of a Call that would close a cycle of
// servers each waiting for the next: Cycle lists them, the caller first,
// then the server it called, then the one that server waits for, and so
// on to the last one, which waits for the caller.
type CallCycleError struct{ Cycle []gotp.PID }

// Error names the servers of the cycle.
func (e *CallCycleError) Error() string {
	var b strings.Builder
	b.WriteString("server: call cycle: ")
	for _, pid := range e.Cycle {
		b.WriteString(pid.String())
		b.WriteString(" -> ")
	}
	if len(e.Cycle) > 0 {
		b.WriteString(e.Cycle[0].String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrCallCycle) true.
func (e *CallCycleError) Is(target error) bool { return target == ErrCallCycle }

// maxCycleHops bounds the walk: a chain of waits longer than this is not
// followed to its end (and no cycle is reported).
const maxCycleHops = 1 << 10

// edge is "this server waits for target": for the answer of call, or,
// when call is nil, for the Init of target, which it started, until over.
type edge struct {
	target *gen
	call   *call
	over   atomic.Bool
}

// done reports whether the wait of e is over, or no longer a wait for
// target's mailbox (a deferred reply).
func (e *edge) done() bool {
	if e.over.Load() {
		return true
	}
	if c := e.call; c != nil {
		if c.deferred.Load() {
			return true
		}
		_, answered := c.result()
		return answered
	}
	return false
}

// trackedCall is a call made by a server, with the edge of its wait.
type trackedCall struct {
	call
	edge edge
}

// await makes g, about to wait for the call of e (e.call) to the local
// server pid, an edge of the wait-for graph, and checks that the edge
// closes no cycle: the *CallCycleError if it does. The caller restores
// the edge the server had before (prev, in x) once the call is over,
// whatever await returns.
func (g *gen) await(n *gotp.Node, pid gotp.PID, e *edge) (x *genExtra, prev *edge, err error) {
	if h, ok := n.ProcessHandler(pid); ok {
		e.target, _ = h.(*gen)
	}
	x = g.extra()
	prev = x.waiting.Swap(e) // before the walk: see the comment above
	if cycle := g.cycleThrough(e.target); cycle != nil {
		return x, prev, &CallCycleError{Cycle: cycle}
	}
	return x, prev, nil
}

// cycleThrough follows the edges from target and, if they come back to
// g, returns the servers of the cycle, g first; otherwise nil.
func (g *gen) cycleThrough(target *gen) []gotp.PID {
	var path []*gen
	for s, hops := target, 0; s != nil && hops < maxCycleHops; hops++ {
		if s == g {
			out := make([]gotp.PID, 0, len(path)+1)
			out = append(out, g.proc.Self())
			for _, t := range path {
				out = append(out, t.proc.Self())
			}
			return out
		}
		x := s.x.Load()
		if x == nil {
			return nil // s has never waited for anything
		}
		e := x.waiting.Load()
		if e == nil || e.done() {
			return nil
		}
		// s's proc was set before s could wait for anything, and the
		// loads above order that write before its read here.
		path = append(path, s)
		s = e.target
	}
	return nil
}
