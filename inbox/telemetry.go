package inbox

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Hooks wrap a queue's publishes and handler calls, as middleware: enough for a
// tracer (OpenTelemetry's, or any other) to make a span of each publish and of
// each attempt, and to join them across processes through the Columns.Trace column.
// Both are optional. They run on the caller's goroutine (Publish) or the worker's
// (Handle), so they must be safe for concurrent use.
type Hooks struct {
	// Publish wraps every Publish, PublishTx, PublishBatch and PublishBatchTx. It
	// must call next once, with the context the insert runs under and the trace
	// text to store in the Columns.Trace column of every row it inserts (ignored
	// without one; "" stores NULL), and return what next returned (it may add to
	// the error). next returns the new row's id, 0 for a batch; a trace that is
	// not valid UTF-8 or holds a NUL byte gets a *HookError. A hook that
	// returns nil without calling next gets a *HookError back instead: nothing is
	// ever reported published that was not; a second call of next inserts nothing
	// and returns a *HookError.
	Publish func(ctx context.Context, p PublishInfo, next func(ctx context.Context, trace string) (int64, error)) (int64, error)
	// Handle wraps every handler call of the queue's subscriptions, the decoding
	// of the payload excepted: it must call next once, with the context the
	// handler is to run under, and return what next returned (or another error,
	// which settles the attempt as the handler's would). A hook that returns nil
	// without calling next fails the attempt with a *HookError, so that a job is
	// never acked without its handler having run; a second call of next does not
	// run the handler again. A panic in the hook is the handler's panic.
	//
	// A batch handler (Queue.SubscribeBatch) is wrapped once per call, not once per
	// job: one span per batch, as OpenTelemetry's messaging conventions make one
	// span for a batch that links the span of each message. j then describes the
	// batch's first job and j.Batch lists every job handed to the handler, each
	// with its own Trace (to link); next returns the batch handler's result (nil,
	// BatchErrors, or a failure of the batch), and what the hook returns settles
	// the batch as the handler's result would.
	Handle func(ctx context.Context, j JobInfo, next func(ctx context.Context) error) error
}

// PublishInfo describes a publish to Hooks.Publish.
type PublishInfo struct {
	Table string
	Jobs  int  // 1, or the length of a batch
	Tx    bool // inside the caller's transaction (PublishTx, PublishBatchTx)
}

// JobInfo describes a claimed job to Hooks.Handle.
type JobInfo struct {
	Table   string
	ID      int64
	Attempt int
	// Trace is what the publish stored in Columns.Trace ("" without one, or for a
	// row inserted without it).
	Trace string
	// CreatedAt is when the row was inserted (zero without Columns.CreatedAt).
	CreatedAt time.Time
	// Batch lists, for a batch handler's call, every job it is handed, in order
	// (the first is the job the other fields describe); nil for a Handler's call.
	Batch []JobInfo
}

// HookError reports a hook that broke its contract: returned without calling
// next, or called it twice.
type HookError struct {
	Hook   string // "publish" or "handle"
	Reason string
}

// Error describes the failure.
func (e *HookError) Error() string { return "inbox: " + e.Hook + " hook " + e.Reason }

// hookPublish runs insert under Hooks.Publish.
func (q *Queue[T]) hookPublish(ctx context.Context, p PublishInfo, insert func(ctx context.Context, trace string) (int64, error)) (int64, error) {
	called := false
	id, err := q.hooks.Publish(ctx, p, func(ctx context.Context, trace string) (int64, error) {
		if called {
			return 0, &HookError{Hook: "publish", Reason: "called next twice; the second inserted nothing"}
		}
		called = true
		if q.c.Trace != "" && (!utf8.ValidString(trace) || strings.IndexByte(trace, 0) >= 0) {
			return 0, &HookError{Hook: "publish", Reason: "passed a trace the Trace column cannot hold (a NUL byte or invalid UTF-8): nothing was published"}
		}
		return insert(ctx, trace)
	})
	if !called && err == nil {
		return 0, &HookError{Hook: "publish", Reason: "returned without calling next: nothing was published"}
	}
	return id, err
}

// hookHandle runs the handler under Hooks.Handle.
func (s *Subscription[T]) hookHandle(ctx context.Context, j Job[T], m jobMeta) error {
	info := JobInfo{Table: s.q.name, ID: j.ID, Attempt: j.Attempt, Trace: m.trace, CreatedAt: m.created}
	return s.hooked(ctx, info, func(ctx context.Context) error { return s.h(ctx, j) })
}

