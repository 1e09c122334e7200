package server_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// logNode returns a node whose logs a LogRecorder keeps.
func logNode(t *testing.T) (*gotp.Node, *gotptest.LogRecorder) {
	t.Helper()
	rec := gotptest.NewLogRecorder()
	return gotptest.NewNode(t, gotptest.Name("t"), gotptest.Logger(rec.Logger())), rec
}

// str returns the attribute key of r as text ("" if absent).
func str(r gotptest.Record, key string) string {
	v, ok := r.Attrs[key]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// ledger is a server with some state to show; it crashes on request.
type ledger struct {
	server.Defaults
	Owner   string
	Entries []int
	secret  string
	format  func() any // FormatState, when set
}

type deposit struct{ Amount int }
type explode struct{ Why string }

func (l *ledger) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	switch r := req.(type) {
	case deposit:
		if r.Amount < 0 {
			panic("negative deposit")
		}
		l.Entries = append(l.Entries, r.Amount)
		return len(l.Entries), nil
	case explode:
		return nil, errors.New(r.Why)
	}
	return nil, nil
}

func (l *ledger) HandleCast(p *gotp.Process, msg any) error {
	if e, ok := msg.(explode); ok {
		return errors.New(e.Why)
	}
	return nil
}

// formattedLedger is a ledger that hides its secret (StateFormatter).
type formattedLedger struct{ ledger }

func (l *formattedLedger) FormatState() any {
	if l.format != nil {
		return l.format()
	}
	return map[string]any{"owner": l.Owner, "entries": len(l.Entries)}
}

// crashOf starts b, runs act on it, waits for it to exit and returns its
// only crash report.
func crashOf(t *testing.T, b server.Behaviour, act func(n *gotp.Node, pid gotp.PID)) (gotp.PID, gotptest.Record) {
	t.Helper()
	n, rec := logNode(t)
	pid, err := server.Start(gotptest.Context(t), n, b, server.Named("ledger"))
	if err != nil {
		t.Fatal(err)
	}
	down := make(chan struct{})
	n.MonitorFunc(pid, func(gotp.Down) { close(down) })
	act(n, pid)
	select {
	case <-down:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not exit")
	}
	var rs []gotptest.Record
	for _, r := range rec.Find(gotp.CrashReportMsg) {
		if r.Attrs["pid"] == pid {
			rs = append(rs, r)
		}
	}
	if len(rs) != 1 {
		t.Fatalf("%d crash reports, want 1: %v", len(rs), rec.Records())
	}
	return pid, rs[0]
}

