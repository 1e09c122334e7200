package inbox

import (
	"context"
	"fmt"
	"time"
)

// Retention says how long finished rows are kept; zero keeps them forever.
type Retention struct {
	// Processed: rows acked on a table with a ProcessedAt column, by ProcessedAt.
	Processed time.Duration
	// Dead: dead letters, by DeadAt (needs the DeadAt column).
	Dead time.Duration
	// Cancelled: cancelled jobs, by CancelledAt.
	Cancelled time.Duration
}

// pruneBatch bounds the rows one statement of Prune deletes, so that it never holds
// the table's write lock (SQLite) or many row locks (Postgres) for long.
const pruneBatch = 1000

// Prune deletes the finished rows older than their retention: processed rows,
// dead letters and cancelled jobs. It never touches a ready, delayed or in-work
// job. It deletes in statements of at most 1000 rows until none is left, and
// reports how many it deleted; on error, those deleted so far stay deleted. A
// retention for a column the table lacks is a *ConfigError. Run it now and then,
// from a Periodic job for instance.
func (q *Queue[T]) Prune(ctx context.Context, r Retention) (int64, error) {
	c := q.c
	now := time.Now()
	var total int64
	type rule struct {
		d      time.Duration
		column string
		field  string
		extra  string
	}
	far := q.ts(farFuture())
	live := ""
	if c.ProcessedAt != "" {
		live += " AND " + col(c.ProcessedAt) + " IS NULL"
	}
	if c.CancelledAt != "" {
		live += " AND " + col(c.CancelledAt) + " IS NULL"
	}
	for _, ru := range []rule{
		{r.Processed, c.ProcessedAt, "Retention.Processed", ""},
		{r.Dead, c.DeadAt, "Retention.Dead", " AND " + col(c.LockedUntil) + " >= " + q.p(2) + live},
		// A group's job cancelled in work keeps its lease until settled (Cancel).
		{r.Cancelled, c.CancelledAt, "Retention.Cancelled", " AND " + col(c.LockedUntil) + " >= " + q.p(2)},
	} {
		if ru.d <= 0 {
			continue
		}
		if ru.column == "" {
			return total, &ConfigError{Field: ru.field, Reason: "the table has no column for it"}
		}
		args := []any{q.ts(now.Add(-ru.d))}
		if ru.extra != "" {
			args = append(args, far)
		}
		stmt := "DELETE FROM " + q.table + " WHERE " + col(c.ID) + " IN (SELECT " + col(c.ID) + " FROM " + q.table +
			" WHERE " + col(ru.column) + " < " + q.p(1) + ru.extra + " LIMIT " + fmt.Sprint(pruneBatch) + ")"
		for {
			n, err := q.db().exec(ctx, stmt, args...)
			total += n
			if err != nil {
				return total, fmt.Errorf("inbox: prune %s: %w", q.name, err)
			}
			if n < pruneBatch {
				break
			}
		}
	}
	return total, nil
}