// hookHandleBatch runs the batch handler under Hooks.Handle, once for the batch.
func (s *Subscription[T]) hookHandleBatch(ctx context.Context, jobs []Job[T], ms []jobMeta) error {
	infos := make([]JobInfo, len(jobs))
	for i, j := range jobs {
		infos[i] = JobInfo{Table: s.q.name, ID: j.ID, Attempt: j.Attempt, Trace: ms[i].trace, CreatedAt: ms[i].created}
	}
	first := infos[0]
	first.Batch = infos
	return s.hooked(ctx, first, func(ctx context.Context) error { return s.bh(ctx, jobs) })
}

// hooked calls Hooks.Handle with a next that runs handler at most once.
func (s *Subscription[T]) hooked(ctx context.Context, info JobInfo, handler func(context.Context) error) error {
	called := false
	err := s.q.hooks.Handle(ctx, info, func(ctx context.Context) error {
		if called {
			return &HookError{Hook: "handle", Reason: "called next twice; the handler ran once"}
		}
		called = true
		return handler(ctx)
	})
	if !called && err == nil {
		return &HookError{Hook: "handle", Reason: "returned without calling next: the handler did not run"}
	}
	return err
}

// traceArg is the argument stored in the Trace column: NULL for "".
func traceArg(trace string) any {
	if trace == "" {
		return nil
	}
	return trace
}

// jobMeta is what a claim returns beyond id, attempt and payload, when the table
// has the columns.
type jobMeta struct {
	created time.Time
	trace   string
	prio    int64  // Columns.Priority: the lease form starts prefetched rows by it
	key     string // Columns.Partition: PerPartition's places are per key
	keyed   bool   // key is set (not NULL)
}

// hasMeta reports whether claims return meta columns.
func (q *Queue[T]) hasMeta() bool {
	return q.c.CreatedAt != "" || q.c.Trace != "" || q.c.Priority != "" || q.c.Partition != ""
}

// metaCols is the tail of a claim's select list: ", created, trace, priority" for
// the columns the table has, each read safely (SQLite: cast; Postgres: an infinite
// time as NULL).
func (q *Queue[T]) metaCols() string {
	var out string
	if c := q.c.CreatedAt; c != "" {
		if q.dialect == SQLite {
			out += ", CAST(" + col(c) + " AS INTEGER) AS inbox_created"
		} else {
			out += ", CASE WHEN isfinite(" + col(c) + ") THEN " + col(c) + " END AS inbox_created"
		}
	}
	if c := q.c.Trace; c != "" {
		out += ", CAST(" + col(c) + " AS TEXT) AS inbox_trace"
	}
	if c := q.c.Priority; c != "" {
		t := "BIGINT"
		if q.dialect == SQLite {
			t = "INTEGER"
		}
		out += ", CAST(" + col(c) + " AS " + t + ") AS inbox_prio"
	}
	if c := q.c.Partition; c != "" {
		out += ", CAST(" + col(c) + " AS TEXT) AS inbox_key"
	}
	return out
}

// metaRefs names the columns metaCols returns, for a select over a claim's CTE.
func (q *Queue[T]) metaRefs() string {
	var out string
	if q.c.CreatedAt != "" {
		out += ", inbox_created"
	}
	if q.c.Trace != "" {
		out += ", inbox_trace"
	}
	if q.c.Priority != "" {
		out += ", inbox_prio"
	}
	if q.c.Partition != "" {
		out += ", inbox_key"
	}
	return out
}

// metaNulls is metaCols for rows that carry none (an ack's row in a Postgres cycle).
func (q *Queue[T]) metaNulls() string {
	if q.c.Partition != "" {
		return q.metaKeyed("NULL::text")
	}
	return q.metaNullsBeforeKey()
}

// metaKeyed is metaNulls with the partition key column (the last, which the
// table must have) as the SQL text expression key.
func (q *Queue[T]) metaKeyed(key string) string { return q.metaNullsBeforeKey() + ", " + key }

// metaNullsBeforeKey is metaNulls without the partition key's column.
func (q *Queue[T]) metaNullsBeforeKey() string {
	var out string
	if q.c.CreatedAt != "" {
		out += ", NULL::timestamptz"
	}
	if q.c.Trace != "" {
		out += ", NULL::text"
	}
	if q.c.Priority != "" {
		out += ", NULL::bigint"
	}
	return out
}

// metaScan holds the destinations of a row's meta columns.
type metaScan struct {
	sqlTime sql.NullInt64
	pgTime  *time.Time
	trace   sql.NullString
	prio    sql.NullInt64
	key     sql.NullString
}

// metaDest returns the scan destinations of a claim row with meta: base, then the
// meta columns into m.
func (q *Queue[T]) metaDest(m *metaScan, base ...any) []any {
	if q.c.CreatedAt != "" {
		if q.dialect == SQLite {
			base = append(base, &m.sqlTime)
		} else {
			base = append(base, &m.pgTime)
		}
	}
	if q.c.Trace != "" {
		base = append(base, &m.trace)
	}
	if q.c.Priority != "" {
		base = append(base, &m.prio)
	}
	if q.c.Partition != "" {
		base = append(base, &m.key)
	}
	return base
}

