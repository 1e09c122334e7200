package inbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits bound a table's jobs in work across every instance, and the starts per
// period, through the database alone (see the package doc, Limits). Every
// subscription of the table should give the same Limits: each claim enforces the
// limits it was given. The zero value limits nothing.
type Limits struct {
	// Concurrency, if positive, is the most jobs of the table in work at once,
	// across every instance: the most handlers running at once, each in one of
	// Concurrency slots that subscriptions lease in TABLE_limits, so that claims
	// need not wait for each other (a subscription may hold more rows,
	// prefetched for the slots it has). In a batch subscription each job of a
	// batch runs in a slot of its own (a batch runs as many of its jobs at once
	// as its worker has slots for, and the rest after them).
	Concurrency int
	// PerPartition, if positive, is the most jobs of one partition key
	// (Columns.Partition) in work at once, across every instance: the most
	// handlers of a key running at once, each in one of the key's PerPartition
	// places that subscriptions lease in TABLE_limits (made for a key when it
	// has ready rows, deleted when it has none), so that claims need not wait
	// for each other nor count (a subscription may hold more rows of a key,
	// prefetched for the places it has; a batch subscription holds one row per
	// place). Rows without a key are not limited by it (a claimer looks for them
	// while it finds some and otherwise once per PollInterval: they have no
	// index of their own). It makes claims fair (as Fair does).
	PerPartition int
	// Fair makes claims take turns between partition keys, so that one key's
	// backlog cannot starve the others: a job's turn is its place among its
	// key's ready jobs plus the key's jobs in work, and a claim takes the lowest
	// turns first, keys level in turn in a random order. Each key's jobs are
	// still taken in claim order. Rows without a key take their turns as one
	// more key.
	Fair bool
	// Rate, if positive, is the most claims (starts of an attempt) per Per,
	// across every instance: counted in windows of Per from the Unix epoch, by
	// the host clock, in the table TABLE_limits (schema version 4). The counter
	// never goes back to an earlier window: a claimer whose clock reads a window
	// before the counter's (its claim was late, or its clock is behind) claims
	// nothing under Rate until its clock reaches that window, so the hosts'
	// clocks should agree far closer than Per. A change of Per starts the count
	// afresh.
	//
	// The windows are fixed, not sliding: each window of Per holds at most Rate
	// starts, but the starts of one window may fall at its end and those of the
	// next at its start, so up to 2 × Rate starts can come within a span much
	// shorter than Per (any span shorter than Per holds at most 2 × Rate; n
	// consecutive windows at most n × Rate). A backlog starts its Rate jobs at
	// the opening of each window, not spread over it. Where a downstream cannot
	// take such a burst, set Rate to half of what it takes.
	//
	// A start is counted when its row is claimed. With the default prefetch
	// (which Rate keeps) a prefetched job's handler starts when a worker is free,
	// after its claim, so handler starts can lag their window by as long as a
	// worker's queue takes; set Prefetch to NoPrefetch where the handlers' own
	// starts must keep to the windows. On Postgres each claimer reserves starts
	// from the window's counter in TABLE_limits before it claims (one statement,
	// at least its workers' worth at a time) instead of counting under a lock;
	// what a claimer reserved and did not claim lapses with the window, so a
	// window with claims that come back short may start fewer than Rate.
	Rate int
	// Per is Rate's period; required with Rate.
	Per time.Duration
}

// on reports whether any limit is set.
func (l Limits) on() bool { return l.Concurrency > 0 || l.PerPartition > 0 || l.Fair || l.Rate > 0 }

// bounds reports whether a claim may come back short because a limit is reached
// (Concurrency, PerPartition or Rate), with rows still ready.
func (l Limits) bounds() bool { return l.Concurrency > 0 || l.PerPartition > 0 || l.Rate > 0 }

// fair reports whether claims take turns between partition keys.
func (l Limits) fair() bool { return l.Fair || l.PerPartition > 0 }

