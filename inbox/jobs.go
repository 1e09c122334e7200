package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// JobState is where a job stands, in the buckets Stats counts.
type JobState string

// The states of a job. Every row is in exactly one.
const (
	StateReady     JobState = "ready"     // claimable now (rows held by the lock forms too)
	StateInWork    JobState = "in_work"   // under a live lease (needs Columns.ClaimedAt)
	StateDelayed   JobState = "delayed"   // waiting for its run time or retry backoff
	StateDead      JobState = "dead"      // dead-lettered
	StateProcessed JobState = "processed" // acked on a table with Columns.ProcessedAt
	StateInvalid   JobState = "invalid"   // no claim will take it as it stands (see Stats.Invalid)
	StateCancelled JobState = "cancelled" // cancelled by Queue.Cancel (needs Columns.CancelledAt)
)

// jobStates lists the states by the bucket number bucketSQL gives them.
var jobStates = [...]JobState{StateReady, StateInWork, StateDelayed, StateDead, StateProcessed, StateInvalid, StateCancelled}

// ParseJobState returns the state named s ("ready", "in_work", "delayed", "dead",
// "processed", "invalid" or "cancelled"), or a *ConfigError.
func ParseJobState(s string) (JobState, error) {
	for _, st := range jobStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", &ConfigError{Field: "State", Reason: fmt.Sprintf("%q is not a job state (ready, in_work, delayed, dead, processed, invalid, cancelled)", s)}
}

// bucket returns the number bucketSQL gives st, or -1.
func (st JobState) bucket() int {
	for i, s := range jobStates {
		if s == st {
			return i
		}
	}
	return -1
}

// ErrNoJob is matched (errors.Is) by the error of Job, RetryJob and DeleteJob for an
// id the table does not hold.
var ErrNoJob = errors.New("inbox: no such job")

// JobStateError reports that a job is in a state an operation does not apply to: a
// job in work cannot be retried or deleted (cancel it, or let it settle).
type JobStateError struct {
	Table string
	ID    int64
	Op    string // "retry" or "delete"
	State JobState
	// Reason says more, when the state alone does not explain the refusal.
	Reason string
}