// meta returns what was scanned.
func (m *metaScan) meta() jobMeta {
	var j jobMeta
	switch {
	case m.sqlTime.Valid:
		j.created = time.UnixMicro(m.sqlTime.Int64)
	case m.pgTime != nil:
		j.created = *m.pgTime
	}
	j.trace = m.trace.String
	j.prio = m.prio.Int64
	j.key, j.keyed = m.key.String, m.key.Valid
	return j
}

// --- timings ---

// timingBounds are the upper bounds, in seconds, of the buckets of Timings'
// histograms: 1 ms to 1 h.
var timingBounds = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// timingMicros are timingBounds in microseconds, for the hot path's comparisons.
var timingMicros = func() (m [len(timingBounds)]int64) {
	for i, b := range timingBounds {
		m[i] = int64(b * 1e6)
	}
	return m
}()

// hist is a histogram with timingBounds buckets, updated with atomics only.
type hist struct {
	buckets [len(timingBounds) + 1]atomic.Uint64 // not cumulative; the last is +Inf
	count   atomic.Uint64
	sum     atomic.Int64 // microseconds
}

func (h *hist) observe(d time.Duration) {
	us := max(d.Microseconds(), 0)
	i := 0
	for i < len(timingMicros) && us > timingMicros[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(us)
	h.count.Add(1)
}

// Histogram is a snapshot of one of Timings' histograms, as Prometheus wants one.
type Histogram struct {
	// Buckets maps each upper bound (seconds) to the count of observations at or
	// below it (cumulative); observations above the last bound are only in Count.
	Buckets map[float64]uint64
	Count   uint64
	Sum     float64 // seconds
}

func (h *hist) snapshot() Histogram {
	out := Histogram{Buckets: make(map[float64]uint64, len(timingBounds))}
	var cum uint64
	for i, b := range timingBounds {
		cum += h.buckets[i].Load()
		out.Buckets[b] = cum
	}
	// Count is read last, and at least the buckets' sum, so that a scrape racing
	// an observation never shows a bucket above the count.
	out.Count = max(h.count.Load(), cum+h.buckets[len(timingBounds)].Load())
	out.Sum = float64(h.sum.Load()) / 1e6
	return out
}

// timings are a queue's histograms.
type timings struct {
	handle [lastOutcome + 1]hist // by Outcome
	start  hist
}

// Timings are the histograms of a queue's subscriptions in this process since the
// Queue was made. Handle is by outcome (the names of Outcomes: "ack", "retry",
// "drop", "dead", "release", "snooze", "cancel").
type Timings struct {
	// Handle is how long handlers ran (with the payload's decoding), by the
	// outcome they chose.
	Handle map[string]Histogram
	// StartDelay is the time from publish (Columns.CreatedAt, the database's clock)
	// to the start of the job's first attempt (of every attempt on a table without
	// an Attempts column), RunAt delays included. Empty without a CreatedAt column.
	StartDelay Histogram
}

// Timings returns the queue's histograms. Safe for concurrent use; it reads
// atomics only.
func (q *Queue[T]) Timings() Timings {
	t := Timings{Handle: make(map[string]Histogram, lastOutcome), StartDelay: q.timings.start.snapshot()}
	for o := Acked; o <= lastOutcome; o++ {
		t.Handle[kindOf(o).String()] = q.timings.handle[o].snapshot()
	}
	return t
}

// noBackoff classifies a handler's result without drawing a backoff.
func noBackoff(int) time.Duration { return 0 }

// timed records an attempt that started at start, with the handler's result err.
// ctx is the handler's context: one cancelled by Queue.Cancel is timed as
// cancelled, as its settlement is.
func (s *Subscription[T]) timed(ctx context.Context, start time.Time, attempt int, m jobMeta, err error) {
	out := Acked
	if err != nil || ctx.Err() != nil {
		if err != nil {
			out = decide(err, attempt, s.o.MaxAttempts, s.q.c.Attempts != "", noBackoff).out
		}
		switch {
		case wasCancelled(ctx):
			out = Cancelled
		case err != nil && context.Cause(s.workCtx) == errRelease:
			out = Released
		}
	}
	s.timedAs(start, attempt, m, out)
}

// timedAs records an attempt that started at start and is settled as out.
func (s *Subscription[T]) timedAs(start time.Time, attempt int, m jobMeta, out Outcome) {
	tm := &s.q.timings
	tm.handle[out].observe(time.Since(start))
	if attempt <= 1 && !m.created.IsZero() {
		tm.start.observe(start.Sub(m.created))
	}
}
