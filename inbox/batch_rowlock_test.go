package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// startBatchRowLock starts a RowLock batch subscription of n jobs per call and
// stops it at cleanup; its results go to the returned channel (large enough for
// the test's jobs).
func startBatchRowLock(t *testing.T, q *inbox.Queue[msg], n int, h inbox.BatchHandler[msg], o inbox.SubscribeOptions) chan inbox.Result {
	t.Helper()
	res := make(chan inbox.Result, 4096)
	o.Form = inbox.RowLock
	o.PollInterval = 20 * time.Millisecond
	if o.Backoff == nil {
		o.Backoff = func(int) time.Duration { return 0 }
	}
	o.Observe = func(r inbox.Result) { res <- r }
	s, err := q.SubscribeBatch(h, n, o)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	run(t, s)
	return res
}

// collect reads results until want have arrived.
func collect(t *testing.T, res chan inbox.Result, want int) []inbox.Result {
	t.Helper()
	out := make([]inbox.Result, 0, want)
	deadline := time.After(60 * time.Second)
	for len(out) < want {
		select {
		case r := <-res:
			out = append(out, r)
		case <-deadline:
			t.Fatalf("%d of %d results after 60s: %+v", len(out), want, out)
		}
	}
	return out
}

func publishN(t *testing.T, q *inbox.Queue[msg], n int) {
	t.Helper()
	jobs := make([]msg, n)
	for i := range jobs {
		jobs[i] = msg{N: i}
	}
	if err := q.PublishBatch(t.Context(), jobs, nil); err != nil {
		t.Fatal(err)
	}
}

// TestBatchRowLockCommitsTogether: one claim hands the handler up to n rows (a
// backlog of 40 with n = 16: 16, 16, 8), each job is acked once, and the table is
// empty of work afterwards.
func TestBatchRowLockCommitsTogether(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 40)
	var mu sync.Mutex
	var sizes []int
	seen := map[int]int{}
	res := startBatchRowLock(t, q, 16, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(jobs))
		for _, j := range jobs {
			seen[j.Payload.N]++
		}
		return nil
	}, inbox.SubscribeOptions{})
	for _, r := range collect(t, res, 40) {
		if r.Outcome != inbox.Acked || r.SettleErr != nil {
			t.Fatalf("result %+v, want acked", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 3 || sizes[0] != 16 || sizes[1] != 16 || sizes[2] != 8 {
		t.Fatalf("batch sizes %v, want [16 16 8]", sizes)
	}
	for i := range 40 {
		if seen[i] != 1 {
			t.Fatalf("job %d handled %d times", i, seen[i])
		}
	}
	if st, err := q.Stats(t.Context()); err != nil || st.Ready+st.InWork+st.Delayed+st.Dead != 0 {
		t.Fatalf("stats %+v, %v: want nothing left", st, err)
	}
}

// TestBatchRowLockFailureRollsBack: one job's failure rolls the batch back: every
// job of the batch, the ones the handler said were done included, is retried with
// a *BatchFailedError naming the failed job, its attempt counted; the next attempt
// acks them all.
func TestBatchRowLockFailureRollsBack(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 4)
	boom := errors.New("boom")
	var failedID int64
	res := startBatchRowLock(t, q, 8, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		if jobs[0].Attempt > 1 {
			return nil
		}
		errs := make(inbox.BatchErrors, len(jobs))
		errs[2] = boom
		failedID = jobs[2].ID
		return errs
	}, inbox.SubscribeOptions{})
	first := collect(t, res, 4)
	for _, r := range first {
		var bf *inbox.BatchFailedError
		if r.Outcome != inbox.Retried || !errors.As(r.Err, &bf) || bf.ID != failedID || bf.Jobs != 4 || !errors.Is(r.Err, boom) || r.Attempt != 1 {
			t.Fatalf("first result %+v, want retried with a *BatchFailedError of job %d wrapping boom", r, failedID)
		}
	}
	for _, r := range collect(t, res, 4) {
		if r.Outcome != inbox.Acked || r.Attempt != 2 || r.SettleErr != nil {
			t.Fatalf("second result %+v, want acked at attempt 2", r)
		}
	}
}

// TestBatchRowLockVerdicts: entries that say how to settle (Drop, Snooze, nil) are
// not failures: they commit together, each as its entry says.
func TestBatchRowLockVerdicts(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 3)
	res := startBatchRowLock(t, q, 8, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		errs := make(inbox.BatchErrors, len(jobs))
		for i, j := range jobs {
			switch j.Payload.N {
			case 1:
				errs[i] = inbox.Drop(errors.New("unwanted"))
			case 2:
				errs[i] = inbox.Snooze(time.Hour)
			}
		}
		return errs
	}, inbox.SubscribeOptions{})
	got := map[inbox.Outcome]int{}
	for _, r := range collect(t, res, 3) {
		if r.SettleErr != nil {
			t.Fatalf("result %+v", r)
		}
		got[r.Outcome]++
	}
	if got[inbox.Acked] != 1 || got[inbox.Dropped] != 1 || got[inbox.Snoozed] != 1 {
		t.Fatalf("outcomes %v, want one each of acked, dropped, snoozed", got)
	}
}

