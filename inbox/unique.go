package inbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Unique makes a publish a no-op while a job with the same key exists: the publish
// returns the existing job's id instead of inserting. The database enforces it, with
// a unique index on the UniqueKey column (the default schema has one from version 2),
// so two instances publishing the same key at once insert one row.
//
// A job holds its key while it is ready, delayed or in work, and after it finishes
// in one of the States given; a job acked on a table without a ProcessedAt column
// is deleted, and its key with it. A finished job that gave its key up takes it
// back when it is requeued (Requeue, RetryJob), unless another job holds it by
// then: the requeued job then runs without it.
type Unique struct {
	// Key is the uniqueness key: jobs with equal keys are duplicates. Required,
	// at most MaxKeyLen bytes of UTF-8 without control characters (else a
	// *ConfigError).
	Key string
	// Period, if positive, makes the key hold within periods of this length only
	// (counted from the Unix epoch, by the publisher's clock): a job published in
	// the next period is not a duplicate of this one.
	Period time.Duration
	// States are the finished states in which a job still holds its key.
	States UniqueStates
}

// UniqueStates is a set of finished states (see Unique.States).
type UniqueStates uint8

const (
	// UniqueDead: a dead-lettered job keeps its key.
	UniqueDead UniqueStates = 1 << iota
	// UniqueCancelled: a cancelled job keeps its key.
	UniqueCancelled
	// UniqueProcessed: a processed job (on a table with a ProcessedAt column) keeps
	// its key.
	UniqueProcessed
)

// MaxKeyLen bounds, in bytes, the keys a publish stores in text columns:
// Unique.Key, PublishOpts.Group and PublishOpts.Partition (and
// PeriodicJob.Kind, bounded lower still). A Postgres index entry has a size
// limit, a few kilobytes; past this bound a key is refused with a *ConfigError
// on both databases, as is a key that is not valid UTF-8 or holds a control
// character (Postgres text cannot store NUL; the others are kept for the
// inbox's own use).
const MaxKeyLen = 1024

// checkKey refuses a key a text column of either database could not store or
// index: field names it in the *ConfigError.
func checkKey(field, key string) error {
	switch {
	case len(key) > MaxKeyLen:
		return &ConfigError{Field: field, Reason: fmt.Sprintf("%d bytes, longer than MaxKeyLen (%d)", len(key), MaxKeyLen)}
	case !utf8.ValidString(key):
		return &ConfigError{Field: field, Reason: "not valid UTF-8"}
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 }):
		return &ConfigError{Field: field, Reason: "holds a control character (NUL, or one below space)"}
	}
	return nil
}

// storedKey is the key as the column stores it: with its period's start.
func (u *Unique) storedKey(now time.Time) string {
	if u.Period <= 0 {
		return u.Key
	}
	start := now.UnixNano() / int64(u.Period) * int64(u.Period)
	return u.Key + "@" + strconv.FormatInt(start, 10)
}

// A finished row that gives its key up keeps it in the key column in released
// form, \x01 id \x01 key: distinct from every user key (those hold no control
// character) and from every other row's, so the unique index lets a new job take
// the key, and Requeue or RetryJob can give it back (restoreKey).

// chr1 is the SQL of the released form's mark, \x01.
func (q *Queue[T]) chr1() string {
	if q.dialect == SQLite {
		return "char(1)"
	}
	return "chr(1)"
}

// keepKey is the SQL of the uniqueness key after a row enters finished state bit:
// kept if the row's states include it (or it is released already, or NULL), else
// released (free for a new job).
func (q *Queue[T]) keepKey(bit UniqueStates) string { return q.keepKeyOf("", bit) }

// keepKeyOf is keepKey in an UPDATE whose target has alias a ("" for none): an
// UPDATE ... FROM has other id columns.
func (q *Queue[T]) keepKeyOf(a string, bit UniqueStates) string {
	if a != "" {
		a += "."
	}
	k, id := col(q.c.UniqueKey), a+col(q.c.ID)
	if q.dialect == Postgres {
		id += "::text"
	}
	ak := a + k
	return k + " = CASE WHEN " + a + col(q.c.UniqueStates) + " & " + strconv.Itoa(int(bit)) + " <> 0 OR substr(" + ak + ", 1, 1) = " + q.chr1() +
		" THEN " + ak + " ELSE " + q.chr1() + " || " + id + " || " + q.chr1() + " || " + ak + " END"
}

// restoreKey is the SQL that gives a requeued row (of the UPDATE's target, as
// alias u) its released key back, unless another row holds that key by then:
// the requeued job then runs without it. "" without uniqueness columns.
func (q *Queue[T]) restoreKey() string {
	if !q.hasUnique() {
		return ""
	}
	k := col(q.c.UniqueKey)
	find := "instr"
	if q.dialect == Postgres {
		find = "strpos"
	}
	orig := "substr(u." + k + ", " + find + "(substr(u." + k + ", 2), " + q.chr1() + ") + 2)"
	return k + " = CASE WHEN substr(u." + k + ", 1, 1) = " + q.chr1() + " AND NOT EXISTS (SELECT 1 FROM " + q.table + " AS o WHERE o." + k + " = " + orig + ")" +
		" THEN " + orig + " ELSE u." + k + " END"
}

