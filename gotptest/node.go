package gotptest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gotp/gotp"
)

// Timeout bounds every wait of this package that takes no bound of its
// own.
const Timeout = 10 * time.Second

// DefaultStopTimeout bounds the Node.Stop that NewNode runs when the test
// ends, unless [StopWithin] says otherwise.
const DefaultStopTimeout = 20 * time.Second

// TB is what the helpers need of a test: *testing.T, *testing.B,
// *testing.F and *rapid.T (pgregory.net/rapid) have it.
type TB interface {
	Helper()
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// An Option configures NewNode.
type Option interface{ apply(*nodeConfig) }

type nodeConfig struct {
	opts gotp.Options
	stop time.Duration
}

type optionFunc func(*nodeConfig)

func (f optionFunc) apply(c *nodeConfig) { f(c) }

// Name names the node (in its PIDs and in a cluster). NewNode's default is
// "test".
func Name(name string) Option {
	return optionFunc(func(c *nodeConfig) { c.opts.Name = name })
}

// Logger sends the node's logs to l instead of the test's log. Pass
// slog.New(slog.DiscardHandler) to drop them, or a [LogRecorder]'s Logger
// to assert on them.
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *nodeConfig) { c.opts.Logger = l })
}

// StopWithin bounds the Node.Stop that NewNode runs when the test ends by
// d instead of [DefaultStopTimeout].
func StopWithin(d time.Duration) Option {
	return optionFunc(func(c *nodeConfig) { c.stop = d })
}

// NewNode returns a running node for t, named "test" unless [Name] says
// otherwise. Its logs (a crashed process's report, for example) go to t's
// log, shown when the test fails or with go test -v (a benchmark's log is
// always shown: give a benchmark's node a discarding [Logger]), unless
// [Logger] says otherwise.
//
// When t ends, NewNode stops the node, waiting at most [DefaultStopTimeout]
// (or the bound of [StopWithin]), and
// fails t if Stop did not finish in time or a process is still alive after
// it. Leaked goroutines are for [VerifyTestMain] or [NoLeaks] to find.
func NewNode(t TB, opts ...Option) *gotp.Node {
	t.Helper()
	c := nodeConfig{opts: gotp.Options{Name: "test"}, stop: DefaultStopTimeout}
	for _, opt := range opts {
		opt.apply(&c)
	}
	o := c.opts
	if o.Logger == nil {
		tl := &testLog{t: t}
		o.Logger = slog.New(slog.NewTextHandler(tl, &slog.HandlerOptions{Level: slog.LevelDebug}))
		t.Cleanup(tl.close) // registered first, so it runs after the Stop below
	}
	n := gotp.NewNode(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.stop)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("gotptest: stopping node %s: %v", n.Name(), err)
		}
		if left := n.Processes(); len(left) > 0 {
			t.Errorf("gotptest: node %s still has %d live processes after Stop: %v", n.Name(), len(left), left)
		}
	})
	return n
}

// testLog writes log lines to a test's log until the test's cleanup
// closes it: a test's log must not be written once the test has ended.
type testLog struct {
	mu     sync.Mutex
	t      TB
	closed bool
}

func (l *testLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Logf("%s", strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// Context returns a context that ends after [Timeout], or when t ends,
// whichever comes first: the context to pass to a call a test makes.
func Context(t TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Must fails t with err when err is not nil.
func Must(t TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
}
