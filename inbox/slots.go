package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Slots: how Limits.Concurrency holds without serialising claims on Postgres, and
// without giving up the prefetch on either database.
//
// The table TABLE_limits has one row per handler that may run, named "slot 0" to
// "slot N-1" (N is Concurrency), made by Start. A lane (one claimer and its
// workers) holds slots under a lease of its own: window_start is the lane's tag (a
// random number) and starts the lease's deadline in microseconds since the Unix
// epoch. A slot whose deadline has passed is free. A worker runs a handler only
// while it holds one of its lane's slots (a token of the lane's slotGate), so at
// most N handlers run across every instance; the lane claims jobs as a lane
// without limits does (prefetch and all), and jobs wait in it for a slot.
//
// A lane takes free slots (FOR UPDATE SKIP LOCKED: concurrent lanes take different
// ones and never wait for each other) for the jobs it has or is about to claim, up
// to its workers, and extends the lease of all it holds in the same statement,
// every third of a lease; it gives back the slots its workers leave idle. A slot
// is free by its own columns alone, so that a lane whose snapshot is older than a
// slot's last write rechecks that write. A lane whose slots' lease is about to end
// unextended (a tenth of a lease before) cancels the handlers that run in them and
// starts none until it holds slots again; a crashed instance's slots come free when
// their lease ends. A slot changes hands only between handlers, never during one:
// the cost of the limit is a statement when a lane's need for slots changes, not
// one per job.
//
// On SQLite, which has one writer, the extension and the take are two statements
// of one write transaction. In a batch subscription each job of a batch holds a
// slot: a worker runs as many jobs of its batch at once as it can take slots for
// (at least one), and the rest after them. PerPartition (keyslots.go) and Rate
// (groups.go) are held by other means, which go with slots.

// slotted reports whether a subscription's Concurrency limit is held by slots: on
// either database, with PerPartition and Rate or without, in a single or a batch
// subscription (each job of a batch holds a slot of its own).
func (l Limits) slotted() bool { return l.Concurrency > 0 }

// claimLimits are the limits a claim statement enforces: with slots, not
// Concurrency, which the slots hold; on Postgres, not Rate, which the lane's
// reserve of starts holds (rateTake).
func (s *Subscription[T]) claimLimits() Limits {
	l := s.o.Limits
	if s.slotted {
		l.Concurrency = 0
	}
	if s.q.dialect == Postgres {
		l.Rate = 0
	}
	return l
}

// slotName is the name of slot i in TABLE_limits.
func slotName(i int) string { return "slot " + strconv.Itoa(i) }

// slotNames are the names of the first n slots.
func slotNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = slotName(i)
	}
	return out
}

// prefetches reports whether a subscription with these limits prefetches by
// default: with Concurrency held by slots, with Rate (which counts claims), and
// with PerPartition (held by places, keyslots.go), unless it is a batch
// subscription with PerPartition, which holds one row per place.
func (l Limits) prefetches(batch bool) bool {
	return l.PerPartition == 0 || !batch
}

