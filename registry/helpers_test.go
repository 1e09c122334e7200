package registry_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }

func start[K comparable, V any](t testing.TB, n *gotp.Node, opts registry.Options) *registry.Registry[K, V] {
	t.Helper()
	r, err := registry.Start[K, V](gotptest.Context(t), n, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
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