// TestBatchRowLockPanic: a batch handler that panics every time loses nothing:
// every job of the batch is retried, then dead-lettered at MaxAttempts with a
// *BatchFailedError wrapping the *PanicError as its last error.
func TestBatchRowLockPanic(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 5)
	res := startBatchRowLock(t, q, 16, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		panic("batch handler bug")
	}, inbox.SubscribeOptions{MaxAttempts: 3})
	out := map[inbox.Outcome]int{}
	for _, r := range collect(t, res, 15) {
		var pe *inbox.PanicError
		if !errors.As(r.Err, &pe) || r.SettleErr != nil {
			t.Fatalf("result %+v, want a *PanicError", r)
		}
		out[r.Outcome]++
	}
	if out[inbox.Retried] != 10 || out[inbox.DeadLettered] != 5 {
		t.Fatalf("outcomes %v, want 10 retried and 5 dead-lettered", out)
	}
	dead, err := q.DeadLetters(t.Context(), 10)
	if err != nil || len(dead) != 5 {
		t.Fatalf("dead letters %v, %v: want 5", dead, err)
	}
	if st, err := q.Stats(t.Context()); err != nil || st.Ready+st.InWork+st.Delayed != 0 || st.Dead != 5 {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

// TestBatchRowLockCancel: Queue.Cancel of one job of a held batch cancels the
// handler's context; that job is settled as Cancelled, the others as the handler
// says (here: done), and Cancel returns once the batch has committed.
func TestBatchRowLockCancel(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 3)
	entered := make(chan int64, 1)
	res := startBatchRowLock(t, q, 8, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		entered <- jobs[1].ID
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), inbox.ErrJobCancelled) {
			return context.Cause(ctx)
		}
		return nil
	}, inbox.SubscribeOptions{})
	id := cancelEntered(t, q, entered)
	for _, r := range collect(t, res, 3) {
		want := inbox.Acked
		if r.ID == id {
			want = inbox.Cancelled
		}
		if r.Outcome != want || r.SettleErr != nil {
			t.Fatalf("result %+v, want %v", r, want)
		}
	}
	if st, err := q.Stats(t.Context()); err != nil || st.Cancelled != 1 || st.Ready+st.InWork+st.Delayed != 0 {
		t.Fatalf("stats %+v, %v: want one cancelled, nothing else left", st, err)
	}
}

// TestBatchRowLockCancelStopsBatch: a handler that stops at the cancel of one job
// and returns ctx.Err() for the whole batch does not roll it back as a failure: the
// cancelled job is Cancelled, the others are released (attempt not counted) and
// acked on their next claim; no *BatchFailedError, nothing dead.
func TestBatchRowLockCancelStopsBatch(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	publishN(t, q, 3)
	entered := make(chan int64, 1)
	var mu sync.Mutex
	calls := 0
	res := startBatchRowLock(t, q, 8, func(ctx context.Context, jobs []inbox.Job[msg]) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if !first {
			return nil
		}
		entered <- jobs[1].ID
		<-ctx.Done()
		return ctx.Err()
	}, inbox.SubscribeOptions{})
	id := cancelEntered(t, q, entered)
	got := map[inbox.Outcome]int{}
	for _, r := range collect(t, res, 5) {
		if r.SettleErr != nil || errors.As(r.Err, new(*inbox.BatchFailedError)) {
			t.Fatalf("result %+v", r)
		}
		if r.Outcome == inbox.Cancelled && r.ID != id {
			t.Fatalf("result %+v: only job %d was cancelled", r, id)
		}
		if r.Outcome == inbox.Acked && r.Attempt != 1 {
			t.Fatalf("result %+v: want attempt 1 (a release counts none)", r)
		}
		got[r.Outcome]++
	}
	if got[inbox.Cancelled] != 1 || got[inbox.Released] != 2 || got[inbox.Acked] != 2 {
		t.Fatalf("outcomes %v, want 1 cancelled, 2 released, 2 acked", got)
	}
	if st, err := q.Stats(t.Context()); err != nil || st.Cancelled != 1 || st.Ready+st.InWork+st.Delayed+st.Dead != 0 {
		t.Fatalf("stats %+v, %v: want one cancelled, nothing else left", st, err)
	}
}

// cancelEntered waits for a handler to send the id of the job it is in work on
// and cancels that job.
func cancelEntered(t *testing.T, q *inbox.Queue[msg], entered <-chan int64) int64 {
	t.Helper()
	var id int64
	select {
	case id = <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("handler not called")
	}
	if err := q.Cancel(t.Context(), id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	return id
}