// ensureSlots makes TABLE_limits if it is missing (a table of the caller's own
// mapping: the default schema has it from version 4), its first n slot rows and,
// if rate, the counter row of Limits.Rate, unless the queue's table itself is
// missing.
//
// A TABLE_limits that went missing was dropped (by hand: nothing of gotp drops
// it) if a subscription found it gone while it ran (running) or Migrate had made
// it (the version recorded is 4 or later). Lanes of other instances may still run
// handlers in the slots and places of the dropped table, which a table made
// afresh would show free; so the table is made with a fence, a row "fence" whose
// deadline is a lease (lease) away, and no slot or place is taken before it
// passes, by which time every lease of the dropped table has ended. That is
// logged at WARN; a table made for the first time, at INFO. The counter of Rate
// starts afresh: the window in which the table is made again may start up to
// 2 × Rate.
func (q *Queue[T]) ensureSlots(ctx context.Context, n int, rate bool, lease time.Duration, running bool) error {
	names := slotNames(n)
	if rate || running {
		names = append(names, "starts") // running: for whichever subscription has Rate
	}
	lt := q.limitsTable()
	var missing bool
	if q.dialect == SQLite {
		var exists int
		if err := q.sqldb.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", q.name).Scan(&exists); err != nil || exists == 0 {
			return err
		}
		schema, name := splitName(q.name + "_limits")
		if err := q.sqldb.QueryRowContext(ctx, "SELECT count(*) = 0 FROM pragma_table_list WHERE schema = ?1 AND name = ?2", schema, name).Scan(&missing); err != nil {
			return err
		}
	} else {
		var exists bool
		if err := q.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NULL", q.table, lt).Scan(&exists, &missing); err != nil || !exists {
			return err // no such table: the statements' check names it
		}
	}
	fenced := missing && (running || q.migratedTo(ctx, 4))
	if fenced {
		names = append(names, "fence")
	}
	fence := time.Now().Add(lease).UnixMicro()
	var ins string
	if q.dialect == SQLite {
		ins = "INSERT OR IGNORE INTO " + lt + " (name, window_start, starts) SELECT value, 0, CASE value WHEN 'fence' THEN ?2 ELSE 0 END FROM json_each(?1)"
	} else {
		ins = "INSERT INTO " + lt + " (name, window_start, starts) SELECT n, 0, CASE n WHEN 'fence' THEN $2::bigint ELSE 0 END FROM unnest($1::text[]) AS n ON CONFLICT (name) DO NOTHING"
	}
	if missing {
		// The table and its rows, the fence with them, in one transaction: a take
		// that found the table made but not yet fenced would take places while
		// the dropped table's holders may still run.
		if err := q.makeLimits(ctx, ins, names, fence); err != nil {
			return err
		}
		if fenced {
			q.log.Warn("inbox: "+lt+" was missing (dropped while in use?); made again: Limits take no slot or place for one lease, until the dropped table's have ended",
				"table", q.name, "lease", lease)
		} else {
			q.log.Info("inbox: made "+lt+" for Limits", "table", q.name)
		}
		return nil
	}
	if q.dialect == SQLite {
		if _, err := q.sqldb.ExecContext(ctx, ins, jsonNames(names), fence); err != nil {
			// A table of that name without gotp's columns, most often.
			return &StatementError{Table: lt, Statement: ins, Err: err}
		}
		return nil
	}
	if _, err := q.pool.Exec(ctx, ins, names, fence); err != nil {
		if isPgError(err) {
			// A table of that name without gotp's columns, most often.
			return &StatementError{Table: lt, Statement: ins, Err: err}
		}
		return err
	}
	return nil
}

// makeLimits makes TABLE_limits with the rows names (ins, whose fence row, if
// named, ends at fence) in one transaction.
func (q *Queue[T]) makeLimits(ctx context.Context, ins string, names []string, fence int64) error {
	if q.dialect == SQLite {
		return q.sqliteTx(ctx, func(db querier) error {
			if _, err := db.exec(ctx, limitsDDL(SQLite, q.name)); err != nil {
				return err
			}
			_, err := db.exec(ctx, ins, jsonNames(names), fence)
			return err
		})
	}
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, limitsDDL(Postgres, q.name)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, ins, names, fence)
		return err
	})
	if err != nil {
		// Two instances making the table at once: one of them meets a unique
		// violation in the catalog; the table is there either way, made with
		// the other's rows, which include these (the same names, from the same
		// limits) but for the slots of a larger Concurrency, added here.
		var ok bool
		if qerr := q.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q.limitsTable()).Scan(&ok); qerr != nil || !ok {
			return err
		}
		if _, err := q.pool.Exec(ctx, ins, names, fence); err != nil {
			return err
		}
	}
	return nil
}

// migratedTo reports whether Migrate recorded version v or later for the queue's
// table (false if it cannot tell).
func (q *Queue[T]) migratedTo(ctx context.Context, v int) bool {
	var got int
	var err error
	if q.dialect == SQLite {
		err = q.sqldb.QueryRowContext(ctx, "SELECT version FROM gotp_schema WHERE key = ?1", "inbox:"+q.name).Scan(&got)
	} else {
		err = q.pool.QueryRow(ctx, "SELECT version FROM gotp_schema WHERE key = $1", "inbox:"+q.name).Scan(&got)
	}
	return err == nil && got >= v
}

// limitsGone reports whether err is a statement's refusal because TABLE_limits
// does not exist.
func (q *Queue[T]) limitsGone(err error) bool {
	if err == nil {
		return false
	}
	_, name := splitName(q.name + "_limits")
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code == "42P01" && strings.Contains(pe.Message, name) // undefined_table
	}
	msg := err.Error()
	return strings.Contains(msg, "no such table") && strings.Contains(msg, name)
}

