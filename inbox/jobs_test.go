package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// jobsFixture fills a default table with jobs in every state a subscription can
// leave them: ready, delayed (RunAt an hour ahead), dead (dead-lettered by the
// handler) and in work (a handler that holds its job until release is closed).
type jobsFixture struct {
	q                     *inbox.Queue[msg]
	delayed, dead, inWork []int64
	release               chan struct{}
}

const (
	nDead   = 100000 // payload numbers the handler dead-letters from
	nInWork = 200000 // and holds from
)

func newJobsFixture(t *testing.T, b *backend, form inbox.Form) *jobsFixture {
	t.Helper()
	ctx := t.Context()
	f := &jobsFixture{q: defaultTable(t, b), release: make(chan struct{})}
	pub := func(n int, o *inbox.PublishOpts) int64 {
		id, err := f.q.Publish(ctx, msg{N: n, Text: "job"}, o)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := range 2 {
		f.dead = append(f.dead, pub(nDead+i, nil))
	}
	f.inWork = append(f.inWork, pub(nInWork, nil))
	started := make(chan int64, 1)
	settled := make(chan inbox.Result, 8)
	start(t, f.q, func(ctx context.Context, j inbox.Job[msg]) error {
		if j.Payload.N >= nInWork {
			started <- j.ID
			select {
			case <-f.release:
			case <-ctx.Done():
			}
			return nil
		}
		if j.Payload.N >= nDead {
			return inbox.DeadLetter(errors.New("refused: bad invoice"))
		}
		return nil
	}, inbox.SubscribeOptions{Workers: 3, Form: form, PollInterval: 20 * time.Millisecond, Observe: func(r inbox.Result) {
		select {
		case settled <- r:
		default:
		}
	}})
	t.Cleanup(func() { // before the subscription's Stop (cleanups run last first)
		select {
		case <-f.release:
		default:
			close(f.release)
		}
	})
	<-started
	for range f.dead {
		if r := <-settled; r.Outcome != inbox.DeadLettered {
			t.Fatalf("fixture: %+v", r)
		}
	}
	// Delayed an hour: no claim takes them during the test.
	for i := range 3 {
		f.delayed = append(f.delayed, pub(i, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)}))
	}
	return f
}