// checkLimits refuses Limits a subscription cannot enforce.
func (q *Queue[T]) checkLimits(o *SubscribeOptions) error {
	l := o.Limits
	switch {
	case l.Concurrency < 0 || l.PerPartition < 0 || l.Rate < 0:
		return &ConfigError{Field: "Limits", Reason: "negative"}
	case !l.on():
		return nil
	case o.Form != Lease:
		return &ConfigError{Field: "Limits", Reason: "the lock forms keep their rows in work in uncommitted transactions or session locks that other instances cannot count: limits need the lease form"}
	case q.c.ClaimedAt == "":
		return &ConfigError{Field: "Limits", Reason: "needs a ClaimedAt column: it marks the rows in work"}
	case l.fair() && q.c.Partition == "":
		return &ConfigError{Field: "Limits", Reason: "PerPartition and Fair need a Partition column"}
	case l.Rate > 0 && l.Per <= 0:
		return &ConfigError{Field: "Limits.Per", Reason: "Rate needs a positive period"}
	}
	return nil
}

// farLit is farFuture as an SQL literal: the lock deadline of finished rows
// (dead, processed, cancelled).
func (q *Queue[T]) farLit() string {
	if q.dialect == SQLite {
		return strconv.FormatInt(farFuture().UnixMicro(), 10)
	}
	return "'9999-01-01 00:00:00+00'::timestamptz"
}

// live is the SQL of a row a of the table that is not finished: ready, delayed or
// in work.
func (q *Queue[T]) live(a string) string {
	lu := a + "." + col(q.c.LockedUntil)
	if q.c.LockedUntilNullable {
		return "(" + lu + " IS NULL OR " + lu + " < " + q.farLit() + ")"
	}
	return lu + " < " + q.farLit()
}

// groupReady is the claim predicate of FIFO groups on the row r (an alias or the
// quoted table): a row in a group may be claimed only if no other live row of its
// group is claimed (in work, or a claim that crashed: it is taken again first) and,
// unless r itself is that claimed row, none comes before it. "" on a queue without
// groups.
//
// With set, a row of a group with a claimed row (busy: read once, a hashed set)
// is passed over by a lookup in that set before either probe: a claim that reads
// the claim index in order passes many such rows. A claim of heads (headsIn) reads
// a few rows, one a group, and goes without it.
func (q *Queue[T]) groupReady(r string, set bool) string {
	if q.c.Group == "" {
		return ""
	}
	g, id, ca := col(q.c.Group), col(q.c.ID), col(q.c.ClaimedAt)
	// Two probes that fit the group's indexes: its claimed row (the index on the
	// group where ClaimedAt is set: unique on Postgres, plain on SQLite from
	// version 5), and the nearest row before r that is live, read backwards on
	// the index on group and id. A row behind a head finds the row before it at
	// once. As one probe with an OR, the database read the group from its first
	// row for every candidate: on Postgres through its finished and deleted rows
	// (the fifo100 drain ran at 3,500 jobs/s, 5,600 with this); on SQLite the
	// whole group, so that a claim cost as much as the backlog (16 ms at 60,000
	// rows in 100 groups, 1.4 ms at 10,000).
	//
	// Before either, a row of a group with a claimed row (busy: read once, a
	// hashed set) is passed over unless it is that row. A claim that finds fewer
	// rows than it asks for reads every ready row, and most of them, when every
	// group with ready rows is in work, are rows of busy groups: the set makes
	// each cost a lookup rather than two probes (all groups busy, 60,000 rows:
	// 14 ms, not 59, on Postgres; 21, not 46, on SQLite). On SQLite only with
	// the index of version 5 (groupIndexed): without it the set is read from the
	// whole group index, and a claim cost 3 times as much.
	busy := ""
	if set && (q.dialect == Postgres || q.groupIndexed.Load()) {
		busy = "(" + r + "." + ca + " IS NOT NULL OR " + r + "." + g + " NOT IN (SELECT h." + g + " FROM " + q.table + " AS h WHERE h." + g + " IS NOT NULL AND h." + ca + " IS NOT NULL AND " + q.live("h") + "))" +
			" AND "
	}
	return " AND (" + r + "." + g + " IS NULL OR (" + busy +
		"NOT EXISTS (SELECT 1 FROM " + q.table + " AS h WHERE h." + g + " = " + r + "." + g +
		" AND h." + ca + " IS NOT NULL AND h." + id + " <> " + r + "." + id + " AND " + q.live("h") + ")" +
		" AND (" + r + "." + ca + " IS NOT NULL OR (SELECT h." + id + " FROM " + q.table + " AS h WHERE h." + g + " = " + r + "." + g +
		" AND h." + id + " < " + r + "." + id + " AND " + q.live("h") + " ORDER BY h." + id + " DESC LIMIT 1) IS NULL)))"
}