// backOffRefused is what a lane does after a refused sync of its slots or
// places, which changed nothing: it tries again after a backoff that doubles
// while refused, up to PollInterval (extending the lease no later than a tenth
// of it), or at once if the refusal was a dropped TABLE_limits, made again
// (remade: true).
func (s *Subscription[T]) backOffRefused(err error, now time.Time, backoff *time.Duration, extendAt, retryAt *time.Time) (remade bool) {
	*backoff = min(max(2**backoff, slotRetry), s.o.PollInterval)
	*extendAt, *retryAt = now.Add(min(s.o.Lease/10, *backoff)), now.Add(*backoff)
	if s.remakeLimits(err) {
		*extendAt, *retryAt = now, now
		return true
	}
	return false
}

// remakeLimits makes TABLE_limits again for a subscription that found it gone
// while it ran (ensureSlots, running), and reports whether it did.
func (s *Subscription[T]) remakeLimits(err error) bool {
	if !s.q.limitsGone(err) {
		return false
	}
	n := 0
	if s.slotted {
		n = s.o.Limits.Concurrency
	}
	if err := s.q.ensureSlots(s.ctx, n, s.o.Limits.Rate > 0, s.o.Lease, true); err != nil {
		s.q.log.Warn("inbox: making the table of Limits again failed", "table", s.q.name, "err", err)
		return false
	}
	return true
}

// slotSyncSQL extends the lease of the slots a lane holds (names, under tag and the
// deadline until) to deadline and takes up to k free ones of the first n with it.
// Result rows are (name, kept): kept for a slot held already.
//
// New slots are taken only while the table has a row that may be claimed, or the
// lane holds rows waiting for a slot (waiting): a lane that polls an empty table
// holds none, and one that lost its slots with rows in hand takes them again
// though no other row is ready.
func (q *Queue[T]) slotSyncSQL(names []string, tag int64, until, deadline, now time.Time, k, n int, waiting bool) (string, []any) {
	if names == nil {
		names = []string{} // an empty array, not NULL
	}
	lt := q.limitsTable()
	sql := "WITH kept AS (UPDATE " + lt + " SET starts = $4::bigint WHERE name = ANY($1::text[]) AND window_start = $2::bigint AND starts = $3::bigint RETURNING name)" +
		", got AS (UPDATE " + lt + " SET window_start = $2::bigint, starts = $4::bigint WHERE name IN (SELECT name FROM " + lt +
		" WHERE name = ANY($5::text[]) AND name <> ALL($1::text[]) AND starts <= $6::bigint" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS f WHERE f.name = 'fence' AND f.starts > $6::bigint)" +
		" AND ($9::boolean OR EXISTS (SELECT 1 FROM " + q.table + " WHERE " + q.claimable("$8::timestamptz") + ")) LIMIT $7::int FOR UPDATE SKIP LOCKED) RETURNING name)" +
		" SELECT name, true FROM kept UNION ALL SELECT name, false FROM got"
	return sql, []any{names, tag, until.UnixMicro(), deadline.UnixMicro(), slotNames(n), now.UnixMicro(), k, q.ts(now), waiting}
}

// slotFreeSQL gives back the slots names that a lane holds under tag and until.
func (q *Queue[T]) slotFreeSQL(names []string, tag int64, until time.Time) (string, []any) {
	if names == nil {
		names = []string{}
	}
	if q.dialect == SQLite {
		return "UPDATE " + q.limitsTable() + " SET window_start = 0, starts = 0 WHERE name IN (SELECT value FROM json_each(?1)) AND window_start = ?2 AND starts = ?3",
			[]any{jsonNames(names), tag, until.UnixMicro()}
	}
	return "UPDATE " + q.limitsTable() + " SET window_start = 0, starts = 0 WHERE name = ANY($1::text[]) AND window_start = $2::bigint AND starts = $3::bigint",
		[]any{names, tag, until.UnixMicro()}
}

