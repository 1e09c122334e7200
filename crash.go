package gotp

import (
	"context"
	"log/slog"
	"time"

	"github.com/gotp/gotp/internal/render"
)

// CrashReportMsg is the message of a crash report (see Options.Logger).
const CrashReportMsg = "gotp: process crashed"

// Bounds of a crash report's parts.
const (
	// CrashMessageLimit bounds the rendering of the message a crashed
	// handler was handling (the last_message attribute), in bytes.
	CrashMessageLimit = 1024
	// CrashStackLimit bounds the stack of a panic (the stack attribute),
	// in bytes; a longer stack keeps its first CrashStackLimit bytes,
	// where the panic is.
	CrashStackLimit = 16 << 10
	// crashLinksLimit bounds the links listed (the links attribute); the
	// links_total attribute says how many there were.
	crashLinksLimit = 32
)

// A CrashReporter is a Handler that adds what it knows to the crash report
// of its process: package server's handler adds the request it was
// handling, unwrapped, and its behaviour's state. CrashReport is called on
// the process's goroutine, once, when the handler has stopped the process
// with an abnormal reason or panicked while handling msg, before the
// process exits (its state is as the handler left it). The attributes it
// returns replace the runtime's own last_message attribute; a panic in
// CrashReport is caught and shown in the report.
type CrashReporter interface {
	CrashReport(p *Process, msg any, reason error) []slog.Attr
}

// crashed logs the crash report of p, whose own code is ending it with
// reason: its function returned it or panicked, its handler stopped it or
// panicked while handling msg (handling is then true), or its init
// panicked (init is then true). It logs nothing for a normal reason (nil or
// ErrShutdown, wrapped or not), or when p is dead already: an exit signal
// ended it, and what sent the signal reports for itself. It runs before
// the process exits, so whoever learns of the exit (a Down, a link, a
// supervisor) finds the report already logged.
//
// Callers test reason != nil first, so a normal exit costs one
// comparison; the report itself is built only for a crash.
//
//go:noinline
func (p *Process) crashed(reason error, msg any, handling, init bool) {
	if IsNormal(reason) || p.dead.Load() {
		return
	}
	p.n.crashes.Add(1)
	log := p.n.log
	ctx := context.Background()
	if !log.Enabled(ctx, slog.LevelError) {
		return
	}
	p.mu.Lock()
	name := p.name
	var label string
	if p.extra != nil {
		label = p.extra.label
	}
	var links []PID
	total := 0
	for l := range p.links.all {
		if total < crashLinksLimit {
			links = append(links, l)
		}
		total++
	}
	trap := p.trap
	mailbox := p.mailboxLenLocked()
	p.mu.Unlock()

	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs, slog.Any("pid", p.Self()))
	if name != "" {
		attrs = append(attrs, slog.String("name", name))
	}
	if p.label != "" {
		attrs = append(attrs, slog.String("behaviour", p.label))
	}
	if label != "" {
		attrs = append(attrs, slog.String("label", label))
	}
	attrs = append(attrs, slog.String("reason", reason.Error()))
	if pe, ok := reason.(*PanicError); ok {
		attrs = append(attrs,
			slog.String("panic", render.Value(pe.Value, CrashMessageLimit)),
			slog.String("stack", boundStack(pe.Stack)))
	}
	if init {
		attrs = append(attrs, slog.Bool("in_init", true))
	}
	if handling {
		attrs = append(attrs, p.handlerAttrs(msg, reason)...)
	}
	attrs = append(attrs,
		slog.Uint64("handled", p.handled.Load()),
		slog.Int("mailbox_len", mailbox),
		slog.Bool("trap_exit", trap),
		slog.Time("started", time.Unix(0, p.started)))
	if total > 0 {
		attrs = append(attrs, slog.Any("links", links))
		if total > len(links) {
			attrs = append(attrs, slog.Int("links_total", total))
		}
	}
	log.LogAttrs(ctx, slog.LevelError, CrashReportMsg, attrs...)
}

// handlerAttrs returns what a crashed handler adds to its report: its own
// attributes if it is a CrashReporter, the message it was handling
// otherwise.
func (p *Process) handlerAttrs(msg any, reason error) (attrs []slog.Attr) {
	cr, ok := p.handler.(CrashReporter)
	if !ok {
		return []slog.Attr{slog.String("last_message", render.Value(msg, CrashMessageLimit))}
	}
	defer func() {
		if v := recover(); v != nil {
			attrs = []slog.Attr{
				slog.String("last_message", render.Value(msg, CrashMessageLimit)),
				slog.String("crash_report_panic", render.Value(v, CrashMessageLimit)),
			}
		}
	}()
	return cr.CrashReport(p, msg, reason)
}

// boundStack returns a panic's stack as text of at most CrashStackLimit
// bytes.
func boundStack(b []byte) string {
	if len(b) <= CrashStackLimit {
		return string(b)
	}
	return string(b[:CrashStackLimit]) + "\n… (stack cut at 16 KiB)"
}
