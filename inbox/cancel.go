package inbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NoJobError reports an id with no row in the table: never published, or done and
// deleted (an ack on a table without a ProcessedAt column deletes the row).
type NoJobError struct {
	Table string
	ID    int64
}

// Error describes the failure.
func (e *NoJobError) Error() string { return fmt.Sprintf("inbox: %s has no job %d", e.Table, e.ID) }

// Is makes errors.Is(err, ErrNoJob) true.
func (e *NoJobError) Is(target error) bool { return target == ErrNoJob }

// ErrJobCancelled is the cause (context.Cause) of the context of a handler whose
// job was cancelled by Queue.Cancel, in this process or another.
var ErrJobCancelled = errors.New("inbox: job cancelled")

// Cancel cancels job id: a ready or delayed job is never claimed; a job in work has
// its handler's context cancelled (cause ErrJobCancelled) and is settled as
// Cancelled whatever its handler returns. The row is kept, with its CancelledAt
// column set and its lock deadline far in the future; Stats counts it as Cancelled,
// Requeue makes it ready again, Prune deletes it after its retention.
//
// The handler is told at once when it runs in this process (under any Queue of the
// same *Queue value); in another instance, within SubscribeOptions.PollInterval in
// the lease form, and within a second (the held connection's heartbeat) in the lock
// forms. Cancel blocks for a few statements; for a job held by the RowLock form it
// returns once that job's handler has returned and its settlement committed (or its
// connection died), bounded by ctx.
//
// A job of a FIFO group (Columns.Group) in work under a live lease keeps its lease
// until its holder settles it as Cancelled, so that the group's next job does not
// start while the cancelled handler may still run (one of a group in work at a
// time): Stats counts it as Cancelled meanwhile, Requeue and Prune leave it
// alone, and RetryJob and DeleteJob refuse it (a *JobStateError), until it is
// settled. If its holder dies, the lease runs out (in
// the advisory form: its lock goes with the connection) and a subscription of the
// table finalises it as Cancelled (within a PollInterval): it is never run again.
//
// Cancelling a cancelled job returns nil. Errors: a *NoJobError for an id with no
// row (it matches ErrNoJob), a *JobStateError for a dead-lettered or processed
// job, or one that finished while Cancel waited for it, a *ConfigError on a
// table without a CancelledAt column. Safe for concurrent use.
func (q *Queue[T]) Cancel(ctx context.Context, id int64) error {
	if q.c.CancelledAt == "" {
		return &ConfigError{Field: "Columns.CancelledAt", Reason: "Cancel needs a CancelledAt column (the default schema has it from version 1: run Migrate)"}
	}
	if q.holdsCancel() {
		// A FIFO group's job in work under a live lease keeps its lease: its group
		// stays held until its holder settles it as Cancelled (or the lease runs
		// out and a claimer finalises it: sweepCancelled).
		n, err := q.db().exec(ctx, q.cancelLeasedSQL(q.dialect == Postgres), id, q.ts(farFuture()), q.ts(q.now()))
		if err != nil {
			return fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
		}
		if n == 1 {
			q.cancelLocal(id)
			return nil
		}
	}
	// A row that changes between the statements below is tried again, a few times.
	for range 5 {
		n, err := q.db().exec(ctx, q.cancelSQL(q.dialect == Postgres), id, q.ts(farFuture()), q.ts(q.now()))
		if err != nil {
			return fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
		}
		if n == 1 {
			q.cancelLocal(id)
			return nil
		}
		state, err := q.jobState(ctx, id)
		if err != nil || state != "active" {
			return err
		}
		if q.dialect == Postgres {
			// The row is locked: a RowLock worker holds it (or a lease statement, for
			// a moment). Raise the cancellation flag its watcher reads, tell this
			// process's handler at once, and wait for the lock.
			done, err := q.cancelLocked(ctx, id)
			if done || err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("inbox: cancel %s job %d: the row kept changing", q.name, id)
}

// cancelSQL marks a live row cancelled: $1 id, $2 far future, $3 now. With skipLocked
// (Postgres) a row locked by another transaction is left alone.
func (q *Queue[T]) cancelSQL(skipLocked bool) string {
	c := q.c
	set := col(c.LockedUntil) + " = " + q.p(2) + ", " + col(c.CancelledAt) + " = " + q.p(3)
	if c.ClaimedAt != "" {
		set += ", " + col(c.ClaimedAt) + " = NULL"
	}
	if q.hasUnique() {
		set += ", " + q.keepKey(UniqueCancelled)
	}
	where := col(c.ID) + " = " + q.p(1) + " AND " + col(c.CancelledAt) + " IS NULL AND (" + col(c.LockedUntil) + " < " + q.p(2)
	if c.LockedUntilNullable {
		where += " OR " + col(c.LockedUntil) + " IS NULL"
	}
	where += ")"
	if c.ProcessedAt != "" {
		where += " AND " + col(c.ProcessedAt) + " IS NULL"
	}
	if skipLocked {
		where = col(c.ID) + " IN (SELECT " + col(c.ID) + " FROM " + q.table + " WHERE " + where + " FOR UPDATE SKIP LOCKED)"
	}
	return "UPDATE " + q.table + " SET " + set + " WHERE " + where
}

// holdsCancel reports whether a cancelled job in work under a live lease keeps
// its lease until its holder settles it (tables with FIFO groups): its group must
// not move on while its handler may still run.
func (q *Queue[T]) holdsCancel() bool {
	return q.c.Group != "" && q.c.ClaimedAt != "" && q.c.CancelledAt != ""
}

// cancelLeasedSQL (holdsCancel) marks cancelled a row of a group in work under a
// live lease, leaving its lease as it is: $1 id, $2 far future, $3 now. With
// skipLocked (Postgres) a row locked by another transaction (a RowLock holder) is
// left alone: Cancel then waits for it (cancelLocked).
func (q *Queue[T]) cancelLeasedSQL(skipLocked bool) string {
	c := q.c
	lu := col(c.LockedUntil)
	inWork := lu + " > " + q.p(3) + " AND " + lu + " < " + q.p(2)
	if q.dialect == Postgres {
		// The advisory form's rows in work hold no lease: their holder holds the
		// row's advisory lock (the lock of a transaction of this statement's own
		// is let go at its end).
		inWork = "(" + inWork + " OR (" + lu + " <= " + q.p(3) + " AND NOT pg_try_advisory_xact_lock(" + strconv.Itoa(int(q.lockKey())) + ", " + q.lockIDOf(col(c.ID)) + ")))"
	}
	where := col(c.ID) + " = " + q.p(1) + " AND " + col(c.CancelledAt) + " IS NULL AND " + col(c.Group) + " IS NOT NULL AND " +
		col(c.ClaimedAt) + " IS NOT NULL AND " + inWork
	if c.ProcessedAt != "" {
		where += " AND " + col(c.ProcessedAt) + " IS NULL"
	}
	if skipLocked {
		where = col(c.ID) + " IN (SELECT " + col(c.ID) + " FROM " + q.table + " WHERE " + where + " FOR UPDATE SKIP LOCKED)"
	}
	return "UPDATE " + q.table + " SET " + col(c.CancelledAt) + " = " + q.p(3) + " WHERE " + where
}

// sweepCancelledSQL (holdsCancel) finalises the cancelled rows of groups whose
// lease ran out before their holder settled them (it died): they are never run
// again, and their groups move on. $1 far future, $2 now.
func (q *Queue[T]) sweepCancelledSQL() string {
	c := q.c
	lu := col(c.LockedUntil)
	set := lu + " = " + q.p(1) + ", " + col(c.ClaimedAt) + " = NULL"
	if q.hasUnique() {
		set += ", " + q.keepKey(UniqueCancelled)
	}
	where := col(c.Group) + " IS NOT NULL AND " + col(c.ClaimedAt) + " IS NOT NULL AND " + col(c.CancelledAt) + " IS NOT NULL AND " + lu + " <= " + q.p(2)
	if q.dialect == Postgres {
		// Not a row an advisory-form holder still holds.
		where += " AND pg_try_advisory_xact_lock(" + strconv.Itoa(int(q.lockKey())) + ", " + q.lockIDOf(col(c.ID)) + ")"
	}
	return "UPDATE " + q.table + " SET " + set + " WHERE " + where
}

// lockIDOf is the SQL of the second key of the advisory form's lock on the row
// whose id is the bigint expression id: its low 32 bits as an int4, as int32(id)
// in Go.
func (q *Queue[T]) lockIDOf(id string) string {
	return "((" + id + " & 4294967295) - CASE WHEN (" + id + " & 2147483648) <> 0 THEN 4294967296 ELSE 0 END)::int4"
}

// sweepCancelled (holdsCancel) runs sweepCancelledSQL, at most every
// PollInterval per caller (a lane of the lease form, a worker of the lock forms):
// next is when the caller's next sweep is due.
func (s *Subscription[T]) sweepCancelled(next *time.Time) {
	if !s.q.holdsCancel() || time.Now().Before(*next) {
		return
	}
	*next = time.Now().Add(s.o.PollInterval)
	if _, err := s.q.db().exec(s.ctx, s.q.sweepCancelledSQL(), s.q.ts(farFuture()), s.q.ts(s.q.now())); err != nil && s.ctx.Err() == nil {
		s.q.log.Warn("inbox: finalising cancelled jobs failed; trying again", "table", s.q.name, "err", err)
	}
}

// jobState reads why Cancel did not change row id: nil and "cancelled" (already
// cancelled), "active" (a live row: it is locked, or changed meanwhile), or a
// *NoJobError or *JobStateError.
func (q *Queue[T]) jobState(ctx context.Context, id int64) (string, error) {
	c := q.c
	procSQL := "0"
	if c.ProcessedAt != "" {
		procSQL = "CASE WHEN " + col(c.ProcessedAt) + " IS NULL THEN 0 ELSE 1 END"
	}
	stmt := "SELECT CASE WHEN " + col(c.CancelledAt) + " IS NOT NULL THEN 1 ELSE 0 END, " + procSQL +
		", CASE WHEN " + col(c.LockedUntil) + " >= " + q.p(2) + " THEN 1 ELSE 0 END FROM " + q.table + " WHERE " + col(c.ID) + " = " + q.p(1)
	r, err := q.db().query(ctx, stmt, id, q.ts(farFuture()))
	if err != nil {
		return "", fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
	}
	defer r.Close()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return "", fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
		}
		return "", &NoJobError{Table: q.name, ID: id}
	}
	var cancelled, processed, far int64
	if err := r.Scan(&cancelled, &processed, &far); err != nil {
		return "", fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
	}
	switch {
	case cancelled == 1:
		return "cancelled", nil
	case processed == 1:
		return "", &JobStateError{Table: q.name, ID: id, Op: "cancel", State: StateProcessed}
	case far == 1:
		return "", &JobStateError{Table: q.name, ID: id, Op: "cancel", State: StateDead}
	}
	return "active", nil
}

