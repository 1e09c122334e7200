package server

import (
	"time"

	"github.com/gotp/gotp"
)

// Timeout is the message HandleInfo receives when the time a callback
// asked for with SetTimeout has passed without any message arriving
// (OTP's timeout message).
type Timeout struct{}

// SetTimeout, called by one of the server's callbacks (Init, HandleCall,
// HandleCast, HandleInfo) with its process p, asks that if no message
// arrives within d after the callback returns, HandleInfo receive
// Timeout{}: OTP's {reply, Reply, State, Timeout} and {noreply, State,
// Timeout}. Any message that arrives first cancels it, and the callback
// that handles that message asks again if it wants another; a message
// already waiting in the mailbox when the callback returns is handled
// first (so d == 0 means "Timeout now, unless a message is waiting", as
// in OTP). A negative d withdraws a request made earlier in the same
// callback. The last request of a callback counts; a callback that stops
// the server asks for nothing. Questions asked by introspection
// (FormatState, GetState, ReplaceState) are not messages to the server in
// this sense: they neither cancel nor restart a running timeout.
//
// SetTimeout must be called from the server's own callbacks. For a process
// that is not a server of this package it does nothing.
func SetTimeout(p *gotp.Process, d time.Duration) {
	g, ok := p.Handler().(*gen)
	if !ok {
		return
	}
	x := g.extra()
	x.timeoutAsk, x.timeoutAsked = d, d >= 0
}

// timeoutMsg is the message that makes a Timeout: seq names the request
// it answers, so that a timer that fired after a message cancelled it is
// ignored.
type timeoutMsg struct{ seq uint64 }

// afterCallback runs what a callback that did not stop the server asked
// for: a timeout.
func (g *gen) afterCallback(p *gotp.Process) {
	x := g.x.Load()
	if x == nil || !x.timeoutAsked {
		return
	}
	x.timeoutAsked = false
	x.timerSeq++
	x.timerOn = true
	msg := timeoutMsg{seq: x.timerSeq}
	if x.timeoutAsk <= 0 {
		// Behind whatever is waiting already: a message that is there
		// first cancels it.
		x.timer = gotp.Ref{}
		p.Send(p.Self(), msg)
		return
	}
	x.timer = p.Node().SendAfter(x.timeoutAsk, p.Self(), msg)
}

// timeoutFilter sees every message of a server that has used timeouts
// before the callbacks do: the message of the running timeout becomes
// Timeout{}, that of a cancelled one is dropped (ok false), and any other
// message but an introspection question cancels the running timeout.
func (x *genExtra) timeoutFilter(p *gotp.Process, msg any) (_ any, ok bool) {
	switch m := msg.(type) {
	case timeoutMsg:
		if !x.timerOn || m.seq != x.timerSeq {
			return nil, false
		}
		x.timerOn = false
		return Timeout{}, true
	case stateQuery, sysGetState, sysReplaceState:
		return msg, true
	}
	x.cancelTimeout(p)
	return msg, true
}

// cancelTimeout cancels the running timeout, if any, and any request made
// by the callback running now.
func (g *gen) cancelTimeout(p *gotp.Process) {
	if x := g.x.Load(); x != nil {
		x.cancelTimeout(p)
	}
}

func (x *genExtra) cancelTimeout(p *gotp.Process) {
	x.timeoutAsked = false
	if !x.timerOn {
		return
	}
	x.timerOn = false
	if !x.timer.IsZero() {
		p.Node().CancelTimer(x.timer)
	}
}