// sqliteSlotSQL is slotSyncSQL on SQLite, which has no writes in a WITH: the
// extension (args kept) and the take (args got), run in one write transaction,
// each returning the names of its slots.
func (q *Queue[T]) sqliteSlotSQL(names []string, tag int64, until, deadline, now time.Time, k, n int, waiting bool) (kept string, keptArgs []any, got string, gotArgs []any) {
	lt := q.limitsTable()
	held := jsonNames(names)
	kept = "UPDATE " + lt + " SET starts = ?1 WHERE name IN (SELECT value FROM json_each(?2)) AND window_start = ?3 AND starts = ?4 RETURNING name"
	got = "UPDATE " + lt + " SET window_start = ?1, starts = ?2 WHERE name IN (SELECT name FROM " + lt +
		" WHERE name IN (SELECT value FROM json_each(?3)) AND name NOT IN (SELECT value FROM json_each(?4)) AND starts <= ?5" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS f WHERE f.name = 'fence' AND f.starts > ?5)" +
		" AND (?8 OR EXISTS (SELECT 1 FROM " + q.table + " WHERE " + q.claimable("?6") + ")) LIMIT ?7) RETURNING name"
	return kept, []any{deadline.UnixMicro(), held, tag, until.UnixMicro()},
		got, []any{tag, deadline.UnixMicro(), jsonNames(slotNames(n)), held, now.UnixMicro(), q.ts(now), k, waiting}
}

// jsonNames is names as a JSON array, for SQLite's json_each.
func jsonNames(names []string) string {
	b, _ := json.Marshal(append([]string{}, names...))
	return string(b)
}

// slotSync runs slotSyncSQL (on SQLite sqliteSlotSQL in a transaction): the slots
// kept and the slots got. refused reports an error after which nothing changed.
func (q *Queue[T]) slotSync(ctx context.Context, names []string, tag int64, until, deadline, now time.Time, k, n int, waiting bool) (kept, got []string, refused bool, err error) {
	if q.dialect == SQLite {
		ks, ka, gs, ga := q.sqliteSlotSQL(names, tag, until, deadline, now, k, n, waiting)
		err = q.sqliteTx(ctx, func(db querier) error {
			r, err := db.query(ctx, ks, ka...)
			if err != nil {
				return err
			}
			if kept, err = scanNames(r); err != nil || k == 0 {
				return err
			}
			if r, err = db.query(ctx, gs, ga...); err != nil {
				return err
			}
			got, err = scanNames(r)
			return err
		})
		return kept, got, true, err // a transaction that failed was rolled back
	}
	sql, args := q.slotSyncSQL(names, tag, until, deadline, now, k, n, waiting)
	err = func() error {
		r, err := q.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var name string
			var held bool
			if err := r.Scan(&name, &held); err != nil {
				return err
			}
			if held {
				kept = append(kept, name)
			} else {
				got = append(got, name)
			}
		}
		return r.Err()
	}()
	return kept, got, isPgError(err), err
}

// slotGate hands a lane's slots to its workers: a worker holds one of them while
// its handler runs. Its tokens are free + len(running) - owed: the slots held.
type slotGate struct {
	mu      sync.Mutex
	free    int                  // tokens not in use
	owed    int                  // tokens to drop as handlers return: slots gone while in use
	running map[*leased]struct{} // the jobs whose handlers hold a token
	wake    chan struct{}        // closed (and replaced) when a token comes free
	waiting *atomic.Int64        // Health.LimitWaiting
}

func newSlotGate(waiting *atomic.Int64) *slotGate {
	return &slotGate{running: map[*leased]struct{}{}, wake: make(chan struct{}), waiting: waiting}
}

// enter waits for a token for job j: false if j's context ends first (its lease
// lost or expiring, the subscription ending) or stop is closed.
func (g *slotGate) enter(j *leased, stop <-chan struct{}) bool {
	return waitTurn(&g.mu, func() chan struct{} { return g.wake }, g.waiting, j, stop, func() bool {
		if g.free == 0 {
			return false
		}
		g.free--
		g.running[j] = struct{}{}
		return true
	})
}

// enterUpTo waits for tokens for the jobs js (a batch): it takes as many as are
// free, up to len(js) and at least one, and reports how many (js[:n] hold one
// each); 0 if js[0]'s context ends first or stop is closed.
func (g *slotGate) enterUpTo(js []*leased, stop <-chan struct{}) int {
	n := 0
	waitTurn(&g.mu, func() chan struct{} { return g.wake }, g.waiting, js[0], stop, func() bool {
		if g.free == 0 {
			return false
		}
		n = min(g.free, len(js))
		g.free -= n
		for _, j := range js[:n] {
			g.running[j] = struct{}{}
		}
		return true
	})
	return n
}

