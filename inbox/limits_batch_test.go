package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Limits.Concurrency holds the jobs of batches in work across two instances of
// batch subscriptions, each job of a batch in a slot of its own: with batches of 4,
// 3 workers an instance and the default prefetch, the instances hold up to 48 rows
// between them, but at most Concurrency jobs are ever inside a batch handler at
// once; a limit smaller than a batch (3) runs batches in parts. Every job runs
// once.
func TestLimitsConcurrencyBatch(t *testing.T) {
	for _, limit := range []int{3, 5} {
		t.Run(fmt.Sprint("concurrency", limit), func(t *testing.T) {
			eachDB(t, func(t *testing.T, b *backend) {
				const n = 200
				q := defaultTable(t, b)
				for i := range n {
					if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				now, most, largest := 0, 0, 0
				seen := make([]atomic.Int32, n)
				var done atomic.Int64
				all := make(chan struct{})
				h := func(ctx context.Context, jobs []inbox.Job[msg]) error {
					mu.Lock()
					now += len(jobs)
					most, largest = max(most, now), max(largest, len(jobs))
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // the work
					mu.Lock()
					now -= len(jobs)
					mu.Unlock()
					for _, j := range jobs {
						seen[j.Payload.N].Add(1)
					}
					if done.Add(int64(len(jobs))) == n {
						close(all)
					}
					return nil
				}
				for range 2 {
					startBatch(t, newQueue(t, b, inbox.Config[msg]{}), h, 4, inbox.SubscribeOptions{
						Workers: 3, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Concurrency: limit},
					})
				}
				select {
				case <-all:
				case <-time.After(60 * time.Second):
					t.Fatalf("%d of %d jobs done", done.Load(), n)
				}
				mu.Lock()
				defer mu.Unlock()
				if most > limit {
					t.Fatalf("%d jobs in batch handlers at once, Concurrency %d", most, limit)
				}
				if largest > min(limit, 4) {
					t.Fatalf("a batch of %d jobs ran, Concurrency %d, batches of 4", largest, limit)
				}
				for i := range seen {
					if c := seen[i].Load(); c != 1 {
						t.Fatalf("job %d ran %d times", i, c)
					}
				}
			})
		})
	}
}
