package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// settledLog collects a subscription's settled attempts.
type settledLog struct {
	mu  sync.Mutex
	all []inbox.Result
	ch  chan struct{}
}

func newSettledLog() *settledLog { return &settledLog{ch: make(chan struct{}, 1000)} }

func (r *settledLog) observe(res inbox.Result) {
	r.mu.Lock()
	r.all = append(r.all, res)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *settledLog) wait(t *testing.T, n int) []inbox.Result {
	t.Helper()
	for range n {
		select {
		case <-r.ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("fewer than %d attempts settled", n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]inbox.Result(nil), r.all...)
}

// Timings count every attempt by the outcome its handler chose, with how long it
// ran; and, on the default schema (created_at), the delay from publish to the first
// attempt, run-at delays included.
func TestTimingsByOutcome(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		ctx := t.Context()
		const slow = 60 * time.Millisecond
		res := newSettledLog()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			switch j.Payload.Text {
			case "slow":
				time.Sleep(slow) // the duration is what is measured
			case "retry-once":
				if j.Attempt == 1 {
					return inbox.Retry(0)
				}
			case "dead":
				return inbox.DeadLetter(errors.New("no"))
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 2, PollInterval: 10 * time.Millisecond, Observe: res.observe})
		for _, text := range []string{"slow", "retry-once", "dead", "", ""} {
			if _, err := q.Publish(ctx, msg{Text: text}, nil); err != nil {
				t.Fatal(err)
			}
		}
		const delay = 300 * time.Millisecond
		t0 := time.Now()
		if _, err := q.Publish(ctx, msg{Text: "later"}, &inbox.PublishOpts{RunAt: t0.Add(delay)}); err != nil {
			t.Fatal(err)
		}
		// The delay runs from the row's created_at, stamped as the publish runs:
		// a publish that waited for SQLite's write lock (150 ms once, in CI under
		// load) leaves less of it.
		least := (delay - time.Since(t0)).Seconds()
		res.wait(t, 7) // six jobs, one of them twice
		tm := q.Timings()
		for outcome, want := range map[string]uint64{"ack": 5, "retry": 1, "dead": 1, "drop": 0, "release": 0} {
			h := tm.Handle[outcome]
			if h.Count != want {
				t.Errorf("%s: %d attempts timed, want %d", outcome, h.Count, want)
			}
			var prev uint64
			for _, ub := range []float64{0.001, 0.01, 0.1, 1, 3600} {
				if h.Buckets[ub] < prev || h.Buckets[ub] > h.Count {
					t.Errorf("%s: bucket %v = %d, not cumulative (count %d)", outcome, ub, h.Buckets[ub], h.Count)
				}
				prev = h.Buckets[ub]
			}
		}
		if ack := tm.Handle["ack"]; ack.Sum < slow.Seconds() || ack.Buckets[0.05] > ack.Count-1 {
			t.Errorf("the slow handler not timed: %+v", ack)
		}
		// First attempts only: six jobs, the retried one once.
		below := 0.0 // the largest bucket bound the later job's delay must pass
		for _, ub := range []float64{0.001, 0.01, 0.1, 0.25} {
			if ub < least {
				below = ub
			}
		}
		if d := tm.StartDelay; d.Count != 6 || d.Sum < least || (below > 0 && d.Buckets[below] > 5) {
			t.Errorf("start delay %+v: want 6 first attempts, one after %.3fs (%v less the publish's time)", d, least, delay)
		}
		if got := q.Outcomes(); got["ack"] != 5 || got["retry"] != 1 || got["dead"] != 1 {
			t.Errorf("outcomes %v", got)
		}
	})
}

// The lock forms are timed too.
func TestTimingsLockForms(t *testing.T) {
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(form.String(), func(t *testing.T) {
			b := pgBackend(t)
			q := defaultTable(t, b)
			res := newSettledLog()
			start(t, q, func(context.Context, inbox.Job[msg]) error { return nil },
				inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond, Form: form, Observe: res.observe})
			for range 3 {
				if _, err := q.Publish(t.Context(), msg{}, nil); err != nil {
					t.Fatal(err)
				}
			}
			res.wait(t, 3)
			if tm := q.Timings(); tm.Handle["ack"].Count != 3 || tm.StartDelay.Count != 3 {
				t.Fatalf("timings %+v", tm)
			}
		})
	}
}