// Error describes the refusal.
func (e *JobStateError) Error() string {
	msg := fmt.Sprintf("inbox: cannot %s %s job %d: it is %s", e.Op, e.Table, e.ID, e.State)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

// JobRecord is one row of a job table as an operator sees it. A field whose column
// the table lacks is zero.
type JobRecord struct {
	ID       int64
	State    JobState
	Attempts int
	Priority int
	// LockedUntil is the row's lock deadline: when a ready or delayed job may run,
	// when a lease ends. Zero for a NULL deadline, or one Postgres stores as infinite.
	LockedUntil time.Time
	ClaimedAt   time.Time
	DeadAt      time.Time
	CreatedAt   time.Time
	LastError   string
	Trace       string // the Columns.Trace column
	// Payload is the job as stored (it may be what failed to decode). Jobs cuts it to
	// ListPayloadLimit bytes; PayloadSize is its full length.
	Payload     []byte
	PayloadSize int
}

// Limits of Jobs.
const (
	// MaxListLimit bounds ListOptions.Limit: one page of Jobs.
	MaxListLimit = 500
	// ListPayloadLimit bounds the payload of each job Jobs returns (Job returns it
	// whole).
	ListPayloadLimit = 256
)

// ListOptions select a page of jobs for Jobs.
type ListOptions struct {
	// State selects the jobs in one state; "" lists every job.
	State JobState
	// AfterID starts the page after this id: pass the last id of the previous page.
	AfterID int64
	// Limit is the page size, 1 to MaxListLimit.
	Limit int
}

// bucketSQL is the CASE expression giving each row its state's bucket (the index of
// jobStates): 0 ready, 1 in work, 2 delayed, 3 dead, 4 processed, 5 invalid, 6 cancelled; now and
// far are the placeholders of the current time and of farFuture.
func (q *Queue[T]) bucketSQL(now, far string) string {
	c := q.c
	lu := col(c.LockedUntil)
	var b strings.Builder
	b.WriteString("CASE")
	if c.ProcessedAt != "" {
		b.WriteString(" WHEN " + col(c.ProcessedAt) + " IS NOT NULL THEN 4")
	}
	if c.CancelledAt != "" {
		b.WriteString(" WHEN " + col(c.CancelledAt) + " IS NOT NULL THEN 6")
	}
	b.WriteString(" WHEN " + col(c.ID) + " IS NULL THEN 5")
	if c.LockedUntilNullable {
		b.WriteString(" WHEN " + lu + " IS NULL THEN 0")
	} else {
		b.WriteString(" WHEN " + lu + " IS NULL THEN 5")
	}
	b.WriteString(" WHEN " + lu + " >= " + far + " THEN 3")
	b.WriteString(" WHEN " + lu + " <= " + now + " THEN 0")
	if c.ClaimedAt != "" {
		b.WriteString(" WHEN " + col(c.ClaimedAt) + " IS NOT NULL THEN 1")
	}
	b.WriteString(" ELSE 2 END")
	return b.String()
}

// recordSelect is the select list of a JobRecord, read by scanRecord: id, bucket,
// attempts, priority, lock deadline, claimed at, dead at, created at, last error,
// trace, payload (whole, or, with a cut, its first ListPayloadLimit bytes and
// its length).
func (q *Queue[T]) recordSelect(now, far string, cut *payloadCut) string {
	c := q.c
	intCol := func(name string) string {
		if name == "" {
			return "0"
		}
		if q.dialect == SQLite {
			return "CAST(COALESCE(" + col(name) + ", 0) AS INTEGER)"
		}
		return "COALESCE(" + col(name) + ", 0)::bigint"
	}
	timeCol := func(name string) string {
		if name == "" {
			return "NULL"
		}
		if q.dialect == SQLite {
			return "CAST(" + col(name) + " AS INTEGER)"
		}
		// pgx cannot read an infinite timestamp into a time.Time.
		return "CASE WHEN isfinite(" + col(name) + ") THEN " + col(name) + " END"
	}
	textCol := func(name string) string {
		if name == "" {
			return "''"
		}
		return "COALESCE(CAST(" + col(name) + " AS TEXT), '')"
	}
	return col(c.ID) + ", " + q.bucketSQL(now, far) + ", " + intCol(c.Attempts) + ", " + intCol(c.Priority) + ", " +
		timeCol(c.LockedUntil) + ", " + timeCol(c.ClaimedAt) + ", " + timeCol(c.DeadAt) + ", " + timeCol(c.CreatedAt) + ", " +
		textCol(c.LastError) + ", " + textCol(c.Trace) + ", " + q.payloadSQL(cut)
}

// payloadCut is how a listing reads payloads: the first ListPayloadLimit bytes
// and the length, computed by the database, so that a page of large payloads is
// not read whole to show a few bytes of each. nil reads them whole.
type payloadCut struct {
	pgType string // Postgres: the payload column's base type
}

// payloadSQL is the payload's part of the select list: the payload whole, or,
// with a cut, its first ListPayloadLimit bytes and its length in bytes.
func (q *Queue[T]) payloadSQL(cut *payloadCut) string {
	if cut == nil {
		return q.payloadCol()
	}
	n := strconv.Itoa(ListPayloadLimit)
	p := col(q.c.Payload)
	if q.dialect == SQLite {
		b := "CAST(" + p + " AS BLOB)"
		return "substr(" + b + ", 1, " + n + "), length(" + b + ")"
	}
	switch cut.pgType {
	case "bytea":
	case "text", "character varying":
		p = "convert_to(" + p + ", 'UTF8')"
	default: // json, jsonb: as pgx reads them, in their text form
		p = "convert_to(" + p + "::text, 'UTF8')"
	}
	return "substring(" + p + " from 1 for " + n + "), octet_length(" + p + ")"
}

// scanRecord reads one row of recordSelect.
func (q *Queue[T]) scanRecord(r rows, cut *payloadCut) (JobRecord, error) {
	var j JobRecord
	var bucket, attempts, priority, size int64
	var err error
	dest := []any{&j.Payload}
	if cut != nil {
		dest = append(dest, &size)
	}
	if q.dialect == SQLite {
		var lu, ca, da, cr sql.NullInt64
		err = r.Scan(append([]any{&j.ID, &bucket, &attempts, &priority, &lu, &ca, &da, &cr, &j.LastError, &j.Trace}, dest...)...)
		for _, p := range []struct {
			v  sql.NullInt64
			to *time.Time
		}{{lu, &j.LockedUntil}, {ca, &j.ClaimedAt}, {da, &j.DeadAt}, {cr, &j.CreatedAt}} {
			if p.v.Valid {
				*p.to = time.UnixMicro(p.v.Int64).UTC()
			}
		}
	} else {
		var lu, ca, da, cr *time.Time
		err = r.Scan(append([]any{&j.ID, &bucket, &attempts, &priority, &lu, &ca, &da, &cr, &j.LastError, &j.Trace}, dest...)...)
		for _, p := range []struct {
			v  *time.Time
			to *time.Time
		}{{lu, &j.LockedUntil}, {ca, &j.ClaimedAt}, {da, &j.DeadAt}, {cr, &j.CreatedAt}} {
			if p.v != nil {
				*p.to = p.v.UTC()
			}
		}
	}
	if err != nil {
		return JobRecord{}, err
	}
	if bucket >= 0 && int(bucket) < len(jobStates) {
		j.State = jobStates[bucket]
	}
	j.Attempts, j.Priority = int(attempts), int(priority)
	j.PayloadSize = len(j.Payload)
	if cut != nil {
		j.PayloadSize = int(size)
	}
	return j, nil
}

// Jobs lists one page of the table's jobs, by id, in the state o.State selects (all
// of them if ""). It blocks for one statement, which reads the table from AfterID
// on: the listing is for an operator, not for polling. Bad options are a
// *ConfigError.
func (q *Queue[T]) Jobs(ctx context.Context, o ListOptions) ([]JobRecord, error) {
	if o.Limit < 1 || o.Limit > MaxListLimit {
		return nil, &ConfigError{Field: "Limit", Reason: fmt.Sprintf("%d is not between 1 and %d", o.Limit, MaxListLimit)}
	}
	if o.State != "" {
		if _, err := ParseJobState(string(o.State)); err != nil {
			return nil, err
		}
	}
	cut := &payloadCut{}
	if q.dialect == Postgres {
		cols, err := q.pgColumns(ctx)
		if err != nil {
			return nil, fmt.Errorf("inbox: list jobs of %s: %w", q.name, err)
		}
		cut.pgType = cols[q.c.Payload].base
	}
	s := &stmt[T]{q: q}
	now, far := s.arg(q.ts(q.now())), s.arg(q.ts(farFuture()))
	where := col(q.c.ID) + " > " + s.arg(o.AfterID)
	if o.State != "" {
		where += " AND " + q.bucketSQL(now, far) + " = " + s.arg(o.State.bucket())
	}
	stmt := "SELECT " + q.recordSelect(now, far, cut) + " FROM " + q.table + " WHERE " + where +
		" ORDER BY " + col(q.c.ID) + " LIMIT " + s.arg(o.Limit)
	r, err := q.db().query(ctx, stmt, s.args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: list jobs of %s: %w", q.name, err)
	}
	defer r.Close()
	out := []JobRecord{}
	for r.Next() {
		j, err := q.scanRecord(r, cut)
		if err != nil {
			return nil, fmt.Errorf("inbox: list jobs of %s: %w", q.name, err)
		}
		out = append(out, j)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("inbox: list jobs of %s: %w", q.name, err)
	}
	return out, nil
}

// Job returns the job id, payload whole. An id the table does not hold is an error
// matching ErrNoJob. It blocks for one statement.
func (q *Queue[T]) Job(ctx context.Context, id int64) (JobRecord, error) {
	return q.job(ctx, q.db(), id, "")
}

// job reads one record on db; lock is appended to the statement (FOR UPDATE NOWAIT).
func (q *Queue[T]) job(ctx context.Context, db querier, id int64, lock string) (JobRecord, error) {
	s := &stmt[T]{q: q}
	now, far := s.arg(q.ts(q.now())), s.arg(q.ts(farFuture()))
	stmt := "SELECT " + q.recordSelect(now, far, nil) + " FROM " + q.table + " WHERE " + col(q.c.ID) + " = " + s.arg(id) + lock
	r, err := db.query(ctx, stmt, s.args...)
	if err != nil {
		return JobRecord{}, q.jobErr(id, err)
	}
	defer r.Close()
	if !r.Next() {
		if err := r.Err(); err != nil {
			return JobRecord{}, q.jobErr(id, err)
		}
		return JobRecord{}, fmt.Errorf("inbox: %s job %d: %w", q.name, id, ErrNoJob)
	}
	j, err := q.scanRecord(r, nil)
	if err != nil {
		return JobRecord{}, fmt.Errorf("inbox: %s job %d: %w", q.name, id, err)
	}
	return j, r.Err()
}

// errRowLocked marks a row that a row-lock claim (or another operator) holds.
var errRowLocked = errors.New("row locked")

// jobErr wraps a failure reading job id; a row lock Postgres refused to wait for
// (lock_not_available) becomes errRowLocked.
func (q *Queue[T]) jobErr(id int64, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return errRowLocked
	}
	return fmt.Errorf("inbox: %s job %d: %w", q.name, id, err)
}

