package gotptest

import (
	"testing"

	"go.uber.org/goleak"
)

// leakOptions returns the goroutines no test owns: none so far. Each
// entry must say which library starts the goroutine and why it may outlive
// the tests.
func leakOptions() []goleak.Option { return nil }

// VerifyTestMain runs the tests of m and then fails the test binary (exit
// status 1, with the stacks of the goroutines left) if any goroutine
// started during the tests is still running after them, retrying for a
// while so that goroutines that are ending have time to end. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }
//
// It checks the whole binary at once, so it works with parallel tests, but
// does not say which test leaked; [NoLeaks] does, for one test. It is
// go.uber.org/goleak's VerifyTestMain.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions()...)
}

// NoLeaks fails t if goroutines started from now on are still running when
// t ends, after its other cleanups (a node of [NewNode] stopped, for
// example) have run, retrying for a while so that goroutines that are
// ending have time to end. Call it first in the test.
//
// Goroutines of other tests running at the same time would count as
// leaks, so NoLeaks refuses parallel tests: it calls t.Setenv, which
// panics in a test that has called t.Parallel, and makes a later
// t.Parallel panic.
func NoLeaks(t *testing.T) {
	t.Helper()
	noLeaks(t)
}

// serialTB is a TB that can refuse to run in parallel.
type serialTB interface {
	TB
	Name() string
	Setenv(key, value string)
}

func noLeaks(t serialTB) {
	t.Helper()
	t.Setenv("GOTPTEST_NOLEAKS", t.Name())
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions()...)
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("gotptest: goroutines left running: %v", err)
		}
	})
}
