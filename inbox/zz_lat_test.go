package inbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

func TestZZLatency(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	var pub, e2e []time.Duration
	started := make(chan time.Time, 1)
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error { started <- time.Now(); return nil }, inbox.SubscribeOptions{Workers: 8})
	time.Sleep(200 * time.Millisecond)
	for i := range 200 {
		t0 := time.Now()
		q.Publish(t.Context(), msg{N: i}, nil)
		pub = append(pub, time.Since(t0))
		e2e = append(e2e, (<-started).Sub(t0))
	}
	slices.Sort(pub)
	slices.Sort(e2e)
	t.Logf("publish p50 %v p99 %v; e2e p50 %v p99 %v", pub[100], pub[198], e2e[100], e2e[198])
}