// cancelKey is the session advisory lock (one bigint key) that flags job id of
// this table as cancelled while Cancel waits for its row lock.
func (q *Queue[T]) cancelKey(id int64) int64 {
	h := fnv.New64a()
	h.Write([]byte("inbox-cancel:" + q.name))
	return int64(h.Sum64()) ^ id
}

// cancelLocked (Postgres) cancels a row another transaction holds locked. done
// is false when the row is live again, unlocked and uncancelled: try again.
func (q *Queue[T]) cancelLocked(ctx context.Context, id int64) (done bool, err error) {
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
	}
	healthy := false
	defer func() {
		if !healthy {
			// It may still hold the flag: close it rather than pool it.
			cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = conn.Conn().Close(cctx)
			cancel()
		}
		conn.Release()
	}()
	key := q.cancelKey(id)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return false, fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
	}
	q.cancelLocal(id)
	tag, err := conn.Exec(ctx, q.cancelSQL(false), id, q.ts(farFuture()), q.ts(q.now()))
	if err != nil {
		return false, fmt.Errorf("inbox: cancel %s job %d: %w", q.name, id, err)
	}
	var unlocked bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&unlocked); err == nil {
		healthy = true
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	state, err := q.jobState(ctx, id)
	if errors.Is(err, ErrNoJob) {
		return true, &JobStateError{Table: q.name, ID: id, Op: "cancel", State: StateProcessed, Reason: "it finished, and was deleted, while Cancel waited for its row lock"}
	}
	if err != nil || state == "cancelled" {
		return true, err
	}
	return false, nil
}