// addReady adds ready jobs with no subscription running to take them.
func addReady(t *testing.T, q *inbox.Queue[msg], n int) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		id, err := q.Publish(t.Context(), msg{N: i, Text: strings.Repeat("x", 10)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func listIDs(t *testing.T, q *inbox.Queue[msg], st inbox.JobState, limit int) []int64 {
	t.Helper()
	var ids []int64
	after := int64(0)
	for {
		page, err := q.Jobs(t.Context(), inbox.ListOptions{State: st, AfterID: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d > limit %d", len(page), limit)
		}
		for _, j := range page {
			if st != "" && j.State != st {
				t.Fatalf("listing %s returned %+v", st, j)
			}
			ids = append(ids, j.ID)
		}
		if len(page) < limit {
			return ids
		}
		after = page[len(page)-1].ID
	}
}

// Jobs lists each state's jobs, paged by id, every job in exactly the list of its
// state; Job shows a job's payload and last error.
func TestJobsListedByStateAndPaged(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		f := newJobsFixture(t, b, inbox.Lease)
		q := f.q
		for st, want := range map[inbox.JobState][]int64{
			inbox.StateInWork: f.inWork, inbox.StateDelayed: f.delayed, inbox.StateDead: f.dead,
		} {
			for _, limit := range []int{1, 2, 500} {
				if got := listIDs(t, q, st, limit); !slices.Equal(got, want) {
					t.Errorf("%s (limit %d): %v, want %v", st, limit, got, want)
				}
			}
		}
		all := listIDs(t, q, "", 2)
		want := slices.Sorted(slices.Values(slices.Concat(f.inWork, f.delayed, f.dead)))
		if !slices.Equal(all, want) {
			t.Errorf("all jobs %v, want %v", all, want)
		}
		st, err := q.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.InWork != 1 || st.Delayed != 3 || st.Dead != 2 {
			t.Errorf("stats %+v", st)
		}

		d, err := q.Job(t.Context(), f.dead[0])
		if err != nil {
			t.Fatal(err)
		}
		var m msg
		if err := json.Unmarshal(d.Payload, &m); err != nil || m.N != nDead {
			t.Errorf("dead job payload %q (%v)", d.Payload, err)
		}
		if d.State != inbox.StateDead || d.Attempts != 1 || !strings.Contains(d.LastError, "refused: bad invoice") || d.DeadAt.IsZero() {
			t.Errorf("dead job %+v", d)
		}
		w, err := q.Job(t.Context(), f.inWork[0])
		if err != nil {
			t.Fatal(err)
		}
		if w.State != inbox.StateInWork || w.ClaimedAt.IsZero() || !w.LockedUntil.After(time.Now()) {
			t.Errorf("job in work %+v", w)
		}
		dl, err := q.Job(t.Context(), f.delayed[0])
		if err != nil {
			t.Fatal(err)
		}
		if dl.State != inbox.StateDelayed || dl.Attempts != 0 || time.Until(dl.LockedUntil) < 50*time.Minute {
			t.Errorf("delayed job %+v", dl)
		}
		if _, err := q.Job(t.Context(), 987654321); !errors.Is(err, inbox.ErrNoJob) {
			t.Errorf("unknown id: %v, want ErrNoJob", err)
		}
	})
}

// A listed payload is cut to ListPayloadLimit bytes; Job returns it whole.
func TestJobsCutLongPayloads(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		long := strings.Repeat("é", inbox.ListPayloadLimit)
		id, err := q.Publish(t.Context(), msg{Text: long}, nil)
		if err != nil {
			t.Fatal(err)
		}
		page, err := q.Jobs(t.Context(), inbox.ListOptions{State: inbox.StateReady, Limit: 10})
		if err != nil || len(page) != 1 {
			t.Fatalf("%v %v", page, err)
		}
		if len(page[0].Payload) != inbox.ListPayloadLimit || page[0].PayloadSize <= inbox.ListPayloadLimit {
			t.Fatalf("listed payload %d bytes of %d", len(page[0].Payload), page[0].PayloadSize)
		}
		j, err := q.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		var m msg
		if err := json.Unmarshal(j.Payload, &m); err != nil || m.Text != long || j.PayloadSize != len(j.Payload) {
			t.Fatalf("whole payload: %v, size %d", err, j.PayloadSize)
		}
	})
}

// Bad listing options are a *ConfigError, before any statement.
func TestJobsRefuseBadOptions(t *testing.T) {
	b := sqliteBackend(t)
	q := defaultTable(t, b)
	for _, o := range []inbox.ListOptions{{Limit: 0}, {Limit: inbox.MaxListLimit + 1}, {Limit: -1}, {Limit: 5, State: "running"}} {
		if _, err := q.Jobs(t.Context(), o); !isConfigError(err) {
			t.Errorf("Jobs(%+v) = %v, want a *ConfigError", o, err)
		}
	}
	if _, err := inbox.ParseJobState("Ready"); !isConfigError(err) {
		t.Errorf("ParseJobState(Ready) = %v", err)
	}
	for _, s := range []string{"ready", "in_work", "delayed", "dead", "processed", "invalid"} {
		if st, err := inbox.ParseJobState(s); err != nil || string(st) != s {
			t.Errorf("ParseJobState(%q) = %q, %v", s, st, err)
		}
	}
}

func stateErr(err error) *inbox.JobStateError {
	e, _ := errors.AsType[*inbox.JobStateError](err)
	return e
}

