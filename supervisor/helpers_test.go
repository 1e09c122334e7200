package supervisor_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }

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
	w, err := supervisor.WhichChildren(gotptest.Context(t), n, sup)
	if err != nil {
		t.Fatalf("WhichChildren: %v", err)
	}
	return w
}

var errBoom = errors.New("boom")

var discard = slog.New(slog.DiscardHandler)