// pgGroupClaimSettings are the planner settings a Postgres claim (sql) of a queue
// with FIFO groups runs under, in a transaction of its own (SET LOCAL).
//
// The planner cannot tell how many rows pass groupReady: it guesses a few in
// a thousand (a subquery IS NULL), where in fact nearly every group's head is
// among the first rows in claim order. So it judged the claim index, read in
// order until LIMIT rows pass, to cost as much as reading all of it; it chose to
// test every ready row and sort those that passed (a claim of 40 rows: 29 ms at
// 10,000 rows, 280 ms at 60,000: a drain slowed as the backlog grew), and where
// it chose the index, the estimate (0.7-3.7 million) crossed jit_above_cost and
// each run compiled the plan, 20-40 ms for a statement that runs in 1. Without
// a sort to choose, it reads the index in order; without JIT, it runs the plan.
//
// Neither does it scan a bitmap or the whole table: the set of groups in work is
// read through an index with an entry for every row claimed since the last
// vacuum, and a bitmap scan reads each of those rows' pages, where a plain index
// scan marks the entries of rows that are gone and passes them after (at 60,000
// jobs, 52,000 entries and 2 ms a read); the planner, misled by the statistics of
// a table whose rows come and go, chose either.
//
// A claim of heads (headsIn) sorts its candidates, a few rows, in claim order:
// it keeps the sort.
func pgGroupClaimSettings(sql string) []string {
	if strings.Contains(sql, headsMark) {
		return pgHeadsSettings
	}
	return pgInOrderSettings
}

var (
	pgHeadsSettings   = []string{"SET LOCAL jit = off", "SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_seqscan = off"}
	pgInOrderSettings = []string{"SET LOCAL jit = off", "SET LOCAL enable_sort = off", "SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_seqscan = off"}
)

