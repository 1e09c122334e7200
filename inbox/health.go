package inbox

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Health is what a Queue's subscriptions have met since the Queue was made: failed
// claims, lost locks and rows that could not be read. The observer shows it beside
// the table's Stats. It is kept in memory by this process and costs no statement.
type Health struct {
	// ClaimErrors counts claims (a claim cycle of the lease form, one claim of a lock
	// form) that failed. Each is retried after a backoff: 50 ms doubling up to 2 s
	// for transient errors, 1 s doubling up to 30 s for permanent ones.
	ClaimErrors int64
	// PermanentErrors counts those of ClaimErrors that a retry cannot cure by itself:
	// the database refuses the statement (a missing table or column, a wrong type, no
	// permission, a closed pool). They are logged at ERROR; transient ones (a lost
	// connection, a locked SQLite database) at WARN.
	PermanentErrors int64
	// LocksLost counts jobs whose handler was cancelled because the claim was lost
	// while it ran: a lease that could not be extended before it expired, or the
	// connection holding a row lock or advisory lock closed. Each is logged.
	LocksLost int64
	// BadRows counts claimed rows that could not be read at all and were skipped (they
	// are claimed again when their lease expires). Rows that can be read but not
	// decoded are dead-lettered instead and counted in Outcomes.
	BadRows int64
	// Failing is how many claimers (lease lanes or lock-form workers) are backing off
	// after a failed claim right now: 0 when every claimer's last claim succeeded.
	Failing int64
	// LimitHeld is how many places of Limits this process's subscriptions hold in
	// TABLE_limits right now: slots of Limits.Concurrency and places of
	// Limits.PerPartition.
	LimitHeld int64
	// LimitWaiting is how many jobs this process's subscriptions hold that wait
	// for a slot or place to run in right now (a worker has them; a claimer holds
	// rows only for the places it has, prefetched).
	LimitWaiting int64
	// Prepared is how many statements the Queue keeps prepared right now (SQLite,
	// while a subscription runs; at most 96, the least recently used closed
	// first; see NewSQLite). Always 0 on Postgres, where pgx keeps its own cache
	// per connection.
	Prepared int64
	// LastError is the text of the latest failure of any kind above, at LastErrorAt
	// (zero if none).
	LastError   string
	LastErrorAt time.Time
}

// health holds a Queue's Health counters. Safe for concurrent use.
type health struct {
	claimErrors, permanent, locksLost, badRows, failing atomic.Int64
	limitHeld, limitWaiting                             atomic.Int64

	mu      sync.Mutex // guards lastErr, lastAt
	lastErr string
	lastAt  time.Time
}

func (h *health) noteErr(err error) {
	h.mu.Lock()
	h.lastErr = err.Error()
	h.lastAt = time.Now()
	h.mu.Unlock()
}

// Health reports what this Queue's subscriptions have met since it was made. Safe for
// concurrent use; it never touches the database.
func (q *Queue[T]) Health() Health {
	h := &q.health
	out := Health{
		ClaimErrors:     h.claimErrors.Load(),
		PermanentErrors: h.permanent.Load(),
		LocksLost:       h.locksLost.Load(),
		BadRows:         h.badRows.Load(),
		Failing:         h.failing.Load(),
		LimitHeld:       h.limitHeld.Load(),
		LimitWaiting:    h.limitWaiting.Load(),
		Prepared:        int64(q.stmts.len()),
	}
	h.mu.Lock()
	out.LastError, out.LastErrorAt = h.lastErr, h.lastAt
	h.mu.Unlock()
	return out
}

// permanent reports whether err is one that retrying the same statement cannot cure
// by itself: the table or a column is missing, a type or value is refused, access is
// denied, the pool or database handle is closed. Everything else (a lost connection,
// a locked SQLite database, a serialization failure, an unknown error) is transient.
func permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, sql.ErrConnDone) {
		return true
	}
	// A closed *sql.DB or pgx pool: database/sql and puddle (the pool under pgxpool)
	// report them with these texts only.
	if msg := err.Error(); strings.Contains(msg, "sql: database is closed") || strings.HasSuffix(msg, "closed pool") {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		if pgErr.Code == "23505" {
			// A unique violation in a claim is two claims of one FIFO group
			// whose snapshots missed each other's (the group's unique index
			// refused the second): the next claim sees the first.
			return false
		}
		switch pgErr.Code[:2] {
		case "0A", // feature not supported
			"22", // data exception
			"23", // integrity constraint violation
			"28", // invalid authorization
			"3D", // invalid catalog (database) name
			"3F", // invalid schema name
			"42": // syntax error or access rule violation: undefined table or column, wrong type, denied
			return true
		}
		return false
	}
	var e interface{ Code() int }
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case 1, // SQLITE_ERROR: no such table or column, syntax
			3,  // SQLITE_PERM
			8,  // SQLITE_READONLY
			11, // SQLITE_CORRUPT
			18, // SQLITE_TOOBIG
			19, // SQLITE_CONSTRAINT
			20, // SQLITE_MISMATCH
			23, // SQLITE_AUTH
			26: // SQLITE_NOTADB
			return true
		}
	}
	return false
}

// Pacing of retries after failed claims.
const (
	retryFirst          = 50 * time.Millisecond
	retryCap            = 2 * time.Second
	retryFirstPermanent = time.Second
	retryCapPermanent   = 30 * time.Second
)

// retrier paces one claimer's retries after failed claims, counts them in the queue's
// Health and logs them: permanent errors at ERROR, transient ones at WARN, the
// recovery at INFO. A claimer owns its retrier; it is not safe for concurrent use.
type retrier struct {
	h     *health
	log   *slog.Logger
	attrs []any // table and form, for every log line
	fails int
	since time.Time
	wait  time.Duration
}

func newRetrier(h *health, log *slog.Logger, attrs ...any) *retrier {
	return &retrier{h: h, log: log, attrs: attrs}
}

// failed records a failure of what and pauses before the retry; it reports false if
// ctx ended first.
func (r *retrier) failed(ctx context.Context, what string, err error) bool {
	perm := permanent(err)
	first, ceil := retryFirst, retryCap
	if perm {
		first, ceil = retryFirstPermanent, retryCapPermanent
	}
	if r.fails == 0 {
		r.since = time.Now()
		r.h.failing.Add(1)
		r.wait = first
	} else {
		r.wait = min(max(2*r.wait, first), ceil)
	}
	r.fails++
	r.h.claimErrors.Add(1)
	r.h.noteErr(err)
	// ±20% jitter, so that instances failing together do not retry together.
	d := time.Duration(float64(r.wait) * (0.8 + 0.4*rand.Float64()))
	attrs := append(r.attrs[:len(r.attrs):len(r.attrs)], "err", err, "failures", r.fails, "retry_in", d.Round(time.Millisecond))
	if perm {
		r.h.permanent.Add(1)
		r.log.Error("inbox: "+what+" refused by the database; retrying until it is fixed", attrs...)
	} else {
		r.log.Warn("inbox: "+what+" failed; retrying", attrs...)
	}
	return pause(ctx, d)
}

// ok records a success, ending a run of failures if there was one.
func (r *retrier) ok() {
	if r.fails == 0 {
		return
	}
	r.log.Info("inbox: claims recovered", append(r.attrs[:len(r.attrs):len(r.attrs)], "failures", r.fails, "after", time.Since(r.since).Round(time.Millisecond))...)
	r.done()
}

// done ends the retrier's part in Health.Failing (the claimer is exiting).
func (r *retrier) done() {
	if r.fails > 0 {
		r.h.failing.Add(-1)
	}
	r.fails = 0
}
