package inbox

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Stats counts a table's jobs by state at one moment (one statement).
type Stats struct {
	// Ready jobs may be claimed now (including those whose lease expired).
	Ready int64
	// InWork jobs are under a live lease. Rows held by the row-lock or advisory-lock
	// forms hold no lease and count as Ready. Needs the ClaimedAt column (else 0).
	InWork int64
	// Delayed jobs wait for their run time or retry backoff.
	Delayed int64
	// Dead jobs were dead-lettered: kept, never claimed again until requeued.
	Dead int64
	// Processed jobs were acked on a table with a ProcessedAt column.
	Processed int64
}

// Stats returns the table's counts by state. It blocks for one statement.
func (q *Queue[T]) Stats(ctx context.Context) (Stats, error) {
	lu := col(q.c.LockedUntil)
	now := q.p(1)
	far := q.p(2)
	notDead := lu + " < " + far
	dead := lu + " >= " + far
	processed := "0"
	if q.c.ProcessedAt != "" {
		dead += " AND " + col(q.c.ProcessedAt) + " IS NULL"
		processed = "CASE WHEN " + col(q.c.ProcessedAt) + " IS NOT NULL THEN 1 ELSE 0 END"
	}
	inWork, delayed := "0", "CASE WHEN "+lu+" > "+now+" AND "+notDead+" THEN 1 ELSE 0 END"
	if q.c.ClaimedAt != "" {
		ca := col(q.c.ClaimedAt)
		inWork = "CASE WHEN " + ca + " IS NOT NULL AND " + lu + " > " + now + " AND " + notDead + " THEN 1 ELSE 0 END"
		delayed = "CASE WHEN " + ca + " IS NULL AND " + lu + " > " + now + " AND " + notDead + " THEN 1 ELSE 0 END"
	}
	ready := "CASE WHEN " + q.claimable(now) + " THEN 1 ELSE 0 END"
	sum := func(e string) string { return "COALESCE(SUM(" + e + "), 0)" }
	stmt := "SELECT " + strings.Join([]string{sum(ready), sum(inWork), sum(delayed),
		sum("CASE WHEN " + dead + " THEN 1 ELSE 0 END"), sum(processed)}, ", ") + " FROM " + q.table
	r, err := q.db().query(ctx, stmt, q.ts(q.now()), q.ts(farFuture()))
	if err != nil {
		return Stats{}, fmt.Errorf("inbox: stats of %s: %w", q.name, err)
	}
	defer r.Close()
	var s Stats
	if r.Next() {
		err = r.Scan(&s.Ready, &s.InWork, &s.Delayed, &s.Dead, &s.Processed)
	}
	if err == nil {
		err = r.Err()
	}
	if err != nil {
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
		attempts = col(q.c.Attempts)
	}
	if q.c.LastError != "" {
		lastErr = "COALESCE(" + col(q.c.LastError) + ", '')"
	}
	where := col(q.c.LockedUntil) + " >= " + q.p(1)
	if q.c.ProcessedAt != "" {
		where += " AND " + col(q.c.ProcessedAt) + " IS NULL"
	}
	stmt := "SELECT " + col(q.c.ID) + ", " + attempts + ", " + lastErr + ", " + col(q.c.Payload) +
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

// Requeue makes the given dead-lettered jobs ready again with their attempts reset,
// and reports how many it requeued (ids that are not dead letters are skipped). It
// wakes this process's subscriptions.
func (q *Queue[T]) Requeue(ctx context.Context, ids ...int64) (int64, error) {
	var total int64
	set := col(q.c.LockedUntil) + " = " + q.p(1)
	if q.c.Attempts != "" {
		set += ", " + col(q.c.Attempts) + " = 0"
	}
	if q.c.DeadAt != "" {
		set += ", " + col(q.c.DeadAt) + " = NULL"
	}
	where := col(q.c.ID) + " = " + q.p(2) + " AND " + col(q.c.LockedUntil) + " >= " + q.p(3)
	if q.c.ProcessedAt != "" {
		where += " AND " + col(q.c.ProcessedAt) + " IS NULL"
	}
	stmt := "UPDATE " + q.table + " SET " + set + " WHERE " + where
	for _, id := range ids {
		n, err := q.db().exec(ctx, stmt, q.ts(time.Unix(0, 0)), id, q.ts(farFuture()))
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