// adminTx runs f on job id inside a transaction in which no claim can take it: on
// SQLite an immediate transaction (the one writer), on Postgres one holding the row
// (FOR UPDATE NOWAIT) and its advisory lock. A job a row-lock or advisory-lock claim
// holds is reported in work (a *JobStateError), without waiting for it.
func (q *Queue[T]) adminTx(ctx context.Context, id int64, op string, f func(db querier, j JobRecord) error) error {
	inWork := &JobStateError{Table: q.name, ID: id, Op: op, State: StateInWork}
	if q.dialect == SQLite {
		return q.sqliteTx(ctx, func(db querier) error {
			j, err := q.job(ctx, db, id, "")
			if err != nil {
				return err
			}
			return f(db, j)
		})
	}
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		db := pgQ{tx}
		j, err := q.job(ctx, db, id, " FOR UPDATE NOWAIT")
		if errors.Is(err, errRowLocked) {
			inWork.Reason = "a row-lock claim holds it"
			return inWork
		}
		if err != nil {
			return err
		}
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1, $2)", q.lockKey(), int32(id)).Scan(&got); err != nil {
			return fmt.Errorf("inbox: %s job %d: %w", q.name, id, err)
		}
		if !got {
			inWork.Reason = "an advisory-lock claim holds it"
			return inWork
		}
		return f(db, j)
	})
}

