package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// batchForms are the forms that take batches on dialect d.
func batchForms(d inbox.Dialect) []inbox.Form {
	if d == inbox.Postgres {
		return []inbox.Form{inbox.Lease, inbox.RowLock}
	}
	return []inbox.Form{inbox.Lease}
}

// startBatch starts a batch subscription and stops it at cleanup.
func startBatch(t *testing.T, q *inbox.Queue[msg], h inbox.BatchHandler[msg], n int, o inbox.SubscribeOptions) *inbox.Subscription[msg] {
	t.Helper()
	s, err := q.SubscribeBatch(h, n, o)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, s)
}

// TestBatchLeaseSettlesEachJob: in the lease form a batch handler gets up to n
// jobs at once, and each job settles on its own as its BatchErrors entry says:
// acks are acked once, dead letters dead, nothing lost.
func TestBatchLeaseSettlesEachJob(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		const jobs = 200
		batch := make([]msg, jobs)
		for i := range batch {
			batch[i] = msg{N: i}
		}
		if err := q.PublishBatch(t.Context(), batch, nil); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		handled := map[int]int{}
		largest := 0
		done := newTally(jobs)
		startBatch(t, q, func(ctx context.Context, js []inbox.Job[msg]) error {
			errs := make(inbox.BatchErrors, len(js))
			mu.Lock()
			largest = max(largest, len(js))
			for i, j := range js {
				handled[j.Payload.N]++
				if j.Payload.N%10 == 3 {
					errs[i] = inbox.DeadLetter(errors.New("bad job"))
				}
			}
			mu.Unlock()
			for _, j := range js {
				done.add(j.Payload.N)
			}
			return errs
		}, 16, inbox.SubscribeOptions{Workers: 2, PollInterval: 20 * time.Millisecond})
		done.wait(t, 30*time.Second)
		gotptest.Eventually(t, "every job settled", func() bool {
			st, err := q.Stats(t.Context())
			return err == nil && st.Dead == jobs/10 && st.Ready+st.InWork+st.Delayed == 0
		})
		mu.Lock()
		defer mu.Unlock()
		for i := range jobs {
			if handled[i] != 1 {
				t.Errorf("job %d handled %d times", i, handled[i])
			}
		}
		if largest > 16 || largest < 2 {
			t.Errorf("largest batch %d; want 2..16", largest)
		}
		dead, err := q.DeadLetters(t.Context(), jobs)
		if err != nil || len(dead) != jobs/10 || !strings.Contains(dead[0].LastError, "bad job") {
			t.Fatalf("dead letters %d, %v", len(dead), err)
		}
	})
}

// TestBatchLeasePanics: a batch handler that panics fails the attempt of every
// job of its batch; each is retried and dead-lettered at MaxAttempts with the
// *PanicError as its last error. Nothing is lost and nothing loops.
func TestBatchLeasePanics(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		const jobs = 40
		batch := make([]msg, jobs)
		for i := range batch {
			batch[i] = msg{N: i}
		}
		if err := q.PublishBatch(t.Context(), batch, nil); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		startBatch(t, q, func(ctx context.Context, js []inbox.Job[msg]) error {
			runs.Add(int64(len(js)))
			panic("batch handler bug")
		}, 16, inbox.SubscribeOptions{Workers: 2, MaxAttempts: 3, PollInterval: 20 * time.Millisecond,
			Backoff: func(int) time.Duration { return 0 }})
		gotptest.Eventually(t, "every job dead-lettered", func() bool {
			st, err := q.Stats(t.Context())
			return err == nil && st.Dead == jobs && st.Ready+st.InWork+st.Delayed == 0
		})
		if n := runs.Load(); n != 3*jobs {
			t.Errorf("%d job runs; want MaxAttempts × %d = %d", n, jobs, 3*jobs)
		}
		dead, err := q.DeadLetters(t.Context(), jobs)
		if err != nil || len(dead) != jobs {
			t.Fatalf("dead letters %d, %v", len(dead), err)
		}
		for _, d := range dead {
			if d.Attempts != 3 || !strings.Contains(d.LastError, "batch handler bug") {
				t.Fatalf("dead letter %+v; want 3 attempts and the panic", d)
			}
		}
	})
}

// TestSubscribeBatchRefuses: a batch of fewer than one job, a nil handler and the
// advisory lock form are refused with typed errors.
func TestSubscribeBatchRefuses(t *testing.T) {
	b := sqliteBackend(t)
	q := defaultTable(t, b)
	h := func(context.Context, []inbox.Job[msg]) error { return nil }
	if _, err := q.SubscribeBatch(h, 0, inbox.SubscribeOptions{}); !errors.As(err, new(*inbox.ConfigError)) {
		t.Errorf("size 0: %v; want a *ConfigError", err)
	}
	if _, err := q.SubscribeBatch(nil, 4, inbox.SubscribeOptions{}); !errors.As(err, new(*inbox.ConfigError)) {
		t.Errorf("nil handler: %v; want a *ConfigError", err)
	}
	if _, err := q.SubscribeBatch(h, 4, inbox.SubscribeOptions{Form: inbox.AdvisoryLock}); !errors.As(err, new(*inbox.FormError)) {
		t.Errorf("advisory form: %v; want a *FormError", err)
	}
}