// --- this process's handlers ---

// runRegistry holds the cancel functions of the handlers in work in this process, by
// job id, so that Cancel through the Queue reaches them at once. Safe for concurrent
// use.
type runRegistry struct {
	mu sync.Mutex
	m  map[int64]context.CancelCauseFunc
}

func (r *runRegistry) add(id int64, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[int64]context.CancelCauseFunc)
	}
	r.m[id] = cancel
	r.mu.Unlock()
}

func (r *runRegistry) remove(id int64) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
}

func (q *Queue[T]) cancelLocal(id int64) {
	q.runs.mu.Lock()
	cancel := q.runs.m[id]
	q.runs.mu.Unlock()
	if cancel != nil {
		cancel(ErrJobCancelled)
	}
}

// wasCancelled reports whether a handler's context was cancelled by Cancel.
func wasCancelled(ctx context.Context) bool { return context.Cause(ctx) == ErrJobCancelled }

// --- other instances' cancellations ---

// cancelledSQL lists which of the given ids are cancelled (the lease form's check).
func (q *Queue[T]) cancelledSQL(ids []int64) (string, []any) {
	c := q.c
	if q.dialect == Postgres {
		return "SELECT " + col(c.ID) + " FROM " + q.table + " WHERE " + col(c.ID) + " = ANY($1::bigint[]) AND " + col(c.CancelledAt) + " IS NOT NULL", []any{ids}
	}
	var b strings.Builder
	b.WriteString("[")
	for i, id := range ids {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteString("]")
	return "SELECT " + col(c.ID) + " FROM " + q.table + " WHERE " + col(c.ID) + " IN (SELECT value FROM json_each(?1)) AND " + col(c.CancelledAt) + " IS NOT NULL", []any{b.String()}
}

// checkCancels (lease form) cancels the handlers of the jobs in work that another
// instance cancelled. It runs at most every PollInterval.
func (s *Subscription[T]) checkCancels(l *lane, inflight map[int64]*leased) {
	if s.q.c.CancelledAt == "" || len(inflight) == 0 || time.Now().Before(l.nextCancelCheck) {
		return
	}
	l.nextCancelCheck = time.Now().Add(s.o.PollInterval)
	ids := make([]int64, 0, len(inflight))
	for id, j := range inflight {
		if j.ctx.Err() == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	sql, args := s.q.cancelledSQL(ids)
	r, err := s.q.db().query(s.ctx, sql, args...)
	if err != nil {
		if s.ctx.Err() == nil {
			s.q.log.Warn("inbox: checking for cancelled jobs failed; trying again", "table", s.q.name, "err", err)
		}
		return
	}
	defer r.Close()
	for r.Next() {
		var id int64
		if r.Scan(&id) == nil {
			if j := inflight[id]; j != nil {
				j.cancel(ErrJobCancelled)
			}
		}
	}
}

// heldCheckSQL (lock forms) is the heartbeat of a held connection: true when job $1
// was cancelled, in its row (advisory form) or by the flag Cancel raises while it
// waits for the row lock ($2, the cancel key).
func (q *Queue[T]) heldCheckSQL() string {
	return "SELECT CASE WHEN pg_try_advisory_lock_shared($2::bigint) THEN NOT pg_advisory_unlock_shared($2::bigint) ELSE true END OR COALESCE((SELECT " +
		col(q.c.CancelledAt) + " IS NOT NULL FROM " + q.table + " WHERE " + col(q.c.ID) + " = $1::bigint), false)"
}

// isCancelledRow reports whether job id's row is cancelled, on db.
func (q *Queue[T]) isCancelledRow(ctx context.Context, db querier, id int64) bool {
	if q.c.CancelledAt == "" {
		return false
	}
	r, err := db.query(ctx, "SELECT 1 FROM "+q.table+" WHERE "+col(q.c.ID)+" = "+q.p(1)+" AND "+col(q.c.CancelledAt)+" IS NOT NULL", id)
	if err != nil {
		return false
	}
	defer r.Close()
	return r.Next()
}
