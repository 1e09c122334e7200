package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// FIFO groups under batched claims, two instances: a batch never holds two jobs
// of one group (only heads are claimable), no two jobs of a group are in work at
// once across the instances, each group is acked in publish order, and every
// third batch fails its first job once (a retry at once keeps it at its group's
// head). Every batch form, both databases.
func TestFIFOGroupsBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range batchForms(b.dialect) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				groupTable(t, b)
				const groups, perGroup = 5, 12
				pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
				for n := range groups * perGroup {
					if _, err := pub.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: groupOf(n, groups)}); err != nil {
						t.Fatal(err)
					}
				}
				log := newGroupLog(t, groups*perGroup)
				failed := map[int]bool{}
				calls := 0
				for range 2 {
					q := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
					startBatch(t, q, func(ctx context.Context, jobs []inbox.Job[msg]) error {
						seen := map[string]bool{}
						for _, j := range jobs {
							g := groupOf(j.Payload.N, groups)
							if seen[g] {
								t.Errorf("a batch holds two jobs of group %s", g)
							}
							seen[g] = true
							log.begin(g, j.Payload.N)
						}
						time.Sleep(2 * time.Millisecond)
						log.mu.Lock()
						calls++
						fail := -1
						if calls%3 == 0 && !failed[jobs[0].Payload.N] {
							failed[jobs[0].Payload.N] = true
							fail = 0
						}
						log.mu.Unlock()
						errs := make(inbox.BatchErrors, len(jobs))
						for i, j := range jobs {
							if i == fail {
								errs[i] = inbox.Retry(0)
							}
							log.end(groupOf(j.Payload.N, groups), j.Payload.N, i != fail)
						}
						return errs
					}, 8, inbox.SubscribeOptions{Form: form, Workers: 3, PollInterval: 10 * time.Millisecond, Lease: 2 * time.Second})
				}
				select {
				case <-log.all:
				case <-time.After(60 * time.Second):
					t.Fatalf("only %d of %d acked", log.acked, groups*perGroup)
				}
				log.inOrder(t, groups, perGroup)
			})
		}
	})
}