// waitTurn is the wait of a gate's enter for job j: it calls take with mu held
// until take reports that j took its turn (true), or j's context ends or stop is
// closed first (false). Between tries it waits for the channel wake returns
// (called with mu held), which the gate closes when a turn may have come free, and
// counts itself in waiting (Health.LimitWaiting) for as long as it waits.
func waitTurn(mu *sync.Mutex, wake func() chan struct{}, waiting *atomic.Int64, j *leased, stop <-chan struct{}, take func() bool) bool {
	waited := false
	defer func() {
		if waited {
			waiting.Add(-1)
		}
	}()
	for {
		mu.Lock()
		if take() {
			mu.Unlock()
			return true
		}
		w := wake()
		mu.Unlock()
		if !waited {
			waited = true
			waiting.Add(1)
		}
		select {
		case <-w:
		case <-j.ctx.Done():
			return false
		case <-stop:
			return false
		}
	}
}

// leave gives back j's token, or drops it if the gate owes one.
func (g *slotGate) leave(j *leased) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.running, j)
	if g.owed > 0 {
		g.owed--
		return
	}
	g.free++
	g.signalLocked()
}

func (g *slotGate) signalLocked() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// idle takes up to n tokens not in use, for slots to give back, and reports how many.
func (g *slotGate) idle(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := min(n, g.free)
	g.free -= k
	return k
}

// resize makes the gate's tokens n (the slots held). Tokens taken away are taken
// from the free ones first; if those are not enough, every running handler is
// cancelled with cause (which token a handler holds is not known) and the tokens
// are dropped as handlers return.
func (g *slotGate) resize(n int, cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := n - (g.free + len(g.running) - g.owed)
	switch {
	case d > 0:
		repay := min(d, g.owed)
		g.owed -= repay
		if d -= repay; d > 0 {
			g.free += d
			g.signalLocked()
		}
	case d < 0:
		k := min(-d, g.free)
		g.free -= k
		if d += k; d < 0 {
			g.owed -= d
			for j := range g.running {
				j.cancel(cause)
			}
		}
	}
}

// laneSlots is a lane's holding of slots. Only the lane's loop uses it; the gate
// and the expiry timer are shared with the workers.
type laneSlots struct {
	gate     *slotGate
	tag      int64
	names    []string      // the slots held
	until    time.Time     // their lease's deadline
	extendAt time.Time     // when the lease is extended next
	need     int           // the slots the lane last wanted
	retryAt  time.Time     // no new slots asked for before (the last ask came back short)
	rowsAt   time.Time     // slotRowsBack not before
	backoff  time.Duration // the wait before the next ask, while asks come back short
	timer    *time.Timer
	expired  chan struct{} // a token from the timer: the lease is about to end unextended
}

func newLaneSlots(waiting *atomic.Int64) *laneSlots {
	return &laneSlots{gate: newSlotGate(waiting), tag: rand.Int64(), expired: make(chan struct{}, 1)}
}

// slotRetry is how long a lane that asked for slots and got fewer first waits before
// it asks again, doubling up to the poll interval while asks come back short: slots
// come free when other instances' needs fall (a lane that gives slots back wakes the
// others of its process at once), and each ask is a statement.
const slotRetry = 2 * time.Millisecond