type traceKey struct{}

// tracedTable is the default schema plus a trace column, with the queue's hooks.
func tracedTable(t *testing.T, b *backend, h inbox.Hooks) (*inbox.Queue[msg], func(inbox.Hooks) *inbox.Queue[msg]) {
	t.Helper()
	defaultTable(t, b)
	b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN trace TEXT`)
	cols := inbox.DefaultColumns()
	cols.Trace = "trace"
	mk := func(h inbox.Hooks) *inbox.Queue[msg] {
		return newQueue(t, b, inbox.Config[msg]{Columns: cols, Hooks: h})
	}
	return mk(h), mk
}

// The publish hook's trace text reaches the handle hook of another instance through
// the trace column, for every kind of publish; rows without one read "".
func TestHooksCarryTraceAcrossInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		var pubs []inbox.PublishInfo
		var mu sync.Mutex
		publisher, mk := tracedTable(t, b, inbox.Hooks{
			Publish: func(ctx context.Context, p inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
				mu.Lock()
				pubs = append(pubs, p)
				mu.Unlock()
				trace, _ := ctx.Value(traceKey{}).(string)
				return next(ctx, trace)
			},
		})
		type seen struct {
			n     int
			ctxOK bool
		}
		got := make(chan seen, 16)
		worker := mk(inbox.Hooks{
			Handle: func(ctx context.Context, j inbox.JobInfo, next func(context.Context) error) error {
				return next(context.WithValue(ctx, traceKey{}, "span of "+j.Trace))
			},
		})
		var handled sync.Map
		start(t, worker, func(ctx context.Context, j inbox.Job[msg]) error {
			v, _ := ctx.Value(traceKey{}).(string)
			handled.Store(j.ID, v)
			got <- seen{n: j.Payload.N, ctxOK: v != ""}
			return nil
		}, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond})
		ctx := context.WithValue(t.Context(), traceKey{}, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		id, err := publisher.Publish(ctx, msg{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := publisher.PublishBatch(ctx, []msg{{N: 2}, {N: 3}}, nil); err != nil {
			t.Fatal(err)
		}
		tx, err := beginTx(ctx, b.newDB(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publisher.PublishTx(ctx, tx.tx, msg{N: 4}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := publisher.Publish(t.Context(), msg{N: 5}, nil); err != nil { // no trace in ctx: NULL
			t.Fatal(err)
		}
		for range 5 {
			select {
			case s := <-got:
				if !s.ctxOK {
					t.Errorf("job %d: the handler did not run under the hook's context", s.n)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("jobs not handled")
			}
		}
		if v, _ := handled.Load(id); v != "span of 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
			t.Errorf("job %d ran under %q", id, v)
		}
		n := 0
		handled.Range(func(_, v any) bool {
			if v == "span of 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
				n++
			} else if v != "span of " {
				t.Errorf("a job ran under %q", v)
			}
			return true
		})
		if n != 4 {
			t.Errorf("%d jobs carried the trace, want 4", n)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []inbox.PublishInfo{{Table: b.table, Jobs: 1}, {Table: b.table, Jobs: 2}, {Table: b.table, Jobs: 1, Tx: true}, {Table: b.table, Jobs: 1}}
		if fmt.Sprint(pubs) != fmt.Sprint(want) {
			t.Errorf("publish hook saw %v, want %v", pubs, want)
		}
	})
}

// JobInfo carries the id, attempt, trace and creation time; Job shows the trace.
func TestHandleHookSeesJobInfo(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		infos := make(chan inbox.JobInfo, 1)
		q, _ := tracedTable(t, b, inbox.Hooks{
			Publish: func(ctx context.Context, _ inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
				return next(ctx, "tp-1")
			},
			Handle: func(ctx context.Context, j inbox.JobInfo, next func(context.Context) error) error {
				infos <- j
				return next(ctx)
			},
		})
		before := time.Now().Add(-time.Minute) // the database's clock, which may differ a little
		id, err := q.Publish(t.Context(), msg{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if j, err := q.Job(t.Context(), id); err != nil || j.Trace != "tp-1" || j.CreatedAt.Before(before) {
			t.Fatalf("job %+v %v", j, err)
		}
		start(t, q, func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond})
		j := <-infos
		if j.ID != id || j.Attempt != 1 || j.Trace != "tp-1" || j.Table != b.table || j.CreatedAt.Before(before) || j.CreatedAt.After(time.Now().Add(time.Minute)) {
			t.Fatalf("JobInfo %+v", j)
		}
	})
}

// A hook that breaks its contract is a *HookError: a publish hook that does not call
// next publishes nothing and says so; one that calls it twice inserts once; a handle
// hook that does not call next fails the attempt; a panicking one is a *PanicError.
func TestHooksThatBreakTheContract(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		isHookErr := func(err error) bool { _, ok := errors.AsType[*inbox.HookError](err); return ok }
		skip := newQueue(t, b, inbox.Config[msg]{Hooks: inbox.Hooks{
			Publish: func(context.Context, inbox.PublishInfo, func(context.Context, string) (int64, error)) (int64, error) {
				return 0, nil
			},
		}})
		if err := skip.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := skip.Publish(ctx, msg{}, nil); !isHookErr(err) {
			t.Fatalf("publish through a hook that skips next: %v", err)
		}
		if err := skip.PublishBatch(ctx, []msg{{}, {}}, nil); !isHookErr(err) {
			t.Fatalf("batch through a hook that skips next: %v", err)
		}
		twice := newQueue(t, b, inbox.Config[msg]{Hooks: inbox.Hooks{
			Publish: func(ctx context.Context, _ inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
				id, err := next(ctx, "")
				if _, err2 := next(ctx, ""); !isHookErr(err2) {
					t.Errorf("second next: %v", err2)
				}
				return id, err
			},
		}})
		if _, err := twice.Publish(ctx, msg{N: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 1 {
			t.Fatalf("%d rows, want the one published", n)
		}

		var mode sync.Map
		res := newSettledLog()
		hq := newQueue(t, b, inbox.Config[msg]{Hooks: inbox.Hooks{
			Handle: func(ctx context.Context, j inbox.JobInfo, next func(context.Context) error) error {
				if m, _ := mode.Load(j.ID); m == "panic" {
					panic("hook")
				}
				if m, _ := mode.Load(j.ID); m == "skip" {
					return nil
				}
				return next(ctx)
			},
		}})
		for _, m := range []string{"skip", "panic"} {
			id, err := hq.Publish(ctx, msg{N: 9}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mode.Store(id, m)
		}
		var ran sync.Map
		start(t, hq, func(_ context.Context, j inbox.Job[msg]) error { ran.Store(j.ID, true); return nil },
			inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond, MaxAttempts: 1, Observe: res.observe})
		all := res.wait(t, 3) // the job published before, and the two
		for _, r := range all {
			m, _ := mode.Load(r.ID)
			_, pe := errors.AsType[*inbox.PanicError](r.Err)
			switch {
			case m == "skip" && (r.Outcome != inbox.DeadLettered || !isHookErr(r.Err)):
				t.Errorf("skipping hook: %+v", r)
			case m == "panic" && (r.Outcome != inbox.DeadLettered || !pe):
				t.Errorf("panicking hook: %+v", r)
			case m == nil && r.Outcome != inbox.Acked:
				t.Errorf("plain job: %+v", r)
			}
			if _, ok := ran.Load(r.ID); ok != (m == nil) {
				t.Errorf("job %d (%v): handler ran %v", r.ID, m, ok)
			}
		}
	})
}

// A unique publish goes through the publish hook and stores its trace too; a
// duplicate inserts nothing.
func TestHooksOnUniquePublish(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		calls := 0
		q, _ := tracedTable(t, b, inbox.Hooks{
			Publish: func(ctx context.Context, _ inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
				calls++
				return next(ctx, fmt.Sprintf("tp-%d", calls))
			},
		})
		o := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "invoice-7"}}
		id, inserted, err := q.PublishUnique(t.Context(), msg{N: 7}, o)
		if err != nil || !inserted {
			t.Fatal(inserted, err)
		}
		again, inserted, err := q.PublishUnique(t.Context(), msg{N: 7}, o)
		if err != nil || inserted || again != id || calls != 2 {
			t.Fatalf("duplicate: id %d (first %d), inserted %v, %v, %d hook calls", again, id, inserted, err, calls)
		}
		if j, err := q.Job(t.Context(), id); err != nil || j.Trace != "tp-1" {
			t.Fatalf("unique job %+v %v", j, err)
		}
	})
}

// Hooks.Handle wraps a batch handler once per call: JobInfo describes the first
// job and lists the batch's jobs, each with its trace; the handler runs under the
// hook's context; next returns the handler's BatchErrors, and each job settles as
// its entry says. In both forms that take batches.
func TestHandleHookWrapsBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range batchForms(b.dialect) {
			t.Run(form.String(), func(t *testing.T) {
				b := b
				if form == inbox.RowLock {
					b = pgBackend(t) // a table of its own
				}
				calls := make(chan inbox.JobInfo, 8)
				nexts := make(chan error, 8)
				q, _ := tracedTable(t, b, inbox.Hooks{
					Publish: func(ctx context.Context, _ inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
						trace, _ := ctx.Value(traceKey{}).(string)
						return next(ctx, trace)
					},
					Handle: func(ctx context.Context, j inbox.JobInfo, next func(context.Context) error) error {
						calls <- j
						err := next(context.WithValue(ctx, traceKey{}, "batch span"))
						nexts <- err
						return err
					},
				})
				var ids []int64
				for i := range 5 {
					ctx := context.WithValue(t.Context(), traceKey{}, fmt.Sprintf("tp-%d", i))
					id, err := q.Publish(ctx, msg{N: i}, nil)
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				res := newSettledLog()
				underHook := make(chan bool, 8)
				s, err := q.SubscribeBatch(func(ctx context.Context, js []inbox.Job[msg]) error {
					v, _ := ctx.Value(traceKey{}).(string)
					underHook <- v == "batch span"
					errs := make(inbox.BatchErrors, len(js))
					for i, j := range js {
						if j.Payload.N == 3 {
							errs[i] = inbox.DeadLetter(errors.New("no"))
						}
					}
					return errs
				}, 8, inbox.SubscribeOptions{Form: form, Workers: 1, PollInterval: 10 * time.Millisecond, Observe: res.observe})
				if err != nil {
					t.Fatal(err)
				}
				run(t, s)
				all := res.wait(t, 5)
				if len(calls) != 1 {
					t.Fatalf("%d hook calls for one batch of 5, want 1", len(calls))
				}
				j := <-calls
				if j.ID != ids[0] || j.Trace != "tp-0" || j.Table != b.table || len(j.Batch) != 5 {
					t.Fatalf("JobInfo %+v, want the first job with a batch of 5", j)
				}
				for i, bj := range j.Batch {
					if bj.ID != ids[i] || bj.Trace != fmt.Sprintf("tp-%d", i) || bj.Attempt != 1 || bj.CreatedAt.IsZero() || bj.Batch != nil {
						t.Errorf("batch job %d: %+v", i, bj)
					}
				}
				if !<-underHook {
					t.Error("the batch handler did not run under the hook's context")
				}
				if be, ok := errors.AsType[inbox.BatchErrors](<-nexts); !ok || len(be) != 5 {
					t.Errorf("next returned %v, want the handler's BatchErrors", be)
				}
				for _, r := range all {
					want := inbox.Acked
					if r.ID == ids[3] {
						want = inbox.DeadLettered
					}
					if r.Outcome != want || r.SettleErr != nil {
						t.Errorf("result %+v, want %v", r, want)
					}
				}
			})
		}
	})
}
