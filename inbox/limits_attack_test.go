package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A subscription under Limits whose TABLE_limits is missing (dropped after the
// table was made, as a careless operator might) is refused at Start with an
// error or made again at Start, never started silently without its limit.
func TestAttackLimitsTableMissingRefusedAtStart(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		b.exec(t, `DROP TABLE "`+b.table+`_limits"`)
		h := func(context.Context, inbox.Job[msg]) error { return nil }
		for i, l := range []inbox.Limits{{PerPartition: 2}, {Concurrency: 3}} {
			s, err := q.Subscribe(h, inbox.SubscribeOptions{Limits: l, PollInterval: 10 * time.Millisecond})
			if err != nil {
				continue // refused at Subscribe: also typed, also fine
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err = s.Start(ctx)
			cancel()
			if err == nil && b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits"`) >= 0 {
				// Start made TABLE_limits again: the limit is held.
				stop, c2 := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.Stop(stop)
				c2()
				continue
			}
			if err == nil {
				stop, c2 := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.Stop(stop)
				c2()
				t.Errorf("case %d (%+v): Start = nil with TABLE_limits missing, want an error", i, l)
			}
		}
	})
}

// Limits.Concurrency 4 across a single subscription (6 workers) and a batch one
// (batches of 16, larger than the limit) on the same table: never more than 4
// jobs in work at once, every job runs, no wedge.
func TestAttackLimitsConcurrencyMixedSingleAndBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		const n, limit = 300, 4
		q := defaultTable(t, b)
		for i := range n {
			if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		now, most := 0, 0
		var done atomic.Int64
		all := make(chan struct{})
		in := func(k int) {
			mu.Lock()
			now += k
			most = max(most, now)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			now -= k
			mu.Unlock()
			if done.Add(int64(k)) == n {
				close(all)
			}
		}
		o := inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Concurrency: limit}}
		o.Workers = 6
		start(t, newQueue(t, b, inbox.Config[msg]{}), func(context.Context, inbox.Job[msg]) error { in(1); return nil }, o)
		o.Workers = 2
		startBatch(t, newQueue(t, b, inbox.Config[msg]{}), func(_ context.Context, jobs []inbox.Job[msg]) error { in(len(jobs)); return nil }, 16, o)
		select {
		case <-all:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d jobs done", done.Load(), n)
		}
		mu.Lock()
		defer mu.Unlock()
		if most > limit {
			t.Errorf("%d jobs in work at once, limit %d", most, limit)
		}
	})
}
