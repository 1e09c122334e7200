package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// TestPrefetchStartsByPriority: a higher-priority job claimed after two
// lower-priority ones were prefetched starts before them. One worker is held by a
// first job while the others are claimed one at a time into its prefetch; the
// order of starts is then the order of priorities. For single jobs and batches
// (of one job, so that each start is one call).
func TestPrefetchStartsByPriority(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
				b := b
				if batch {
					b = freshBackend(t, b.dialect)
				}
				q := defaultTable(t, b)
				var mu sync.Mutex
				var order []int
				entered := make(chan struct{}, 1)
				release := make(chan struct{})
				var releaseOnce sync.Once
				free := func() { releaseOnce.Do(func() { close(release) }) }
				handle := func(n int) {
					mu.Lock()
					order = append(order, n)
					first := len(order) == 1
					mu.Unlock()
					if first {
						entered <- struct{}{}
						<-release
					}
				}
				done := newTally(4)
				o := inbox.SubscribeOptions{Workers: 1, Prefetch: 3, PollInterval: 20 * time.Millisecond}
				var s *inbox.Subscription[msg]
				var err error
				if batch {
					s, err = q.SubscribeBatch(func(_ context.Context, js []inbox.Job[msg]) error {
						for _, j := range js {
							handle(j.Payload.N)
							done.add(j.Payload.N)
						}
						return nil
					}, 1, o)
				} else {
					s, err = q.Subscribe(func(_ context.Context, j inbox.Job[msg]) error {
						handle(j.Payload.N)
						done.add(j.Payload.N)
						return nil
					}, o)
				}
				if err != nil {
					t.Fatal(err)
				}
				run(t, s)
				t.Cleanup(free) // before Stop (cleanups run last first), should the test fail
				claimed := func(n int64) {
					t.Helper()
					gotptest.Eventually(t, fmt.Sprintf("%d rows claimed and dispatched", n), func() bool {
						return inbox.Dispatched(s) == n
					})
				}
				publish := func(n, prio int) {
					t.Helper()
					if _, err := q.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Priority: prio}); err != nil {
						t.Fatal(err)
					}
				}
				publish(0, 5)
				gotptest.Recv(t, entered)
				publish(1, 5)
				claimed(2)
				publish(2, 5)
				claimed(3)
				publish(3, 1) // higher priority, claimed last
				claimed(4)
				free()
				done.wait(t, 30*time.Second)
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(order) != "[0 3 1 2]" {
					t.Fatalf("jobs started in the order %v, want [0 3 1 2]: the priority-1 job first of the prefetched", order)
				}
			})
		}
	})
}
