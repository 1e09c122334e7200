package inbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// PerPartition and FIFO groups on one table, each job in a group and under a
// partition key, the groups crossing the keys (job i: group i%8, key i%3): two
// instances drain every job once; never two jobs of a group in work at once and
// each group in publish order; never more than PerPartition of a key in work.
func TestLimitsPerPartitionWithGroups(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		const n, groups, keys, per = 240, 8, 3, 2
		pub := groupTable(t, b)
		for i := range n {
			if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Group: fmt.Sprint("g", i%groups), Partition: fmt.Sprint("k", i%keys)}); err != nil {
				t.Fatal(err)
			}
		}
		g := newGauge()
		var mu sync.Mutex
		groupNow := map[int]int{}
		order := map[int][]int{}
		var errs []string
		done := newTally(n)
		for range 2 {
			start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				gr, k := j.Payload.N%groups, fmt.Sprint("k", j.Payload.N%keys)
				mu.Lock()
				if groupNow[gr]++; groupNow[gr] > 1 {
					errs = append(errs, fmt.Sprintf("two jobs of group %d in work at once (job %d)", gr, j.Payload.N))
				}
				order[gr] = append(order[gr], j.Payload.N)
				mu.Unlock()
				g.enter(k)
				time.Sleep(time.Millisecond)
				g.leave(k)
				mu.Lock()
				groupNow[gr]--
				mu.Unlock()
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 6, PollInterval: 20 * time.Millisecond, Limits: inbox.Limits{PerPartition: per}})
		}
		done.wait(t, 60*time.Second)
		done.exactlyOnce(t)
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Error(e)
		}
		for gr, o := range order {
			if !slices.IsSorted(o) {
				t.Errorf("group %d ran out of order: %v", gr, o)
			}
		}
		for k, m := range g.keyMax {
			if m > per {
				t.Errorf("key %s had %d jobs in work at once, limit %d", k, m, per)
			}
		}
		if g.max < 2 {
			t.Errorf("at most %d jobs in work at once: the keys and groups never ran side by side", g.max)
		}
	})
}

// Rate with batch subscriptions whose batches (16) are larger than Rate (4): two
// instances drain every job once, each batch no larger than its n, and no
// 2 × Rate + 1 handler starts (each job of a batch starts with it) ever fall
// within one Per, allowing for the delay from a claim to its handler, as
// TestLimitsRateWindows asks of single subscriptions.
func TestLimitsRateBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		const rate, per, n, size = 4, 400 * time.Millisecond, 24, 16
		const slack = per / 4
		pub := groupTable(t, b)
		jobs := make([]msg, n)
		for i := range jobs {
			jobs[i].N = i
		}
		var mu sync.Mutex
		var starts []time.Time
		var errs []string
		done := newTally(n)
		for range 2 {
			startBatch(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, js []inbox.Job[msg]) error {
				now := time.Now()
				mu.Lock()
				if len(js) > size {
					errs = append(errs, fmt.Sprintf("a batch of %d, n %d", len(js), size))
				}
				for range js {
					starts = append(starts, now)
				}
				mu.Unlock()
				for _, j := range js {
					done.add(j.Payload.N)
				}
				return nil
			}, size, inbox.SubscribeOptions{Workers: 2, PollInterval: 20 * time.Millisecond, Limits: inbox.Limits{Rate: rate, Per: per}})
		}
		if err := pub.PublishBatch(t.Context(), jobs, nil); err != nil {
			t.Fatal(err)
		}
		done.wait(t, 60*time.Second)
		done.exactlyOnce(t)
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Error(e)
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 0; i+2*rate < len(starts); i++ {
			if span := starts[i+2*rate].Sub(starts[i]); span <= per-slack {
				t.Errorf("starts %d..%d (%d of them) within %v: more than 2 × Rate in less than Per", i, i+2*rate, 2*rate+1, span)
			}
		}
		if span := starts[len(starts)-1].Sub(starts[0]); span < time.Duration(n/rate-2)*per {
			t.Errorf("%d starts at %d per %v took %v: fewer windows than Rate allows", n, rate, per, span)
		}
	})
}