func TestCrashReportOfServerPanicInCall(t *testing.T) {
	caller := make(chan error, 1)
	_, r := crashOf(t, &ledger{Owner: "ana", Entries: []int{5}, secret: "s3cr3t"}, func(n *gotp.Node, pid gotp.PID) {
		_, err := server.Call[int](gotptest.Context(t), n, pid, deposit{Amount: -3})
		caller <- err
	})
	if err := <-caller; !errors.As(err, new(*server.CallError)) {
		t.Errorf("the caller got %v, want a *CallError", err)
	}
	for key, want := range map[string]string{
		"name":              "ledger",
		"behaviour":         "server *server_test.ledger",
		"reason":            "panic: negative deposit",
		"last_message":      "server_test.deposit{Amount: -3}",
		"last_message_kind": "call",
	} {
		if got := str(r, key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	// The default rendering of the state is the behaviour itself.
	if st := str(r, "state"); !strings.Contains(st, `Owner: "ana"`) || !strings.Contains(st, "Entries: []int{5}") {
		t.Errorf("state %q", st)
	}
	if st := str(r, "stack"); !strings.Contains(st, "(*ledger).HandleCall") {
		t.Errorf("the stack does not show the callback that panicked:\n%s", st)
	}
}

func TestCrashReportOfServerCastError(t *testing.T) {
	_, r := crashOf(t, &formattedLedger{ledger{Owner: "bob", secret: "s3cr3t"}}, func(n *gotp.Node, pid gotp.PID) {
		server.Cast(n, pid, explode{Why: "disk full"})
	})
	if str(r, "reason") != "disk full" || str(r, "last_message") != `server_test.explode{Why: "disk full"}` || str(r, "last_message_kind") != "cast" {
		t.Errorf("report %v", r.Attrs)
	}
	// FormatState chose what is shown: the secret is not.
	if st := str(r, "state"); st != `map[string]interface {}{"owner": "bob", "entries": 0}` && st != `map[string]interface {}{"entries": 0, "owner": "bob"}` {
		t.Errorf("state %q", st)
	}
	if r.Attrs["stack"] != nil {
		t.Errorf("an error has no stack: %v", r.Attrs)
	}
}

func TestCrashReportOfServerStateFormatterPanics(t *testing.T) {
	b := &formattedLedger{ledger{format: func() any { panic("cannot format") }}}
	_, r := crashOf(t, b, func(n *gotp.Node, pid gotp.PID) {
		n.Send(pid, server.StopRequest{Reason: errors.New("stopped with an error")})
	})
	if str(r, "state") != `(FormatState panicked: "cannot format")` || str(r, "last_message_kind") != "stop" {
		t.Errorf("report %v", r.Attrs)
	}
}

// TestNoCrashReportForNormalServerStops: Stop with nil or ErrShutdown, a
// StopReason(nil), and an exit signal from the parent with ErrShutdown are
// not reported; neither is a kill.
func TestNoCrashReportForNormalServerStops(t *testing.T) {
	n, rec := logNode(t)
	for _, stop := range []func(pid gotp.PID){
		func(pid gotp.PID) { server.Stop(gotptest.Context(t), n, pid, nil) },
		func(pid gotp.PID) { server.Stop(gotptest.Context(t), n, pid, gotp.ErrShutdown) },
		func(pid gotp.PID) { n.Exit(pid, gotp.ErrShutdown) },
		func(pid gotp.PID) { n.Exit(pid, gotp.ErrKill) },
		func(pid gotp.PID) {
			server.Call[any](gotptest.Context(t), n, pid, stopWith{err: server.StopReason(nil)})
		},
	} {
		b := newKV()
		b.trap = true
		pid, err := server.Start(gotptest.Context(t), n, b)
		if err != nil {
			t.Fatal(err)
		}
		down := make(chan struct{})
		n.MonitorFunc(pid, func(gotp.Down) { close(down) })
		stop(pid)
		<-down
	}
	if rs := rec.Find(gotp.CrashReportMsg); len(rs) != 0 {
		t.Fatalf("normal stops reported: %v", rs)
	}
}

func TestFormatState(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, err := server.Start(gotptest.Context(t), n, &formattedLedger{ledger{Owner: "cy"}})
	if err != nil {
		t.Fatal(err)
	}
	server.Call[int](gotptest.Context(t), n, pid, deposit{Amount: 1})
	st, err := server.FormatState(gotptest.Context(t), n, pid)
	if err != nil || !strings.Contains(st, `"entries": 1`) {
		t.Fatalf("FormatState = %q, %v", st, err)
	}

	// A panicking FormatState is shown, and the server lives on.
	panicky, err := server.Start(gotptest.Context(t), n, &formattedLedger{ledger{format: func() any { panic("no") }}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := server.FormatState(gotptest.Context(t), n, panicky); err != nil || !strings.Contains(st, "panicked") {
		t.Errorf("FormatState = %q, %v", st, err)
	}
	if !n.IsAlive(panicky) {
		t.Error("a panic in FormatState ended the server")
	}

	// Not a server: refused without a message.
	plain, err := n.Spawn(func(p *gotp.Process) error { <-p.Context().Done(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.FormatState(gotptest.Context(t), n, plain); !errors.Is(err, server.ErrNotServer) {
		t.Errorf("FormatState of a plain process: %v", err)
	}
	if in, _ := n.ProcessInfo(plain); in.MailboxLen != 0 {
		t.Errorf("a plain process was sent %d messages", in.MailboxLen)
	}
	if _, err := server.FormatState(gotptest.Context(t), n, gotp.Name("nobody")); !errors.Is(err, gotp.ErrNoProc) {
		t.Errorf("FormatState of nobody: %v", err)
	}
}
