package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

func TestCancelReadyAndDelayedJobs(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		ready, err := q.Publish(t.Context(), msg{N: 0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		delayed, err := q.Publish(t.Context(), msg{N: 2}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{ready, delayed, ready} { // twice: idempotent
			if err := q.Cancel(t.Context(), id); err != nil {
				t.Fatalf("cancel %d: %v", id, err)
			}
		}
		if st, err := q.Stats(t.Context()); err != nil || st != (inbox.Stats{Cancelled: 2}) {
			t.Fatalf("stats = %+v, %v", st, err)
		}
		if dl, err := q.DeadLetters(t.Context(), 10); err != nil || len(dl) != 0 {
			t.Fatalf("dead letters = %v, %v; cancelled jobs are not dead letters", dl, err)
		}
		var handled atomic.Int64
		c := newTally(1)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			handled.Add(1)
			c.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond})
		// Requeue makes a cancelled job ready again: it is then the only one handled.
		if n, err := q.Requeue(t.Context(), ready); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		c.wait(t, 10*time.Second)
		c.exactlyOnce(t)
		if handled.Load() != 1 {
			t.Fatalf("handled %d jobs", handled.Load())
		}
	})
}

func TestCancelUnknownDeadAndUnsupported(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		err := q.Cancel(t.Context(), 12345)
		var ne *inbox.NoJobError
		if !errors.Is(err, inbox.ErrNoJob) || !errors.As(err, &ne) || ne.ID != 12345 {
			t.Fatalf("unknown id: err = %v", err)
		}
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			return inbox.DeadLetter(errors.New("no"))
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		id, err := q.Publish(t.Context(), msg{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := res.next(t); r.Outcome != inbox.DeadLettered {
			t.Fatalf("outcome %v", r.Outcome)
		}
		var se *inbox.JobStateError
		if err := q.Cancel(t.Context(), id); !errors.As(err, &se) || se.State != inbox.StateDead || se.Op != "cancel" {
			t.Fatalf("dead job: err = %v", err)
		}
		// A mapped table without a CancelledAt column refuses Cancel.
		c := inbox.DefaultColumns()
		c.CancelledAt = ""
		q2 := newQueue(t, b, inbox.Config[msg]{Columns: c})
		var ce *inbox.ConfigError
		if err := q2.Cancel(t.Context(), id); !errors.As(err, &ce) {
			t.Fatalf("no column: err = %v", err)
		}
	})
}

// forms lists the claim forms a backend can run.
func forms(b *backend) []inbox.Form {
	if b.dialect == inbox.Postgres {
		return []inbox.Form{inbox.Lease, inbox.RowLock, inbox.AdvisoryLock}
	}
	return []inbox.Form{inbox.Lease}
}

// A job in work is cancelled from this instance and from another (its own pool, its
// own Queue): the handler's context is cancelled with ErrJobCancelled, and the
// settlement records Cancelled even though the handler returns nil.
func TestCancelJobInWorkAcrossInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		other := newQueue(t, b, inbox.Config[msg]{})
		for _, form := range forms(b) {
			for _, via := range []struct {
				name string
				q    *inbox.Queue[msg]
			}{{"same instance", q}, {"other instance", other}} {
				t.Run(form.String()+"/"+via.name, func(t *testing.T) {
					res := newResults()
					started := make(chan int64, 1)
					causes := make(chan error, 1)
					s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
						started <- j.ID
						select {
						case <-ctx.Done():
							causes <- context.Cause(ctx)
						case <-time.After(20 * time.Second):
							causes <- errors.New("not cancelled")
						}
						return nil // ignored: the job was cancelled
					}, inbox.SubscribeOptions{Form: form, PollInterval: 50 * time.Millisecond, Lease: 30 * time.Second, Observe: res.observe})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Start(t.Context()); err != nil {
						t.Fatal(err)
					}
					defer func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := s.Stop(ctx); err != nil {
							t.Error(err)
						}
					}()
					id, err := q.Publish(t.Context(), msg{N: 1}, nil)
					if err != nil {
						t.Fatal(err)
					}
					if got := <-started; got != id {
						t.Fatalf("started %d, published %d", got, id)
					}
					asked := time.Now()
					if err := via.q.Cancel(t.Context(), id); err != nil {
						t.Fatal(err)
					}
					if cause := <-causes; !errors.Is(cause, inbox.ErrJobCancelled) {
						t.Fatalf("handler's cause = %v", cause)
					}
					// Generous: the heartbeat of a held connection is 1 s.
					if d := time.Since(asked); d > 5*time.Second {
						t.Errorf("handler cancelled %v after Cancel", d)
					}
					r := res.next(t)
					if r.ID != id || r.Outcome != inbox.Cancelled || r.SettleErr != nil {
						t.Fatalf("result = %+v, want cancelled", r)
					}
					within(t, 5*time.Second, func() bool {
						st, err := q.Stats(t.Context())
						return err == nil && st == inbox.Stats{Cancelled: 1}
					}, "the row is cancelled")
					if err := q.Cancel(t.Context(), id); err != nil {
						t.Fatalf("cancel again: %v", err)
					}
					b.exec(t, `DELETE FROM "`+b.table+`"`)
				})
			}
		}
	})
}

// A snoozed job runs again after its delay without counting the attempt, and is
// never dead-lettered by snoozing.
func TestSnoozeDoesNotCountAnAttempt(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		for _, form := range forms(b) {
			t.Run(form.String(), func(t *testing.T) {
				res := newResults()
				var runs atomic.Int64
				var mu sync.Mutex
				var starts []time.Time
				start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					if runs.Add(1) <= 3 {
						return inbox.Snooze(100 * time.Millisecond)
					}
					return nil
				}, inbox.SubscribeOptions{Form: form, MaxAttempts: 2, PollInterval: 20 * time.Millisecond, Observe: res.observe})
				if _, err := q.Publish(t.Context(), msg{N: 1}, nil); err != nil {
					t.Fatal(err)
				}
				for i := range 4 {
					r := res.next(t)
					if r.Attempt != 1 {
						t.Fatalf("run %d: attempt %d, want 1 (snoozes are not attempts)", i, r.Attempt)
					}
					want := inbox.Snoozed
					if i == 3 {
						want = inbox.Acked
					}
					if r.Outcome != want || r.SettleErr != nil {
						t.Fatalf("run %d: %+v", i, r)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for i := 1; i < len(starts); i++ {
					if d := starts[i].Sub(starts[i-1]); d < 100*time.Millisecond {
						t.Errorf("run %d started %v after the one before; the snooze is 100ms", i, d)
					}
				}
			})
		}
	})
}
