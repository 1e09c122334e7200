package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/internal/render"
)

// StateLimit bounds the rendering of a server's state, in bytes, in its
// crash report and in FormatState's answer.
const StateLimit = 4096

// A StateFormatter is a Behaviour that chooses how its state is shown, in
// its crash report and by FormatState (Erlang's format_status): return
// what an operator may see, without secrets, and small. It runs as the
// server process, between callbacks, so it may read the behaviour's fields
// freely. A behaviour that is not a StateFormatter is shown as its own
// value, bounded by StateLimit (the insides of sync and sync/atomic values
// are never read); implement StateFormatter when fields of the behaviour
// are written by goroutines other than the server's, or hold secrets.
type StateFormatter interface {
	FormatState() any
}

// formatState renders the behaviour's state; a panic in FormatState is
// shown instead of the state, never a crash of the server.
func (g *gen) formatState() (s string) {
	f, ok := g.b.(StateFormatter)
	if !ok {
		return render.Value(g.b, StateLimit)
	}
	defer func() {
		if v := recover(); v != nil {
			s = fmt.Sprintf("(FormatState panicked: %s)", render.Value(v, 256))
		}
	}()
	return render.Value(f.FormatState(), StateLimit)
}

// CrashReport adds the server's part to its crash report (see
// gotp.Options.Logger): last_message is the request, cast or message it was
// handling, unwrapped; last_message_kind says which (call, cast, info,
// stop, exit); caller is the process that made the call; state is the
// behaviour's state (see StateFormatter).
func (g *gen) CrashReport(p *gotp.Process, msg any, reason error) []slog.Attr {
	kind, body := "info", msg
	var caller gotp.PID
	switch m := msg.(type) {
	case *call:
		kind, body = "call", m.req
	case Request:
		kind, body, caller = "call", m.Body, m.Caller
	case CastMessage:
		kind, body = "cast", m.Body
	case StopRequest:
		kind = "stop"
	case gotp.Exit:
		if m.From == g.parent || m.From.IsZero() {
			kind = "exit"
		}
	}
	attrs := []slog.Attr{
		slog.String("last_message", render.Value(body, gotp.CrashMessageLimit)),
		slog.String("last_message_kind", kind),
	}
	if !caller.IsZero() {
		attrs = append(attrs, slog.Any("caller", caller))
	}
	return append(attrs, slog.String("state", g.formatState()))
}

// stateQuery is the message FormatState sends; the server answers between
// callbacks, as Erlang's sys:get_status is.
type stateQuery struct{ a *answer }

// ErrNotServer is returned by FormatState, GetState and ReplaceState for
// a process that is not a server of this package.
var ErrNotServer = errors.New("server: not a server process")

// FormatState asks the server dest on node n for its state, rendered as its
// crash report shows it (see StateFormatter), and waits for the answer
// until ctx ends (DefaultCallTimeout if ctx has no deadline). The server
// answers between callbacks, after the messages queued before the
// question, so a busy server answers late. It fails with ErrNotServer for
// a process that is not a server (and sends it nothing), and with
// *CallError as Call does. Only servers on n can be asked.
func FormatState(ctx context.Context, n *gotp.Node, dest gotp.Dest) (string, error) {
	v, err := ask(ctx, n, dest, func(a *answer) any { return stateQuery{a: a} })
	if err != nil {
		return "", err
	}
	s, _ := v.(string)
	return s, nil
}

// ask sends the server dest on n the question q makes and waits for its
// answer, as a call does: between callbacks, in mailbox order. It is how
// the introspection functions (FormatState, GetState, ReplaceState) reach
// a server: local servers only, and never a process that is not one.
func ask(ctx context.Context, n *gotp.Node, dest gotp.Dest, q func(a *answer) any) (any, error) {
	pid, ok := dest.Resolve(n)
	if !ok {
		return nil, &CallError{Reason: gotp.ErrNoProc}
	}
	h, ok := n.ProcessHandler(pid)
	if !ok {
		if n.IsAlive(pid) {
			return nil, ErrNotServer // a function process
		}
		return nil, &CallError{Server: pid, Reason: gotp.ErrNoProc}
	}
	if _, ok := h.(*gen); !ok {
		return nil, ErrNotServer
	}
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(DefaultCallTimeout)
		defer t.Stop()
		timeout = t.C
	}
	a := &answer{}
	mon := n.MonitorFunc(pid, func(d gotp.Down) { a.set(died{d.Reason}) })
	n.Send(pid, q(a))
	v, err := a.await(ctx, pid, timeout)
	n.Demonitor(mon, pid)
	return v, err
}