// syncSlots brings the lane's slots towards need (the jobs it holds, at most its
// workers; nothing without slots), the lane holding held rows: it gives
// back idle slots above need, and asks for more (extending the lease of those it
// holds in the same statement) when it has fewer, or when the lease is due for
// extension. Failures are logged and tried again with a later cycle; the expiry
// timer stops the handlers if the lease cannot be extended in time.
func (s *Subscription[T]) syncSlots(l *lane, need, held int) {
	ls := l.slots
	if ls == nil {
		return
	}
	select {
	case <-ls.expired:
		// The lease is about to end unextended: the timer stopped every handler
		// that runs in it; hold nothing.
		ls.names, ls.until = nil, time.Time{}
	default:
	}
	need = min(need, l.work)
	ls.need = need
	now := time.Now()
	if held := len(ls.names); need < held {
		if n := ls.gate.idle(held - need); n > 0 {
			sql, args := s.q.slotFreeSQL(ls.names[held-n:], ls.tag, ls.until)
			if _, err := s.q.db().exec(s.ctx, sql, args...); err != nil {
				// Not given back: they come free when their lease ends.
				s.q.log.Warn("inbox: giving back slots of Limits.Concurrency failed; they come free when their lease ends", "table", s.q.name, "err", err)
			}
			ls.names = slices.Clip(ls.names[:held-n])
			s.q.Wake() // another lane of this process may be waiting for slots
		}
	}
	k := 0
	if need > len(ls.names) && !now.Before(ls.retryAt) {
		k = need - len(ls.names)
	}
	if k == 0 && (len(ls.names) == 0 || now.Before(ls.extendAt)) {
		return
	}
	deadline := trunc(now.Add(s.o.Lease))
	// Rows held beyond the slots wait for one (the slots were lost): take slots
	// for them even if no other row is ready.
	waiting := held > len(ls.names)
	kept, got, refused, err := s.q.slotSync(s.ctx, ls.names, ls.tag, ls.until, deadline, trunc(now), k, s.o.Limits.Concurrency, waiting)
	if err != nil {
		s.q.health.noteErr(err)
		if s.ctx.Err() != nil {
			return
		}
		if refused {
			// Refused: nothing changed (the timer stops the handlers if the
			// lease runs out first).
			if s.backOffRefused(err, now, &ls.backoff, &ls.extendAt, &ls.retryAt) {
				return
			}
			s.q.log.Warn("inbox: slots of Limits.Concurrency not extended; trying again", "table", s.q.name, "err", err, "retry_in", ls.backoff)
			return
		}
		// Whether the statement committed is unknown: the slots may hold either
		// deadline, and slots may have been taken. Hold none; they come free when
		// their lease ends.
		s.q.log.Warn("inbox: slots of Limits.Concurrency in doubt; holding none until their lease ends", "table", s.q.name, "err", err)
		ls.names, ls.until, ls.retryAt = nil, time.Time{}, now.Add(s.o.Lease)
		s.armSlots(ls)
		ls.gate.resize(0, &LeaseLostError{Table: s.q.name, Op: "slot lost"})
		return
	}
	ls.names = append(kept, got...)
	ls.until = deadline
	ls.extendAt = now.Add(s.o.Lease / 3)
	if len(got) < k {
		ls.backoff = min(max(2*ls.backoff, slotRetry), s.o.PollInterval)
		ls.retryAt = now.Add(ls.backoff)
		if len(ls.names) == 0 && !now.Before(ls.rowsAt) {
			// Nothing held nor got: the slot rows may be gone (TABLE_limits
			// emptied by hand), which no take would ever find; checked once per
			// poll.
			ls.rowsAt = now.Add(s.o.PollInterval)
			s.slotRowsBack()
		}
	} else {
		ls.backoff = 0
	}
	s.armSlots(ls)
	ls.gate.resize(len(ls.names), &LeaseLostError{Table: s.q.name, Op: "slot lost"})
}

