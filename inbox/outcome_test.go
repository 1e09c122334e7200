package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// results collects Observe reports and lets a test wait for a given one.
type results struct {
	mu  sync.Mutex
	all []inbox.Result
	ch  chan inbox.Result
}

func newResults() *results { return &results{ch: make(chan inbox.Result, 1024)} }

func (r *results) observe(x inbox.Result) {
	r.mu.Lock()
	r.all = append(r.all, x)
	r.mu.Unlock()
	r.ch <- x
}

// next waits for the next result.
func (r *results) next(t *testing.T) inbox.Result {
	t.Helper()
	select {
	case x := <-r.ch:
		return x
	case <-time.After(15 * time.Second):
		t.Fatal("no settlement within 15s")
		return inbox.Result{}
	}
}

func noBackoff(int) time.Duration { return 0 }

func TestFailingJobIsRetriedThenDeadLetteredAndRequeued(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		var fail sync.Map
		fail.Store(1, true)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if _, ok := fail.Load(1); ok {
				return errors.New("boom " + strings.Repeat("!", j.Attempt))
			}
			return nil
		}, inbox.SubscribeOptions{MaxAttempts: 3, Backoff: noBackoff, PollInterval: 20 * time.Millisecond, Observe: res.observe})
		id, err := q.Publish(t.Context(), msg{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 1; attempt <= 3; attempt++ {
			r := res.next(t)
			want := inbox.Retried
			if attempt == 3 {
				want = inbox.DeadLettered
			}
			if r.ID != id || r.Attempt != attempt || r.Outcome != want || r.SettleErr != nil {
				t.Fatalf("settlement %d = %+v, want attempt %d %v", attempt, r, attempt, want)
			}
		}
		dead, err := q.DeadLetters(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != id || dead[0].Attempts != 3 || dead[0].LastError != "boom !!!" {
			t.Fatalf("dead letters = %+v", dead)
		}
		st, err := q.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Dead != 1 || st.Ready != 0 || st.InWork != 0 || st.Delayed != 0 {
			t.Fatalf("stats = %+v, want one dead job", st)
		}
		// A dead letter is never claimed again until requeued.
		fail.Delete(1)
		n, err := q.Requeue(t.Context(), id)
		if err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		r := res.next(t)
		if r.ID != id || r.Attempt != 1 || r.Outcome != inbox.Acked {
			t.Fatalf("after requeue: %+v, want acked at attempt 1", r)
		}
	})
}

func TestPanickingHandlerIsRetriedNotLost(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Attempt == 1 {
				panic("handler bug")
			}
			return nil
		}, inbox.SubscribeOptions{Backoff: noBackoff, PollInterval: 20 * time.Millisecond, Observe: res.observe})
		if _, err := q.Publish(t.Context(), msg{N: 1}, nil); err != nil {
			t.Fatal(err)
		}
		r := res.next(t)
		pe, ok := errors.AsType[*inbox.PanicError](r.Err)
		if !ok || pe.Value != "handler bug" || len(pe.Stack) == 0 || r.Outcome != inbox.Retried {
			t.Fatalf("first attempt: %+v, want a retried *PanicError", r)
		}
		if r = res.next(t); r.Outcome != inbox.Acked || r.Attempt != 2 {
			t.Fatalf("second attempt: %+v, want acked", r)
		}
	})
}

func TestUndecodablePayloadIsDeadLetteredAndWorkerGoesOn(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		handled := make(chan int, 4)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			handled <- j.Payload.N
			return nil
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		b.exec(t, `INSERT INTO "`+b.table+`" (payload, priority) VALUES (`+b.ph(1)+`, -1)`, []byte("not json"))
		if _, err := q.Publish(t.Context(), msg{N: 5}, nil); err != nil {
			t.Fatal(err)
		}
		r := res.next(t)
		de, ok := errors.AsType[*inbox.DecodeError](r.Err)
		if !ok || r.Outcome != inbox.DeadLettered || de.ID != r.ID {
			t.Fatalf("undecodable job: %+v, want dead-lettered *DecodeError", r)
		}
		if n := <-handled; n != 5 {
			t.Fatalf("next job handled = %d, want 5", n)
		}
		dead, err := q.DeadLetters(t.Context(), 10)
		if err != nil || len(dead) != 1 || string(dead[0].Payload) != "not json" || !strings.Contains(dead[0].LastError, "decode") {
			t.Fatalf("dead letters = %+v, %v", dead, err)
		}
	})
}