// hasUnique reports whether the queue maps the uniqueness columns.
func (q *Queue[T]) hasUnique() bool { return q.c.UniqueKey != "" && q.c.UniqueStates != "" }

// checkUnique refuses a Unique publish option the queue cannot honour.
func (q *Queue[T]) checkUnique(u *Unique) error {
	if u.Key == "" {
		return &ConfigError{Field: "Unique.Key", Reason: "empty"}
	}
	if err := checkKey("Unique.Key", u.Key); err != nil {
		return err
	}
	if !q.hasUnique() {
		return &ColumnError{Table: q.name, Column: "UniqueKey", Reason: "the queue's Columns name no UniqueKey and UniqueStates columns, so uniqueness cannot be enforced"}
	}
	return nil
}

// uniqueInsertSQL is the single-row insert of a unique job: nothing is inserted
// (and nothing returned) if a row holds the key.
func (q *Queue[T]) uniqueInsertSQL() string {
	cols := append(q.insertNames(), col(q.c.UniqueKey), col(q.c.UniqueStates))
	ph := make([]string, len(cols))
	for i := range cols {
		ph[i] = q.p(i + 1)
	}
	ins := "INSERT INTO " + q.table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(ph, ", ") + ")" +
		" ON CONFLICT (" + col(q.c.UniqueKey) + ") WHERE " + col(q.c.UniqueKey) + " IS NOT NULL DO NOTHING RETURNING " + col(q.c.ID)
	if !q.notify {
		return ins
	}
	return "WITH ins AS (" + ins + ") SELECT " + col(q.c.ID) + " FROM ins, pg_notify(" + q.p(len(cols)+1) + ", '')"
}

// publishUnique inserts a unique job on db, or finds the job holding its key.
func (q *Queue[T]) publishUnique(ctx context.Context, db querier, job T, opts *PublishOpts, trace string) (int64, bool, error) {
	u := opts.Unique
	if err := q.checkUnique(u); err != nil {
		return 0, false, err
	}
	args, err := q.rowArgs(job, opts, trace)
	if err != nil {
		return 0, false, err
	}
	key := u.storedKey(time.Now())
	args = append(args, key, int(u.States))
	if q.notify {
		args = append(args, q.channel)
	}
	// The row holding the key may finish between the insert and the lookup: then
	// insert again.
	for range 5 {
		id, err := q.queryID(ctx, db, q.uniqueInsertSQL(), args...)
		if err != nil {
			return 0, false, q.uniqueErr(ctx, err)
		}
		if id != 0 {
			return id, true, nil
		}
		id, err = q.queryID(ctx, db, "SELECT "+col(q.c.ID)+" FROM "+q.table+" WHERE "+col(q.c.UniqueKey)+" = "+q.p(1), key)
		if err != nil {
			return 0, false, fmt.Errorf("inbox: publish to %s: %w", q.name, err)
		}
		if id != 0 {
			return id, false, nil
		}
	}
	return 0, false, fmt.Errorf("inbox: publish to %s: the job holding key %q kept finishing", q.name, key)
}

// queryID runs a statement returning at most one id; 0 if none.
func (q *Queue[T]) queryID(ctx context.Context, db querier, sql string, args ...any) (int64, error) {
	r, err := db.query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var id int64
	if r.Next() {
		if err := r.Scan(&id); err != nil {
			return 0, err
		}
	}
	return id, r.Err()
}

// uniqueErr explains a failed unique insert: a *ColumnError if the table lacks the
// uniqueness columns or their unique index, else the error as it is.
func (q *Queue[T]) uniqueErr(ctx context.Context, err error) error {
	var cols map[string]column
	var cerr error
	if q.dialect == SQLite {
		cols, cerr = q.sqliteColumns(ctx)
	} else {
		cols, cerr = q.pgColumns(ctx)
	}
	if cerr == nil {
		for _, c := range []string{q.c.UniqueKey, q.c.UniqueStates} {
			if _, ok := cols[c]; !ok {
				return &ColumnError{Table: q.name, Column: c, Reason: "does not exist: uniqueness needs it (the default schema has it from version 2: run Migrate)"}
			}
		}
		msg := err.Error()
		if strings.Contains(msg, "ON CONFLICT") || strings.Contains(msg, "no unique or exclusion constraint") {
			return &ColumnError{Table: q.name, Column: q.c.UniqueKey, Reason: "has no unique index WHERE " + q.c.UniqueKey + " IS NOT NULL: uniqueness needs one"}
		}
	}
	return fmt.Errorf("inbox: publish to %s: %w", q.name, err)
}
