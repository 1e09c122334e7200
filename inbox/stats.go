package inbox

import (
	"context"
	"fmt"
	"time"
)

// Stats counts a table's rows by state at one moment (one statement). Every row is in
// exactly one count, so their sum is the number of rows in the table.
type Stats struct {
	// Ready jobs may be claimed now (including those whose lease expired). Rows held
	// by the row-lock or advisory-lock forms hold no lease and count as Ready.
	Ready int64
	// InWork jobs are under a live lease. Needs the ClaimedAt column (without it they
	// count as Delayed).
	InWork int64
	// Delayed jobs wait for their run time or retry backoff.
	Delayed int64
	// Dead jobs were dead-lettered: kept, never claimed again until requeued. A row
	// whose lock deadline an outside writer set past year 9999, or (on SQLite) to
	// something that is not a number, counts here too: no claim takes it.
	Dead int64
	// Processed jobs were acked on a table with a ProcessedAt column.
	Processed int64
	// Cancelled jobs were cancelled by Queue.Cancel (on a table with a CancelledAt
	// column): kept, never claimed again until requeued.
	Cancelled int64
	// Invalid rows are ones no claim will ever take as they stand: a NULL lock
	// deadline on a table without Columns.LockedUntilNullable, or a NULL id. Start
	// refuses a table whose columns allow them (a *ColumnError), so they come from
	// before, or from a queue that was never started; fix or delete them by hand.
	Invalid int64
}

// Stats returns the table's counts by state. It blocks for one statement.
func (q *Queue[T]) Stats(ctx context.Context) (Stats, error) {
	// One bucket per row, the first that fits (see bucketSQL).
	caseSQL := q.bucketSQL(q.p(1), q.p(2))
	stmt := "SELECT bucket, count(*) FROM (SELECT " + caseSQL + " AS bucket FROM " + q.table + ") AS s GROUP BY bucket"
	r, err := q.db().query(ctx, stmt, q.ts(q.now()), q.ts(farFuture()))
	if err != nil {
		return Stats{}, fmt.Errorf("inbox: stats of %s: %w", q.name, err)
	}
	defer r.Close()
	var s Stats
	counts := [...]*int64{&s.Ready, &s.InWork, &s.Delayed, &s.Dead, &s.Processed, &s.Invalid, &s.Cancelled}
	for r.Next() {
		var bucket, n int64
		if err := r.Scan(&bucket, &n); err != nil {
			return Stats{}, fmt.Errorf("inbox: stats of %s: %w", q.name, err)
		}
		*counts[bucket] = n
	}
	if err := r.Err(); err != nil {
		return Stats{}, fmt.Errorf("inbox: stats of %s: %w", q.name, err)
	}
	return s, nil
}

// now is the host's time at column precision.
func (q *Queue[T]) now() time.Time { return trunc(time.Now()) }

// DeadJob is one dead-lettered job.
type DeadJob struct {
	ID        int64
	Attempts  int    // 0 without an Attempts column
	LastError string // "" without a LastError column
	Payload   []byte // as stored; it may be what failed to decode
}

// DeadLetters lists up to limit dead-lettered jobs, oldest id first.
func (q *Queue[T]) DeadLetters(ctx context.Context, limit int) ([]DeadJob, error) {
	if limit <= 0 {
		return nil, &ConfigError{Field: "limit", Reason: "must be positive"}
	}
	attempts, lastErr := "0", "''"
	if q.c.Attempts != "" {
		attempts = "COALESCE(" + col(q.c.Attempts) + ", 0)"
		if q.dialect == SQLite {
			attempts = "CAST(" + attempts + " AS INTEGER)"
		}
	}
	if q.c.LastError != "" {
		lastErr = "COALESCE(" + col(q.c.LastError) + ", '')"
	}
	where := col(q.c.LockedUntil) + " >= " + q.p(1)
	if q.c.ProcessedAt != "" {
		where += " AND " + col(q.c.ProcessedAt) + " IS NULL"
	}
	if q.c.CancelledAt != "" {
		where += " AND " + col(q.c.CancelledAt) + " IS NULL"
	}
	stmt := "SELECT " + col(q.c.ID) + ", " + attempts + ", " + lastErr + ", " + q.payloadCol() +
		" FROM " + q.table + " WHERE " + where + " ORDER BY " + col(q.c.ID) + " LIMIT " + q.p(2)
	r, err := q.db().query(ctx, stmt, q.ts(farFuture()), limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: dead letters of %s: %w", q.name, err)
	}
	defer r.Close()
	var out []DeadJob
	for r.Next() {
		var d DeadJob
		var a int64
		if err := r.Scan(&d.ID, &a, &d.LastError, &d.Payload); err != nil {
			return nil, fmt.Errorf("inbox: dead letters of %s: %w", q.name, err)
		}
		d.Attempts = int(a)
		out = append(out, d)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("inbox: dead letters of %s: %w", q.name, err)
	}
	return out, nil
}

// Requeue makes the given dead-lettered or cancelled jobs ready again with their attempts reset,
// and reports how many it requeued (ids that are not dead letters are skipped). A
// unique job takes back the key it gave up (see Unique). It wakes this process's
// subscriptions.
func (q *Queue[T]) Requeue(ctx context.Context, ids ...int64) (int64, error) {
	var total int64
	set := col(q.c.LockedUntil) + " = " + q.p(1)
	if q.c.Attempts != "" {
		set += ", " + col(q.c.Attempts) + " = 0"
	}
	if q.c.DeadAt != "" {
		set += ", " + col(q.c.DeadAt) + " = NULL"
	}
	if q.c.CancelledAt != "" {
		set += ", " + col(q.c.CancelledAt) + " = NULL"
	}
	where := col(q.c.ID) + " = " + q.p(2) + " AND " + col(q.c.LockedUntil) + " >= " + q.p(3)
	if q.c.ProcessedAt != "" {
		where += " AND " + col(q.c.ProcessedAt) + " IS NULL"
	}
	stmt := "UPDATE " + q.table + " AS u SET " + set + " WHERE " + where
	keyed := stmt
	if r := q.restoreKey(); r != "" {
		keyed = "UPDATE " + q.table + " AS u SET " + set + ", " + r + " WHERE " + where
	}
	for _, id := range ids {
		n, err := q.db().exec(ctx, keyed, q.ts(time.Unix(0, 0)), id, q.ts(farFuture()))
		if isUniqueViolation(err) {
			// A publish of the key inserted its row after the restore's check,
			// and committed: the job runs without the key (see Unique).
			n, err = q.db().exec(ctx, stmt, q.ts(time.Unix(0, 0)), id, q.ts(farFuture()))
		}
		if err != nil {
			return total, fmt.Errorf("inbox: requeue %s job %d: %w", q.name, id, err)
		}
		total += n
	}
	if total > 0 {
		q.Wake()
	}
	return total, nil
}
