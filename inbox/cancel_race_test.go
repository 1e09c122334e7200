package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Cancel racing completion: each job is cancelled, from this instance or another,
// at a random moment of its run while 4 workers finish them in a few
// milliseconds. Each
// Cancel either wins (nil: the row ends cancelled, and no settlement reports an
// ack that was written) or finds the job done (an ErrNoJob, or a *JobStateError
// for one that finished while Cancel waited: the row is gone); no other error,
// no row both cancelled and acked, every row accounted for. Every form, both
// databases.
func TestCancelRacingCompletion(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		forms := []inbox.Form{inbox.Lease}
		if b.dialect == inbox.Postgres {
			forms = append(forms, inbox.RowLock, inbox.AdvisoryLock)
		}
		for _, form := range forms {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				q := defaultTable(t, b)
				other := newQueue(t, b, inbox.Config[msg]{})
				const jobs = 150
				batch := make([]msg, jobs)
				for i := range batch {
					batch[i] = msg{N: i}
				}
				if err := q.PublishBatch(t.Context(), batch, nil); err != nil {
					t.Fatal(err)
				}
				list, err := q.Jobs(t.Context(), inbox.ListOptions{Limit: inbox.MaxListLimit})
				if err != nil || len(list) != jobs {
					t.Fatalf("jobs %d, %v", len(list), err)
				}
				var mu sync.Mutex
				ackedOK := map[int64]bool{}
				settled := map[int64]inbox.Outcome{}
				started := make(chan int64, jobs)
				start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
					started <- j.ID
					select {
					case <-time.After(time.Duration(rand.IntN(10000)) * time.Microsecond):
					case <-ctx.Done():
					}
					return nil
				}, inbox.SubscribeOptions{Form: form, Workers: 4, PollInterval: 20 * time.Millisecond, Lease: 2 * time.Second,
					Observe: func(r inbox.Result) {
						mu.Lock()
						defer mu.Unlock()
						if r.Outcome == inbox.Acked && r.SettleErr == nil {
							ackedOK[r.ID] = true
						}
						if r.SettleErr == nil {
							settled[r.ID] = r.Outcome
						}
					}})
				won := map[int64]bool{}
				var wg sync.WaitGroup
				// Each job starts once (none is cancelled before it starts, none
				// fails): cancel it a random moment into its run, about as long,
				// from one instance or the other.
				for i := range jobs {
					var id int64
					select {
					case id = <-started:
					case <-time.After(20 * time.Second):
						t.Fatal("no job started within 20 s")
					}
					c := []*inbox.Queue[msg]{q, other}[i%2]
					wg.Go(func() {
						time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
						err := c.Cancel(t.Context(), id)
						var se *inbox.JobStateError
						switch {
						case err == nil:
							mu.Lock()
							won[id] = true
							mu.Unlock()
						case errors.Is(err, inbox.ErrNoJob), errors.As(err, &se) && se.State == inbox.StateProcessed:
						default:
							t.Errorf("cancel %d: %v", id, err)
						}
					})
				}
				wg.Wait()
				within(t, 20*time.Second, func() bool {
					st, err := q.Stats(t.Context())
					return err == nil && st.Ready+st.InWork+st.Delayed == 0
				}, "every job finished or cancelled")
				rows, err := q.Jobs(t.Context(), inbox.ListOptions{Limit: inbox.MaxListLimit})
				if err != nil {
					t.Fatal(err)
				}
				left := map[int64]inbox.JobState{}
				for _, r := range rows {
					left[r.ID] = r.State
				}
				mu.Lock()
				defer mu.Unlock()
				for _, j := range list {
					st, kept := left[j.ID]
					switch {
					case won[j.ID] && (!kept || st != inbox.StateCancelled):
						t.Errorf("job %d: Cancel returned nil, but the row is %q (kept %v)", j.ID, st, kept)
					case !won[j.ID] && kept:
						t.Errorf("job %d: Cancel lost, but the row is kept, %q", j.ID, st)
					case kept && ackedOK[j.ID]:
						t.Errorf("job %d: an ack was written, and the row is %q", j.ID, st)
					}
				}
				t.Logf("%d cancelled, %d finished first", len(won), jobs-len(won))
			})
		}
	})
}