// RetryJob makes job id ready now: a delayed job (waiting for its run time or
// backoff) keeps its attempts; a dead letter or a cancelled job has them reset, and
// a unique one its key back, as Requeue does. A
// ready job is left as it is. A job in work, processed or invalid is a
// *JobStateError, as is a delayed job on a table without a ClaimedAt column (where a
// job in work looks delayed); an unknown id matches ErrNoJob. It wakes this
// process's subscriptions, and blocks for one short transaction that waits for no
// claim.
func (q *Queue[T]) RetryJob(ctx context.Context, id int64) error {
	woke := false
	err := q.adminTx(ctx, id, "retry", func(db querier, j JobRecord) error {
		restore := "" // the SQL giving a requeued unique job its key back
		refuse := func(reason string) error {
			return &JobStateError{Table: q.name, ID: id, Op: "retry", State: j.State, Reason: reason}
		}
		set := col(q.c.LockedUntil) + " = " + q.p(1)
		switch j.State {
		case StateReady:
			return nil
		case StateDelayed:
			if q.c.ClaimedAt == "" {
				return refuse("without a ClaimedAt column a job in work looks delayed")
			}
		case StateDead, StateCancelled:
			if q.heldCancelled(j) {
				return refuse("it was cancelled in work and its handler may still run: try again once it is settled")
			}
			if q.c.Attempts != "" {
				set += ", " + col(q.c.Attempts) + " = 0"
			}
			if q.c.DeadAt != "" {
				set += ", " + col(q.c.DeadAt) + " = NULL"
			}
			if q.c.CancelledAt != "" {
				set += ", " + col(q.c.CancelledAt) + " = NULL"
			}
			restore = q.restoreKey()
		default:
			return refuse("")
		}
		update := func(set string) error {
			_, err := db.exec(ctx, "UPDATE "+q.table+" AS u SET "+set+" WHERE "+col(q.c.ID)+" = "+q.p(2), q.ts(time.Unix(0, 0)), id)
			return err
		}
		err := error(nil)
		switch {
		case restore == "":
			err = update(set)
		case q.dialect == SQLite:
			err = update(set + ", " + restore)
		default:
			// A publish of the key may have inserted its row, uncommitted, after the
			// restore's check: the write of the key then meets the unique index once
			// it commits. The job runs without the key (see Unique).
			if err = exec0(ctx, db, "SAVEPOINT inbox_restore_key"); err == nil {
				if err = update(set + ", " + restore); isUniqueViolation(err) {
					if err = exec0(ctx, db, "ROLLBACK TO SAVEPOINT inbox_restore_key"); err == nil {
						err = update(set)
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("inbox: retry %s job %d: %w", q.name, id, err)
		}
		woke = true
		return nil
	})
	if err == nil && woke {
		q.Wake()
	}
	return err
}

// heldCancelled reports a job cancelled in work that keeps its lease until its
// holder settles it (a FIFO group's: Queue.Cancel).
func (q *Queue[T]) heldCancelled(j JobRecord) bool {
	return j.State == StateCancelled && !j.ClaimedAt.IsZero() && j.LockedUntil.Before(farFuture())
}

// DeleteJob deletes job id, whatever its state but in work (a *JobStateError: cancel
// it, or let it settle); an unknown id matches ErrNoJob. A job of a FIFO group
// cancelled in work whose holder still holds its lease (see Cancel) counts as in
// work: it is refused (a *JobStateError, State StateCancelled) until its handler has
// returned and its settlement is written, so that the group's next job does not
// start beside it. It blocks for one short transaction that waits for no claim.
func (q *Queue[T]) DeleteJob(ctx context.Context, id int64) error {
	return q.adminTx(ctx, id, "delete", func(db querier, j JobRecord) error {
		if j.State == StateInWork {
			return &JobStateError{Table: q.name, ID: id, Op: "delete", State: j.State}
		}
		if q.heldCancelled(j) {
			return &JobStateError{Table: q.name, ID: id, Op: "delete", State: j.State, Reason: "it was cancelled in work and its handler may still run: try again once it is settled"}
		}
		if _, err := db.exec(ctx, "DELETE FROM "+q.table+" WHERE "+col(q.c.ID)+" = "+q.p(1), id); err != nil {
			return fmt.Errorf("inbox: delete %s job %d: %w", q.name, id, err)
		}
		return nil
	})
}

// isUniqueViolation reports a Postgres unique_violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// exec0 runs a statement whose row count does not matter.
func exec0(ctx context.Context, db querier, sql string) error {
	_, err := db.exec(ctx, sql)
	return err
}