// pgClaimQuery runs a claim statement (sql, args) on db, a Postgres pool or
// connection, and hands its rows to read, which need not read them all. On a
// queue with FIFO groups it runs in a transaction of its own under
// pgGroupClaimSettings(sql), in one round trip; an error there leaves db's
// connection in a failed transaction, which a pool closes rather than reuse.
func (q *Queue[T]) pgClaimQuery(ctx context.Context, db pgBatchQuerier, sql string, args []any, read func(pgx.Rows) error) error {
	if q.c.Group == "" {
		r, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		if err := read(r); err != nil {
			return err
		}
		r.Close()
		return r.Err()
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	settings := pgGroupClaimSettings(sql)
	for _, set := range settings {
		b.Queue(set)
	}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := db.SendBatch(ctx, b)
	err := func() error {
		if err := execN(br, 1+len(settings)); err != nil {
			return err
		}
		r, err := br.Query()
		if err != nil {
			return err
		}
		if err := read(r); err != nil {
			r.Close()
			return err
		}
		r.Close()
		if err := r.Err(); err != nil {
			return err
		}
		_, err = br.Exec()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// pgBatchQuerier is what pgClaimQuery runs on: a *pgxpool.Pool or a
// *pgxpool.Conn.
type pgBatchQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// inWork is the SQL of a row a that is in work under a live lease.
func (q *Queue[T]) inWork(a, now string) string {
	lu := a + "." + col(q.c.LockedUntil)
	return a + "." + col(q.c.ClaimedAt) + " IS NOT NULL AND " + lu + " > " + now + " AND " + lu + " < " + q.farLit()
}

// pickSQL is the subquery that picks the ids a claim takes at now: up to limit
// claimable rows (an SQL expression), that satisfy extra ("" or " AND ..." on
// unqualified columns), in claim order, with the FIFO groups' and limits' rules,
// locked FOR UPDATE SKIP LOCKED if skipLocked.
func (q *Queue[T]) pickSQL(s *stmt[T], l Limits, at time.Time, now, extra, limit string, skipLocked bool) string {
	lock := ""
	if skipLocked {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	asked := limit
	limit = q.limitedBy(s, l, at, now, limit)
	heads, loose := false, false
	if q.dialect == Postgres && l.PerPartition == 0 && q.c.Group != "" {
		heads, loose = q.census.headsOn()
	}
	where := q.claimable(now) + q.groupReady("r", !heads) + extra
	base := where
	if heads {
		// A fair claim looks for each key's first rows without a group itself.
		where = q.headsIn("r", now, extra, asked, loose && !l.fair(), skipLocked) + " AND " + where
	}
	if !l.fair() {
		return "SELECT " + col(q.c.ID) + " FROM " + q.table + " AS r WHERE " + where +
			" ORDER BY " + q.order() + " LIMIT " + limit + lock
	}
	// Fair: each key's first rows, ranked by turn (the row's place among its
	// key's candidates plus the key's jobs in work), taken turn by turn.
	id, pk := col(q.c.ID), col(q.c.Partition)
	cols := "r." + id + ", r." + pk + ", r." + col(q.c.LockedUntil)
	if q.c.Priority != "" {
		cols += ", r." + col(q.c.Priority)
	}
	var cand string
	if q.dialect == Postgres {
		// One index probe per key (a loose scan of the partition index), then
		// each key's first rows in claim order.
		keys := "WITH RECURSIVE k(v) AS (SELECT min(" + pk + ") FROM " + q.table + " WHERE " + pk + " IS NOT NULL" +
			" UNION ALL SELECT (SELECT min(" + pk + ") FROM " + q.table + " WHERE " + pk + " > k.v) FROM k WHERE k.v IS NOT NULL)"
		perKey := func(where string) string {
			return " SELECT r.* FROM k CROSS JOIN LATERAL (SELECT " + cols + " FROM " + q.table + " AS r WHERE r." + pk + " = k.v AND " + where +
				" ORDER BY " + q.order() + " LIMIT " + limit + ") r" +
				" UNION ALL (SELECT " + cols + " FROM " + q.table + " AS r WHERE r." + pk + " IS NULL AND " + where + " ORDER BY " + q.order() + " LIMIT " + limit + ")"
		}
		switch {
		case !heads:
			cand = keys + perKey(where)
		case loose:
			// The groups' heads (each key's first rows of a group are among
			// them; more of a key than limit rank behind and are not taken),
			// and each key's first rows without a group.
			g := col(q.c.Group)
			cand = keys + " SELECT " + cols + " FROM " + q.table + " AS r WHERE " + where + " UNION ALL" + perKey("r."+g+" IS NULL AND "+base)
		default:
			cand = "SELECT " + cols + " FROM " + q.table + " AS r WHERE " + where
		}
	} else {
		// SQLite ranks every ready row: its partition index yields them in key
		// and claim order.
		cand = "SELECT " + cols + " FROM " + q.table + " AS r WHERE " + where
	}
	// Each key's jobs in work are counted once, from the rows in work alone.
	busy := "SELECT w." + pk + " AS k, count(*) AS n FROM " + q.table + " AS w WHERE " + q.inWork("w", now) + " GROUP BY w." + pk
	turn := "row_number() OVER (PARTITION BY c." + pk + " ORDER BY " + q.orderOf("c") + ") + COALESCE(b.n, 0)"
	ranked := "SELECT c.*, " + turn + " AS turn FROM (" + cand + ") c LEFT JOIN (" + busy + ") b ON b.k = c." + pk
	cap := ""
	if l.PerPartition > 0 {
		cap = " WHERE x.turn <= " + strconv.Itoa(l.PerPartition) + " OR x." + pk + " IS NULL"
	}
	// Keys level in turn are taken in a random order (by priority first): in id
	// order, a key whose backlog came first would win every tie, and with one
	// free worker every claim is a tie.
	tie := "random()"
	if q.c.Priority != "" {
		tie = "x." + col(q.c.Priority) + ", random()"
	}
	sel := "SELECT x." + id + " FROM (" + ranked + ") x" + cap + " ORDER BY x.turn, " + tie + " LIMIT " + limit
	if !skipLocked {
		return sel
	}
	// The lock rechecks that the row is still claimable in its latest version: a
	// row claimed by a claim that committed after this one's snapshot is passed
	// over (the IN list alone would be rechecked as true).
	return "SELECT " + id + " FROM " + q.table + " WHERE " + id + " IN (" + sel + ") AND " + q.claimable(now) + lock
}

// pgKeyedPick is the pick of a Postgres claim with PerPartition (pgAckClaimSQL):
// the first rows of each of the keys of src (a FROM item of keys v and numbers
// n), as many as its n says, and the rows without a key if keyless (an SQL
// boolean); taken turn by turn
// (a row's turn is its place among its key's), keys level in turn in a random
// order (by priority first). It is an SQL array of ids (ARRAY(...)), so that the plan
// looks them up by id whatever it guesses of their number.
//
// Rows without a key have no index of their own (the partition index leaves them
// out): finding them reads every ready row. A lane therefore looks for them only
// while its last look found some, and otherwise once per PollInterval (leaseLoop),
// so that a job without a key on a table claimed with PerPartition may wait up to
// a poll.
func (q *Queue[T]) pgKeyedPick(now, where, limit, src, keyless string) string {
	id, pk := col(q.c.ID), col(q.c.Partition)
	prio := "0"
	if q.c.Priority != "" {
		prio = "r." + col(q.c.Priority)
	}
	// Each key's rows are locked as they are read (SKIP LOCKED passes over the rows
	// another claim is taking, to the key's next ones), which also rechecks that
	// each is still claimable in its latest version.
	first := func(cond, lim string) string {
		return "SELECT z.id, z.prio, row_number() OVER () AS turn FROM (SELECT r." + id + " AS id, " + prio + " AS prio FROM " + q.table + " AS r WHERE " + cond + " AND " + where +
			" ORDER BY " + q.order() + " LIMIT " + lim + " FOR UPDATE SKIP LOCKED) z"
	}
	cand := "SELECT c.* FROM " + src + " CROSS JOIN LATERAL (" + first("r."+pk+" = k.v", "k.n") + ") c" +
		" UNION ALL " + first(keyless+"::boolean AND r."+pk+" IS NULL", limit)
	return "ARRAY(SELECT x.id FROM (" + cand + ") x ORDER BY x.turn, x.prio, random() LIMIT " + limit + ")"
}

// orderOf is the claim order on the columns of alias a.
func (q *Queue[T]) orderOf(a string) string {
	o := strings.Split(q.order(), ", ")
	for i := range o {
		o[i] = a + "." + o[i]
	}
	return strings.Join(o, ", ")
}

// limitedBy is the SQL of how many rows a claim may take: limit, less what
// Concurrency and Rate (in the window of at) leave.
func (q *Queue[T]) limitedBy(s *stmt[T], l Limits, at time.Time, now, limit string) string {
	var terms []string
	if l.Concurrency > 0 {
		terms = append(terms, strconv.Itoa(l.Concurrency)+" - (SELECT count(*) FROM "+q.table+" AS w WHERE "+q.inWork("w", now)+")")
	}
	if l.Rate > 0 {
		w := s.arg(rateWindow(at, l.Per))
		// A counter already in a later window (rateAhead) leaves nothing.
		terms = append(terms, strconv.Itoa(l.Rate)+" - COALESCE((SELECT CASE WHEN window_start = "+w+" THEN starts WHEN "+rateAhead("window_start", w, l.Per)+" THEN "+strconv.Itoa(l.Rate)+" ELSE 0 END FROM "+q.limitsTable()+" WHERE name = 'starts'), 0)")
	}
	if len(terms) == 0 {
		return limit
	}
	least, greatest := "LEAST", "GREATEST"
	if q.dialect == SQLite {
		least, greatest = "min", "max"
	}
	return "(SELECT " + greatest + "(0, " + least + "(" + limit + ", " + strings.Join(terms, ", ") + ")))"
}

// rateWindow is the Rate window that t falls in, as its start in nanoseconds
// since the Unix epoch (a multiple of per).
func rateWindow(t time.Time, per time.Duration) int64 { return t.UnixNano() / int64(per) * int64(per) }

// rateAhead is the SQL of a counter row's window c being later than window w (an
// SQL expression) of the same Per: a claimer whose now is past this one's moved
// it there, so that this one's window's count is gone, and moving the row back to
// w would lose the count of c (every claimer in c would then start Rate more).
// A window start that is no multiple of per was counted under another Per (Per
// changed): it is not ahead, and the row starts afresh.
func rateAhead(c, w string, per time.Duration) string {
	p := strconv.FormatInt(int64(per), 10)
	return "(" + c + " > " + w + " AND " + c + " % " + p + " = 0)"
}

// limitsTable is the quoted table that counts starts for Limits.Rate.
func (q *Queue[T]) limitsTable() string { return quoteIdent(q.name + "_limits") }

// rateBumpSQL counts n starts (an SQL expression) in window w of Limits.Rate
// of period per, unless the counter is ahead of w (rateAhead).
func (q *Queue[T]) rateBumpSQL(w, n string, per time.Duration) string {
	lt := q.limitsTable()
	return "INSERT INTO " + lt + " AS l (name, window_start, starts) SELECT 'starts', " + w + ", " + n +
		" ON CONFLICT (name) DO UPDATE SET starts = CASE WHEN l.window_start = excluded.window_start THEN l.starts + excluded.starts ELSE excluded.starts END, window_start = excluded.window_start" +
		" WHERE NOT " + rateAhead("l.window_start", "excluded.window_start", per)
}

// sqliteRateBump counts n starts of a SQLite claim, in the claim's transaction.
func (q *Queue[T]) sqliteRateBump(ctx context.Context, db querier, l Limits, now time.Time, n int) error {
	if l.Rate <= 0 || n == 0 {
		return nil
	}
	_, err := db.exec(ctx, q.rateBumpSQL("?1", "?2", l.Per), rateWindow(now, l.Per), n)
	return err
}

// checkGroupColumns refuses, at Start, a Group or Partition column that the table
// does not have (a *ConfigError; unless other mapped columns are missing too, which
// the statements' check reports as a *StatementError) and, on Postgres, a Group column without the unique
// index that keeps one job of a group in work (a *ColumnError).
func (q *Queue[T]) checkGroupColumns(ctx context.Context) error {
	if q.c.Group == "" && q.c.Partition == "" {
		return nil
	}
	var cols map[string]column
	var err error
	if q.dialect == SQLite {
		cols, err = q.sqliteColumns(ctx)
	} else {
		cols, err = q.pgColumns(ctx)
	}
	if err != nil || len(cols) == 0 {
		return nil // no such table: the statements' check names it
	}
	c := q.c
	for _, name := range []string{c.ID, c.LockedUntil, c.Payload, c.Priority, c.Attempts, c.ClaimedAt, c.LastError, c.DeadAt, c.ProcessedAt, c.CancelledAt, c.UniqueKey, c.UniqueStates, c.CreatedAt, c.Trace} {
		if _, ok := cols[name]; name != "" && !ok {
			return nil // a table of an older schema version: the statements' check names the column
		}
	}
	for _, c := range []struct{ field, name string }{{"Columns.Group", q.c.Group}, {"Columns.Partition", q.c.Partition}} {
		if _, ok := cols[c.name]; c.name != "" && !ok {
			return &ConfigError{Field: c.field, Reason: "table " + q.name + " has no column " + c.name + " (the default schema has it from version 4: run Migrate)"}
		}
	}
	if q.c.Group == "" {
		return nil
	}
	if q.dialect == SQLite {
		return q.checkSQLiteGroupIndex(ctx)
	}
	var n int
	err = q.pool.QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indnatts = 1 AND a.attname = $2
AND position($3 in coalesce(pg_get_expr(i.indpred, i.indrelid), '')) > 0`, q.table, q.c.Group, q.c.ClaimedAt+" IS NOT NULL").Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		return &ColumnError{Table: q.name, Column: q.c.Group, Reason: "has no unique index WHERE " + q.c.Group + " IS NOT NULL AND " + q.c.ClaimedAt + " IS NOT NULL: FIFO groups need one on Postgres (the default schema has it from version 4)"}
	}
	// The index a claim of heads walks (version 6): on Group then ID, of the rows
	// not finished. Without it claims read the claim index in order.
	err = q.pool.QueryRow(ctx, `SELECT count(*) FROM pg_index i
JOIN pg_attribute g ON g.attrelid = i.indrelid AND g.attnum = i.indkey[0]
JOIN pg_attribute d ON d.attrelid = i.indrelid AND d.attnum = i.indkey[1]
WHERE i.indrelid = $1::regclass AND i.indnatts = 2 AND g.attname = $2 AND d.attname = $3
AND position($4 in coalesce(pg_get_expr(i.indpred, i.indrelid), '')) > 0`, q.table, q.c.Group, q.c.ID, q.c.LockedUntil+" < '9999-01-01").Scan(&n)
	if err != nil {
		return err
	}
	q.headsIndexed.Store(n > 0)
	return nil
}

// checkSQLiteGroupIndex notes whether the SQLite table has an index that leads
// with the Group column where ClaimedAt is set (the default schema's from
// version 5), and logs at WARN when it has none: the claim then reads a
// candidate's whole group to find its claimed row, and goes without the set of
// groups in work (which it would read from the whole group index), so that a
// claim costs as much as the backlog.
func (q *Queue[T]) checkSQLiteGroupIndex(ctx context.Context) error {
	schema, table := splitName(q.name)
	// Identifiers were checked by isIdent: plain letters, digits and underscores.
	var n int
	err := q.sqldb.QueryRowContext(ctx, `SELECT count(*) FROM pragma_index_list(?1, ?2) AS l, pragma_index_info(l.name, ?2) AS i
WHERE l.partial AND i.seqno = 0 AND i.name = ?3
AND (SELECT sql FROM "`+schema+`".sqlite_master WHERE type = 'index' AND name = l.name) LIKE '%' || ?4 || '%'`,
		table, schema, q.c.Group, q.c.ClaimedAt+" IS NOT NULL").Scan(&n)
	if err != nil {
		return fmt.Errorf("inbox: %s: read its indexes: %w", q.name, err)
	}
	q.groupIndexed.Store(n > 0)
	if n == 0 {
		q.log.Warn("inbox: FIFO claims will read whole groups: the table has no index on its group column where claimed (schema version 5); run Migrate, or create one",
			"table", q.name, "index", "("+q.c.Group+") WHERE "+q.c.Group+" IS NOT NULL AND "+q.c.ClaimedAt+" IS NOT NULL")
	}
	return nil
}

// Rate without a lock (Postgres): a lane reserves starts of the current window
// from its counter row in TABLE_limits with one statement (rateReserveSQL: the row
// is locked for that statement only) and claims no more than it holds in reserve;
// what a claim does not use is kept for the lane's next claims in the same window
// and lapses with it. A lane reserves at least as many starts as it has workers at
// a time. Every start is reserved in its window first, so each window holds at
// most Rate starts, as before; a reserve that lapses unused (at most a lane's
// workers, per lane and window, while its claims come back short) makes a window
// start fewer. PerPartition is held by places (keyslots.go).

// rateReserveSQL (Postgres) reserves up to $2 starts in window $1 of a Rate of $3,
// and returns how many it got: the counter row is locked first (FOR UPDATE, which
// reads its latest version), so that concurrent reserves add up.
func (q *Queue[T]) rateReserveSQL(per time.Duration) string {
	lt := q.limitsTable()
	// A counter ahead of $1 (rateAhead) gives nothing.
	return "WITH o AS (SELECT CASE WHEN window_start = $1::bigint THEN starts WHEN " + rateAhead("window_start", "$1::bigint", per) + " THEN $3::bigint ELSE 0 END AS s FROM " + lt + " WHERE name = 'starts' FOR UPDATE)" +
		", u AS (UPDATE " + lt + " AS l SET window_start = $1::bigint, starts = o.s + LEAST($2::bigint, $3::bigint - o.s) FROM o" +
		" WHERE l.name = 'starts' AND o.s < $3::bigint RETURNING LEAST($2::bigint, $3::bigint - o.s) AS g)" +
		" SELECT COALESCE((SELECT g FROM u), 0)::int"
}

// rateBudget is a lane's reserve of starts (Postgres): left of window.
type rateBudget struct {
	window int64
	left   int
}

// rateTake is how many of want rows a claim at now may take under Limits.Rate,
// reserving what the lane's budget lacks: at least as many starts as the lane has
// workers (chunk), so that a lane draining a backlog reserves once for several
// claims. The caller takes what it claims from rb.left.
func (s *Subscription[T]) rateTake(ctx context.Context, rb *rateBudget, now time.Time, want, chunk int) (int, error) {
	l := s.o.Limits
	if w := rateWindow(now, l.Per); rb.window != w {
		rb.window, rb.left = w, 0
	}
	if rb.left < want {
		var g int
		if err := s.q.pool.QueryRow(ctx, s.q.rateReserveSQL(l.Per), rb.window, max(want, chunk)-rb.left, l.Rate).Scan(&g); err != nil {
			return 0, err
		}
		rb.left += g
	}
	return min(want, rb.left), nil
}