// RetryJob makes a dead letter ready with its attempts reset and a delayed job
// ready now; a ready job is left; a job in work, or an unknown id, is refused.
func TestRetryJob(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		f := newJobsFixture(t, b, inbox.Lease)
		q := f.q
		ctx := t.Context()
		if e := stateErr(q.RetryJob(ctx, f.inWork[0])); e == nil || e.State != inbox.StateInWork || e.Op != "retry" || e.ID != f.inWork[0] {
			t.Fatalf("retry of a job in work: %v", e)
		}
		if err := q.RetryJob(ctx, 987654321); !errors.Is(err, inbox.ErrNoJob) {
			t.Fatalf("retry of an unknown id: %v", err)
		}
		// Retried dead letters are claimed again by the running subscription
		// (and dead-lettered again: the handler refuses them), attempts from 0.
		for _, id := range f.dead {
			if err := q.RetryJob(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		within(t, 10*time.Second, func() bool {
			for _, id := range f.dead {
				j, err := q.Job(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if j.State != inbox.StateDead || j.Attempts != 1 || !j.ClaimedAt.IsZero() {
					return false
				}
			}
			return true
		}, "retried dead letters handled again, their attempt 1")
		// A delayed job becomes ready now, its attempts kept.
		if err := q.RetryJob(ctx, f.delayed[0]); err != nil {
			t.Fatal(err)
		}
		within(t, 10*time.Second, func() bool {
			_, err := q.Job(ctx, f.delayed[0])
			return errors.Is(err, inbox.ErrNoJob) // handled: acked (N < nDead) and deleted
		}, "the retried delayed job handled")
		for _, id := range f.delayed[1:] {
			if j, err := q.Job(ctx, id); err != nil || j.State != inbox.StateDelayed {
				t.Fatalf("an untouched delayed job: %+v %v", j, err)
			}
		}
	})
}

// A ready job is left as it is by RetryJob.
func TestRetryReadyJobIsANoOp(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		id := addReady(t, q, 1)[0]
		before, err := q.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.RetryJob(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		after, err := q.Job(t.Context(), id)
		if err != nil || !after.LockedUntil.Equal(before.LockedUntil) || after.State != inbox.StateReady {
			t.Fatalf("before %+v after %+v (%v)", before, after, err)
		}
	})
}

// Without a ClaimedAt column a job in work looks delayed: RetryJob refuses to make
// a delayed job ready there, since it might be running.
func TestRetryDelayedNeedsClaimedAt(t *testing.T) {
	b := sqliteBackend(t)
	defaultTable(t, b)
	cols := inbox.DefaultColumns()
	cols.ClaimedAt = ""
	q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
	id, err := q.Publish(t.Context(), msg{}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if e := stateErr(q.RetryJob(t.Context(), id)); e == nil || e.State != inbox.StateDelayed || !strings.Contains(e.Error(), "ClaimedAt") {
		t.Fatalf("retry of a delayed job without ClaimedAt: %v", e)
	}
}

// DeleteJob deletes jobs in any state but in work; an unknown id is ErrNoJob.
func TestDeleteJob(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		f := newJobsFixture(t, b, inbox.Lease)
		q := f.q
		ctx := t.Context()
		if e := stateErr(q.DeleteJob(ctx, f.inWork[0])); e == nil || e.State != inbox.StateInWork || e.Op != "delete" {
			t.Fatalf("delete of a job in work: %v", e)
		}
		for _, id := range []int64{f.dead[0], f.delayed[0]} {
			if err := q.DeleteJob(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Job(ctx, id); !errors.Is(err, inbox.ErrNoJob) {
				t.Fatalf("deleted job %d still there: %v", id, err)
			}
			if err := q.DeleteJob(ctx, id); !errors.Is(err, inbox.ErrNoJob) {
				t.Fatalf("second delete of %d: %v", id, err)
			}
		}
		if got := listIDs(t, q, "", 10); !slices.Equal(got, slices.Sorted(slices.Values(slices.Concat(f.dead[1:], f.inWork, f.delayed[1:])))) {
			t.Fatalf("left %v", got)
		}
		close(f.release)
		within(t, 10*time.Second, func() bool {
			_, err := q.Job(ctx, f.inWork[0])
			return errors.Is(err, inbox.ErrNoJob)
		}, "the released job acked")
	})
}

// In the lock forms a job in work holds a lock, not a lease: RetryJob and DeleteJob
// see it in work at once, without waiting for the lock.
func TestJobsHeldByLockFormsAreInWork(t *testing.T) {
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(form.String(), func(t *testing.T) {
			b := pgBackend(t)
			f := newJobsFixture(t, b, form)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			for op, do := range map[string]func(context.Context, int64) error{"retry": f.q.RetryJob, "delete": f.q.DeleteJob} {
				e := stateErr(do(ctx, f.inWork[0]))
				if e == nil || e.State != inbox.StateInWork || e.Op != op || !strings.Contains(e.Reason, "claim holds it") {
					t.Fatalf("%s of a locked job: %v", op, e)
				}
			}
			if ctx.Err() != nil {
				t.Fatal("waited for the lock")
			}
			if err := f.q.DeleteJob(ctx, f.dead[0]); err != nil {
				t.Fatal(err)
			}
		})
	}
}
