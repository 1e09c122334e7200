package supervisor_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logRecorder is a slog.Handler that keeps the messages and attributes
// of every record, so tests can assert what the supervisor logged.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.Any(); return true })
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// find returns the records whose message is msg.
func (l *logRecorder) find(msg string) []logRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRec
	for _, r := range l.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

func newNodeLog(t testing.TB) (*gotp.Node, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	n := gotp.NewNode(gotp.Options{Name: "t", Logger: slog.New(rec)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return n, rec
}

func newNode(t testing.TB) *gotp.Node {
	n, _ := newNodeLog(t)
	return n
}

func tctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// Messages a worker understands.
type (
	exitWith  struct{ reason error }
	panicWith struct{ v any }
)

// worker is a function process that exits with the reason it is told,
// panics when told, and otherwise waits.
func worker(p *gotp.Process) error {
	for {
		msg, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case exitWith:
			return m.reason
		case panicWith:
			panic(m.v)
		}
	}
}

// stubborn is a function process that traps exits and ignores them: only
// gotp.ErrKill ends it.
func stubborn(p *gotp.Process) error {
	p.TrapExit(true)
	for {
		if _, err := p.Receive(p.Context()); err != nil {
			return err
		}
	}
}

// recorder records start and stop events of children in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// recServer is a server that records its start and its Terminate, and
// traps exits so that its supervisor's shutdown runs Terminate.
type recServer struct {
	server.Defaults
	id  string
	rec *recorder
}

func (s *recServer) Init(_ context.Context, p *gotp.Process) error {
	p.TrapExit(true)
	s.rec.add("start " + s.id)
	return nil
}

func (s *recServer) Terminate(_ *gotp.Process, reason error) {
	s.rec.add("stop " + s.id)
}

func recChild(id string, rec *recorder) supervisor.ChildSpec {
	return supervisor.Server(id, func() server.Behaviour { return &recServer{id: id, rec: rec} })
}

// waitDown returns a channel that receives pid's exit reason. It watches
// pid with a process monitor, whose Down is delivered after the exit
// signals of pid's links: once the reason is received, the supervisor's
// mailbox already holds the Exit of its child, so a call made then is
// handled after it.
func waitDown(n *gotp.Node, pid gotp.PID) <-chan error {
	ch := make(chan error, 1)
	ready := make(chan struct{})
	_, err := n.Spawn(func(p *gotp.Process) error {
		ref := p.Monitor(pid)
		close(ready)
		msg, err := p.ReceiveFunc(p.Context(), func(m any) bool {
			d, ok := m.(gotp.Down)
			return ok && d.Ref == ref
		})
		if err != nil {
			return err
		}
		ch <- msg.(gotp.Down).Reason
		return nil
	})
	if err != nil {
		panic(err)
	}
	<-ready
	return ch
}

func recvReason(t testing.TB, ch <-chan error) error {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for an exit")
		return nil
	}
}

// pids returns the PIDs of which, by id.
func pids(which []supervisor.ChildInfo) map[string]gotp.PID {
	m := map[string]gotp.PID{}
	for _, c := range which {
		m[c.ID] = c.PID
	}
	return m
}

func ids(which []supervisor.ChildInfo) []string {
	var out []string
	for _, c := range which {
		out = append(out, c.ID)
	}
	return out
}

func mustWhich(t testing.TB, n *gotp.Node, sup gotp.Dest) []supervisor.ChildInfo {
	t.Helper()
	w, err := supervisor.WhichChildren(tctx(t), n, sup)
	if err != nil {
		t.Fatalf("WhichChildren: %v", err)
	}
	return w
}

var errBoom = errors.New("boom")

var discard = slog.New(slog.DiscardHandler)

func newLogger(r *logRecorder) *slog.Logger { return slog.New(r) }

// watchDown is waitDown through Node.MonitorFunc, for exits caused by
// Node.Stop (which would end waitDown's helper process too). Its reason
// may arrive before the exit signals of pid's links are delivered.
func watchDown(n *gotp.Node, pid gotp.PID) <-chan error {
	ch := make(chan error, 1)
	n.MonitorFunc(pid, func(d gotp.Down) { ch <- d.Reason })
	return ch
}