// slotRowsBack makes again, fenced for a lease as a TABLE_limits made again is
// (ensureSlots), the slot rows of Limits.Concurrency that are missing from
// TABLE_limits: deleted by hand, their holders may still run handlers in them.
func (s *Subscription[T]) slotRowsBack() {
	q, n := s.q, s.o.Limits.Concurrency
	var have int
	var err error
	if q.dialect == SQLite {
		err = q.sqldb.QueryRowContext(s.ctx, "SELECT count(*) FROM "+q.limitsTable()+" WHERE name IN (SELECT value FROM json_each(?1))", jsonNames(slotNames(n))).Scan(&have)
	} else {
		err = q.pool.QueryRow(s.ctx, "SELECT count(*) FROM "+q.limitsTable()+" WHERE name = ANY($1::text[])", slotNames(n)).Scan(&have)
	}
	if err != nil || have >= n {
		return
	}
	fence := time.Now().Add(s.o.Lease).UnixMicro()
	if q.dialect == SQLite {
		_, err = q.sqldb.ExecContext(s.ctx, "INSERT INTO "+q.limitsTable()+" AS l (name, window_start, starts) SELECT value, 0, CASE value WHEN 'fence' THEN ?2 ELSE 0 END FROM json_each(?1) WHERE 1"+
			" ON CONFLICT (name) DO UPDATE SET starts = max(l.starts, excluded.starts) WHERE l.name = 'fence'", jsonNames(append(slotNames(n), "fence")), fence)
	} else {
		_, err = q.pool.Exec(s.ctx, "INSERT INTO "+q.limitsTable()+" AS l (name, window_start, starts) SELECT v, 0, CASE v WHEN 'fence' THEN $2::bigint ELSE 0 END FROM unnest($1::text[]) AS v"+
			" ON CONFLICT (name) DO UPDATE SET starts = GREATEST(l.starts, excluded.starts) WHERE l.name = 'fence'", append(slotNames(n), "fence"), fence)
	}
	if err != nil {
		q.log.Warn("inbox: making the missing slots of Limits.Concurrency again failed", "table", q.name, "err", err)
		return
	}
	q.log.Warn("inbox: slots of Limits.Concurrency were missing from "+q.limitsTable()+" (deleted while in use?); made again: no slot or place is taken for one lease, until the deleted slots' holders have stopped",
		"table", q.name, "missing", n-have, "lease", s.o.Lease)
}

// slotNeed is how many slots a lane with held jobs wants: one per worker while it
// claims (more jobs may be ready), else one per job it holds.
func (s *Subscription[T]) slotNeed(l *lane, held int, claiming bool) int {
	if claiming {
		return l.work
	}
	return min(held, l.work)
}

// claimLimit is how many rows the lane may hold now: Subscription.limit, and with
// slots no more than claimCap.
func (s *Subscription[T]) claimLimit(l *lane) int {
	n := s.limit(l)
	if l.slots != nil {
		n = min(n, l.slots.claimCap(l))
	}
	return n
}

// due reports whether a lane that claims (claiming) should ask for slots now: it
// has fewer than its workers and the last ask is not too recent. False without
// slots.
func (ls *laneSlots) due(l *lane, claiming bool) bool {
	return ls != nil && claiming && len(ls.names) < l.work && !time.Now().Before(ls.retryAt)
}

// claimCap is how many rows a lane may hold with the slots it has: as many per slot
// as its rows per worker (its prefetch), and none without slots, so that jobs wait
// for a slot in the table, in claim order, and not in a lane without slots while
// another lane runs later ones.
func (ls *laneSlots) claimCap(l *lane) int { return len(ls.names) * l.max / l.work }

// slotWait is how long from now the loop may sleep before syncSlots has work: the
// lease's extension, or another ask for slots the lane is short of.
func (ls *laneSlots) slotWait(now time.Time, next time.Duration) time.Duration {
	if len(ls.names) > 0 {
		next = min(next, max(ls.extendAt.Sub(now), time.Millisecond))
	}
	if ls.need > len(ls.names) {
		next = min(next, max(ls.retryAt.Sub(now), time.Millisecond))
	}
	return next
}

// armSlots (re)starts the timer that stops the lane's handlers a tenth of a lease
// before the slots' lease ends unextended.
func (s *Subscription[T]) armSlots(ls *laneSlots) {
	if ls.timer != nil {
		ls.timer.Stop()
	}
	select {
	case <-ls.expired: // from an earlier lease: not this one's
	default:
	}
	if len(ls.names) == 0 {
		return
	}
	ls.timer = time.AfterFunc(s.untilExpiry(ls.until), func() {
		// Stop the handlers now: the loop may be waiting on the database.
		ls.gate.resize(0, &LeaseLostError{Table: s.q.name, Op: "slot expired"})
		select {
		case ls.expired <- struct{}{}:
		default:
		}
	})
}

// freeSlots gives back every slot of a lane whose loop ends (best effort: they come
// free when their lease ends otherwise). A subscription abandoned or halted writes
// nothing, as in a crash.
func (s *Subscription[T]) freeSlots(l *lane) {
	ls := l.slots
	if ls.timer != nil {
		ls.timer.Stop()
	}
	if len(ls.names) == 0 || s.ctx.Err() != nil {
		return
	}
	sql, args := s.q.slotFreeSQL(ls.names, ls.tag, ls.until)
	_, _ = s.q.db().exec(s.ctx, sql, args...)
	ls.names = nil
}
