package registry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newNode(t testing.TB) *gotp.Node {
	t.Helper()
	n := gotp.NewNode(gotp.Options{Name: "t"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return n
}

func testCtx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func start[K comparable, V any](t testing.TB, n *gotp.Node, opts registry.Options) *registry.Registry[K, V] {
	t.Helper()
	r, err := registry.Start[K, V](testCtx(t), n, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
}

// actor is a process that runs closures sent to it, one at a time, so a
// test can act as several processes.
type actor struct {
	t    testing.TB
	n    *gotp.Node
	pid  gotp.PID
	done <-chan struct{}
}

type job struct {
	f    func(p *gotp.Process)
	done chan struct{}
}

func spawnActor(t testing.TB, n *gotp.Node) *actor {
	t.Helper()
	ready := make(chan (<-chan struct{}), 1)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		ready <- p.Done()
		for {
			m, err := p.Receive(context.Background())
			if err != nil {
				return nil
			}
			switch m := m.(type) {
			case job:
				m.f(p)
				close(m.done)
			case string:
				if m == "stop" {
					return nil
				}
			}
		}
	})
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	return &actor{t: t, n: n, pid: pid, done: <-ready}
}

// spawnListener spawns a process that forwards every message it receives
// (a listener's events) to the returned channel.
func spawnListener(t testing.TB, n *gotp.Node, opts ...gotp.SpawnOption) (gotp.PID, <-chan any) {
	t.Helper()
	events := make(chan any, 16)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		for {
			m, err := p.Receive(context.Background())
			if err != nil {
				return nil
			}
			events <- m
		}
	}, opts...)
	if err != nil {
		t.Fatalf("Spawn listener: %v", err)
	}
	return pid, events
}

// nextEvent returns the next event a listener of spawnListener forwarded.
func nextEvent(t testing.TB, events <-chan any) any {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return nil
	}
}

// exitOf spawns f as a process and returns its exit reason once its exit
// is complete (Done closed: every MonitorFunc callback, the registry's
// cleanup included, has run). The reason is read from the process itself:
// a MonitorFunc set after Spawn returns may find the process gone, and
// report gotp.ErrNoProc.
func exitOf(t testing.TB, n *gotp.Node, f func(p *gotp.Process) error) error {
	t.Helper()
	procs := make(chan *gotp.Process, 1)
	if _, err := n.Spawn(func(p *gotp.Process) error {
		procs <- p
		return f(p)
	}); err != nil {
		t.Fatal(err)
	}
	p := <-procs
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("process %v never finished exiting", p.Self())
	}
	err, _ := p.ExitReason()
	return err
}

// do runs f as the actor and waits for it.
func (a *actor) do(f func(p *gotp.Process)) {
	a.t.Helper()
	j := job{f: f, done: make(chan struct{})}
	a.n.Send(a.pid, j)
	select {
	case <-j.done:
	case <-a.done:
		a.t.Fatalf("actor %v exited", a.pid)
	case <-time.After(20 * time.Second):
		a.t.Fatalf("actor %v did not run the job", a.pid)
	}
}

// kill ends the actor with reason and waits until its exit, monitors
// included, is complete.
func (a *actor) kill(reason error) {
	a.t.Helper()
	a.n.Exit(a.pid, reason)
	a.wait()
}

// stop makes the actor return normally and waits for its exit.
func (a *actor) stop() {
	a.t.Helper()
	a.n.Send(a.pid, "stop")
	a.wait()
}

func (a *actor) wait() {
	a.t.Helper()
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		a.t.Fatalf("actor %v did not exit", a.pid)
	}
}

func sortEntries[V any](es []registry.Entry[V]) []registry.Entry[V] {
	slices.SortFunc(es, func(a, b registry.Entry[V]) int {
		if c := strings.Compare(a.PID.String(), b.PID.String()); c != 0 {
			return c
		}
		return strings.Compare(fmt.Sprint(a.Value), fmt.Sprint(b.Value))
	})
	return es
}

func sortedKeys[K any](ks []K) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = fmt.Sprint(k)
	}
	slices.Sort(out)
	return out
}

// configs are the registry shapes the ported suite runs against.
var partitionCounts = []int{1, 8}

func eachPartitions(t *testing.T, f func(t *testing.T, partitions int)) {
	for _, p := range partitionCounts {
		t.Run(fmt.Sprintf("partitions=%d", p), func(t *testing.T) { f(t, p) })
	}
}

func mustEqual[T any](t testing.TB, what string, got, want T) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