// TestBatchLeaseCancelOne: in the lease form, Queue.Cancel of one job of a running
// batch ends the handler's context (cause ErrJobCancelled) and settles only that
// job as Cancelled: a job the handler finished is acked, and the jobs it stopped
// at the cancel (ctx.Err() as their result) are released, not failed: claimed
// again at once with their attempt not counted, then acked. Timings count one
// cancellation, not one per job of the batch.
func TestBatchLeaseCancelOne(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		publishN(t, q, 3)
		entered := make(chan int64, 1)
		res := make(chan inbox.Result, 16)
		var calls atomic.Int32
		startBatch(t, q, func(ctx context.Context, js []inbox.Job[msg]) error {
			if calls.Add(1) > 1 {
				return nil // the released jobs, claimed again
			}
			if len(js) != 3 {
				t.Errorf("first batch of %d jobs, want 3", len(js))
				return nil
			}
			entered <- js[1].ID
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), inbox.ErrJobCancelled) {
				t.Errorf("cause %v, want ErrJobCancelled", context.Cause(ctx))
			}
			return inbox.BatchErrors{nil, ctx.Err(), ctx.Err()} // the first was done before the cancel
		}, 8, inbox.SubscribeOptions{Workers: 1, PollInterval: 20 * time.Millisecond,
			Observe: func(r inbox.Result) { res <- r }})
		id := cancelEntered(t, q, entered)
		got := map[inbox.Outcome][]inbox.Result{}
		for _, r := range collect(t, res, 4) {
			if r.SettleErr != nil {
				t.Fatalf("result %+v", r)
			}
			got[r.Outcome] = append(got[r.Outcome], r)
		}
		if c := got[inbox.Cancelled]; len(c) != 1 || c[0].ID != id || !errors.Is(c[0].Err, inbox.ErrJobCancelled) {
			t.Fatalf("cancelled %+v, want job %d alone", c, id)
		}
		rel, ack := got[inbox.Released], got[inbox.Acked]
		if len(rel) != 1 || len(ack) != 2 || !errors.Is(rel[0].Err, context.Canceled) {
			t.Fatalf("released %+v, acked %+v: want one released (the job stopped) and two acked", rel, ack)
		}
		for _, a := range ack {
			if a.Attempt != 1 {
				t.Errorf("acked %+v: want attempt 1 (a release counts none)", a)
			}
		}
		st, err := q.Stats(t.Context())
		if err != nil || st.Cancelled != 1 || st.Ready+st.InWork+st.Delayed+st.Dead != 0 {
			t.Fatalf("stats %+v, %v: want one cancelled, nothing else left", st, err)
		}
		tm := q.Timings()
		if tm.Handle["cancel"].Count != 1 || tm.Handle["release"].Count != 1 || tm.Handle["ack"].Count != 2 {
			t.Fatalf("timings cancel %d, release %d, ack %d: want 1, 1, 2",
				tm.Handle["cancel"].Count, tm.Handle["release"].Count, tm.Handle["ack"].Count)
		}
	})
}

// TestBatchPanicsEveryForm: a panic in a batch handler, or in the Handle hook
// around it, is a *PanicError (with its stack) in every job's result, in both
// forms that take batches, on SQLite and Postgres: each job is retried, then
// dead-lettered at MaxAttempts with the panic as its last error; nothing is lost,
// nothing acked, nothing left in work.
func TestBatchPanicsEveryForm(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range batchForms(b.dialect) {
			for _, where := range []string{"handler", "hook"} {
				t.Run(strings.ReplaceAll(form.String(), " ", "-")+"/"+where, func(t *testing.T) {
					b := freshBackend(t, b.dialect)
					var hooks inbox.Hooks
					if where == "hook" {
						hooks.Handle = func(context.Context, inbox.JobInfo, func(context.Context) error) error { panic("hook bug") }
					}
					q := newQueue(t, b, inbox.Config[msg]{Hooks: hooks})
					if err := q.CreateTable(t.Context()); err != nil {
						t.Fatal(err)
					}
					const jobs, attempts = 12, 2
					publishN(t, q, jobs)
					res := make(chan inbox.Result, 4*jobs)
					startBatch(t, q, func(context.Context, []inbox.Job[msg]) error { panic("handler bug") }, 5,
						inbox.SubscribeOptions{Form: form, Workers: 2, MaxAttempts: attempts, PollInterval: 20 * time.Millisecond,
							Backoff: func(int) time.Duration { return 0 }, Observe: func(r inbox.Result) { res <- r }})
					out := map[inbox.Outcome]int{}
					for _, r := range collect(t, res, jobs*attempts) {
						pe, ok := errors.AsType[*inbox.PanicError](r.Err)
						if !ok || len(pe.Stack) == 0 || !strings.Contains(fmt.Sprint(pe.Value), where+" bug") || r.SettleErr != nil {
							t.Fatalf("result %+v, want a *PanicError of the %s with its stack", r, where)
						}
						out[r.Outcome]++
					}
					if out[inbox.Retried] != jobs*(attempts-1) || out[inbox.DeadLettered] != jobs {
						t.Fatalf("outcomes %v, want %d retried and %d dead", out, jobs*(attempts-1), jobs)
					}
					st, err := q.Stats(t.Context())
					if err != nil || st.Dead != jobs || st.Ready+st.InWork+st.Delayed != 0 {
						t.Fatalf("stats %+v, %v: want every job dead, nothing else", st, err)
					}
					dead, err := q.DeadLetters(t.Context(), jobs)
					if err != nil || len(dead) != jobs {
						t.Fatalf("dead letters %d, %v", len(dead), err)
					}
					for _, d := range dead {
						if d.Attempts != attempts || !strings.Contains(d.LastError, where+" bug") {
							t.Fatalf("dead letter %+v; want %d attempts and the panic", d, attempts)
						}
					}
				})
			}
		}
	})
}