func TestDropRetryDelayAndExplicitDeadLetter(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			switch j.Payload.Text {
			case "drop":
				return inbox.Drop(errors.New("unwanted"))
			case "dead":
				return inbox.DeadLetter(errors.New("poison"))
			case "later":
				if j.Attempt == 1 {
					return inbox.Retry(300 * time.Millisecond)
				}
			}
			return nil
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		for _, text := range []string{"drop", "dead", "later"} {
			if _, err := q.Publish(t.Context(), msg{Text: text}, nil); err != nil {
				t.Fatal(err)
			}
		}
		var retriedAt time.Time
		got := map[inbox.Outcome]int{}
		for range 4 {
			r := res.next(t)
			got[r.Outcome]++
			if r.Outcome == inbox.Retried {
				retriedAt = time.Now()
			}
			if r.Outcome == inbox.Acked && time.Since(retriedAt) < 250*time.Millisecond {
				t.Fatalf("retry after 300ms ran again after %v", time.Since(retriedAt))
			}
		}
		want := map[inbox.Outcome]int{inbox.Dropped: 1, inbox.DeadLettered: 1, inbox.Retried: 1, inbox.Acked: 1}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("outcomes = %v, want %v", got, want)
			}
		}
		st, err := q.Stats(t.Context())
		if err != nil || st != (inbox.Stats{Dead: 1}) {
			t.Fatalf("stats = %+v, %v; want only the dead letter left", st, err)
		}
	})
}

func TestDelayedJobWaitsForRunAt(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		startedAt := make(chan time.Time, 1)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			startedAt <- time.Now()
			return nil
		}, inbox.SubscribeOptions{PollInterval: 50 * time.Millisecond})
		runAt := time.Now().Add(400 * time.Millisecond)
		if _, err := q.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{RunAt: runAt}); err != nil {
			t.Fatal(err)
		}
		st, err := q.Stats(t.Context())
		if err != nil || st.Delayed != 1 {
			t.Fatalf("stats right after a delayed publish = %+v, %v; want 1 delayed", st, err)
		}
		select {
		case at := <-startedAt:
			if at.Before(runAt) {
				t.Fatalf("delayed job started %v before its run time", runAt.Sub(at))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("delayed job never ran")
		}
	})
}

func TestPriorityOrdersClaims(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		for i, p := range []int{5, 1, 3} {
			if _, err := q.Publish(t.Context(), msg{N: p}, &inbox.PublishOpts{Priority: p}); err != nil {
				t.Fatal(err, i)
			}
		}
		order := make(chan int, 3)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			order <- j.Payload.N
			return nil
		}, inbox.SubscribeOptions{Workers: 1})
		for _, want := range []int{1, 3, 5} {
			if got := <-order; got != want {
				t.Fatalf("claimed priority %d, want %d", got, want)
			}
		}
	})
}

func TestBatchPublishIsAllOrNothingAndHandled(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		jobs := make([]msg, 500)
		for i := range jobs {
			jobs[i] = msg{N: i}
		}
		if err := q.PublishBatch(t.Context(), jobs, nil); err != nil {
			t.Fatal(err)
		}
		c := newTally(len(jobs))
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			c.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 4})
		c.wait(t, 30*time.Second)
		c.exactlyOnce(t)
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`) == 0
		}, "every ack written")
		// In a transaction that rolls back, none of the batch exists.
		tx, err := beginTx(t.Context(), b.newDB(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.PublishBatchTx(t.Context(), tx.tx, jobs[:10], nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.rollback(); err != nil {
			t.Fatal(err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 0 {
			t.Fatalf("%d rows after a rolled-back batch", n)
		}
	})
}
