package inbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// settleKind is a write that ends or extends an attempt.
type settleKind uint8

const (
	skAck settleKind = iota
	skRetry
	skDead
	skDrop
	skRelease
	skExtend
	skSnooze
	skCancel
)

func (k settleKind) String() string {
	return [...]string{"ack", "retry", "dead", "drop", "release", "extend", "snooze", "cancel"}[k]
}

func kindOf(o Outcome) settleKind {
	switch o {
	case Acked:
		return skAck
	case Retried:
		return skRetry
	case DeadLettered:
		return skDead
	case Dropped:
		return skDrop
	case Snoozed:
		return skSnooze
	case Cancelled:
		return skCancel
	default:
		return skRelease
	}
}

// stmt accumulates a statement and its arguments with numbered placeholders.
type stmt[T any] struct {
	q    *Queue[T]
	args []any
}

func (s *stmt[T]) arg(v any) string {
	s.args = append(s.args, v)
	return s.q.p(len(s.args))
}

// now returns SQL for the current time: the host's (as an argument) or the database's.
func (s *stmt[T]) now(host time.Time) string {
	if s.q.clock == DatabaseClock {
		return "(" + s.q.dbNow() + ")"
	}
	return s.arg(s.q.ts(host))
}

// after returns SQL for now + d.
func (s *stmt[T]) after(host time.Time, d time.Duration) string {
	if s.q.clock == DatabaseClock {
		if s.q.dialect == SQLite {
			return "(" + s.q.dbNow() + " + " + s.arg(d.Microseconds()) + ")"
		}
		return "(" + s.q.dbNow() + " + " + s.arg(d.Microseconds()) + " * interval '1 microsecond')"
	}
	return s.arg(s.q.ts(host.Add(d)))
}

// fence is the condition under which a settlement still owns its row.
type fence struct {
	// lease (the lease form): the row's lock deadline must still be the one this
	// claim (or its last extension) wrote, or one of unsure: deadlines that
	// extensions tried to write without learning whether they did.
	lease  *time.Time
	unsure []time.Time
	// attempt (the lock forms, on a table with an Attempts column): the row's
	// attempts must still be the count this claim wrote.
	attempt   int
	byAttempt bool
	// live (the lock forms): the row must not have been cancelled meanwhile (a
	// Cancel of a job held by an advisory lock writes the row at once).
	live bool
}

// settleSQL builds the statement for one settlement of row id, fenced by f.
func (q *Queue[T]) settleSQL(k settleKind, id int64, f fence, now time.Time, delay time.Duration, lastErr string, newDeadline time.Time) (string, []any) {
	s := &stmt[T]{q: q}
	c := q.c
	var set []string
	lu := col(c.LockedUntil)
	clearClaim := func() {
		if c.ClaimedAt != "" {
			set = append(set, col(c.ClaimedAt)+" = NULL")
		}
	}
	setErr := func() {
		if c.LastError != "" {
			set = append(set, col(c.LastError)+" = "+s.arg(storedError(lastErr)))
		}
	}
	done := false
	switch k {
	case skAck, skDrop:
		if c.ProcessedAt == "" {
			done = true
		} else {
			set = append(set, col(c.ProcessedAt)+" = "+s.now(now), lu+" = "+s.arg(q.ts(farFuture())))
			clearClaim()
			if q.hasUnique() {
				set = append(set, q.keepKey(UniqueProcessed))
			}
		}
	case skRetry:
		set = append(set, lu+" = "+s.after(now, delay))
		clearClaim()
		setErr()
	case skDead:
		set = append(set, lu+" = "+s.arg(q.ts(farFuture())))
		clearClaim()
		setErr()
		if c.DeadAt != "" {
			set = append(set, col(c.DeadAt)+" = "+s.now(now))
		}
		if q.hasUnique() {
			set = append(set, q.keepKey(UniqueDead))
		}
	case skRelease:
		set = append(set, lu+" = "+s.now(now))
		clearClaim()
		if c.Attempts != "" {
			set = append(set, col(c.Attempts)+" = "+col(c.Attempts)+" - 1")
		}
	case skExtend:
		set = append(set, lu+" = "+s.arg(q.ts(newDeadline)))
	case skSnooze:
		set = append(set, lu+" = "+s.after(now, delay))
		clearClaim()
		if c.Attempts != "" {
			set = append(set, col(c.Attempts)+" = "+col(c.Attempts)+" - 1")
		}
	case skCancel:
		set = append(set, lu+" = "+s.arg(q.ts(farFuture())))
		clearClaim()
		if c.CancelledAt != "" {
			set = append(set, col(c.CancelledAt)+" = COALESCE("+col(c.CancelledAt)+", "+s.now(now)+")")
		}
		if q.hasUnique() {
			set = append(set, q.keepKey(UniqueCancelled))
		}
	}
	var b strings.Builder
	if done {
		b.WriteString("DELETE FROM " + q.table)
	} else {
		b.WriteString("UPDATE " + q.table + " SET " + strings.Join(set, ", "))
	}
	b.WriteString(" WHERE " + col(c.ID) + " = " + s.arg(id))
	if f.lease != nil {
		if len(f.unsure) == 0 {
			b.WriteString(" AND " + lu + " = " + s.arg(q.ts(*f.lease)))
		} else {
			b.WriteString(" AND " + lu + " IN (" + s.arg(q.ts(*f.lease)))
			for _, u := range f.unsure {
				b.WriteString(", " + s.arg(q.ts(u)))
			}
			b.WriteString(")")
		}
	}
	if f.byAttempt && c.Attempts != "" {
		b.WriteString(" AND " + col(c.Attempts) + " = " + s.arg(f.attempt))
	}
	// The lease form on a table whose cancelled jobs keep their lease
	// (holdsCancel): only a cancel settles a cancelled row; an extension keeps
	// its group held while its handler runs.
	leaseLive := f.lease != nil && q.holdsCancel() && k != skExtend
	if (f.live || leaseLive) && c.CancelledAt != "" && k != skCancel {
		b.WriteString(" AND " + col(c.CancelledAt) + " IS NULL")
	}
	return b.String(), s.args
}

// maxAttempts is where a claim's count of attempts stops growing: the largest value
// that fits every integer column type (smallint), less one. Claims must not fail on
// the values of the rows they take, and attempts + 1 would overflow there.
const maxAttempts = 32766

// claimSet is the SET list of a claim: attempts and claimed_at, when present. The
// count of attempts reads a NULL (an outside row's) as 0, unless Start found the
// column NOT NULL (attemptsNotNull); on Postgres it saturates at maxAttempts + 1, so
// that a smallint column cannot overflow. SQLite's integers are 64-bit, and what a
// SQLite claim reads back is converted in Go (sqliteInt).
func (q *Queue[T]) claimSet(s *stmt[T], now string) []string {
	var set []string
	if a := q.c.Attempts; a != "" {
		v := col(a)
		if !q.attemptsNotNull.Load() {
			v = "COALESCE(" + v + ", 0)"
		}
		if q.dialect == Postgres {
			v = "LEAST(" + v + ", " + strconv.Itoa(maxAttempts) + ")"
		}
		set = append(set, col(a)+" = "+v+" + 1")
	}
	if q.c.ClaimedAt != "" {
		set = append(set, col(q.c.ClaimedAt)+" = "+now)
	}
	return set
}

// sqliteInt converts an attempts value a SQLite claim read back to a count: it may
// be an integer, a real (an outside writer's, or an integer that overflowed), text
// or a blob (SQLite's arithmetic made them a number when the claim counted it; a
// NULL only if the column changed since Start). It saturates at maxAttempts + 1.
func sqliteInt(v any) int {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case float64:
		n = int64(min(max(x, 0), maxAttempts+1))
	case []byte:
		n, _ = strconv.ParseInt(string(x), 10, 64)
	case string:
		n, _ = strconv.ParseInt(x, 10, 64)
	}
	return int(min(max(n, 0), maxAttempts+1))
}

// sqliteBytes converts a payload a SQLite claim read back to bytes, as CAST(... AS
// BLOB) would: an outside writer may have stored text or a number.
func sqliteBytes(v any) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	case nil:
		return nil
	}
	return fmt.Append(nil, v)
}

// attemptsCol is what a claim returns for the attempt: the count it just wrote.
func (q *Queue[T]) attemptsCol() string {
	if q.c.Attempts != "" {
		return col(q.c.Attempts)
	}
	return "0"
}

// payloadCol is what a claim returns for the payload: on SQLite cast to a BLOB, so
// that a row whose payload an outside writer stored as a number still reads as bytes
// (Postgres types are checked at Start).
func (q *Queue[T]) payloadCol() string {
	if q.dialect == SQLite {
		return "CAST(" + col(q.c.Payload) + " AS BLOB)"
	}
	return col(q.c.Payload)
}

// leaseClaimSQL (SQLite) takes up to limit claimable rows, writes the lease deadline,
// counts the attempt and returns id, attempts and payload, in one statement.
func (q *Queue[T]) leaseClaimSQL(l Limits, deadline, now time.Time, limit int) (string, []any) {
	s := &stmt[T]{q: q}
	dl := s.arg(q.ts(deadline))
	n := s.arg(q.ts(now))
	set := append([]string{col(q.c.LockedUntil) + " = " + dl}, q.claimSet(s, n)...)
	sql := "UPDATE " + q.table + " SET " + strings.Join(set, ", ") +
		" WHERE " + col(q.c.ID) + " IN (" + q.pickSQL(s, l, now, n, "", s.arg(limit), false) + ")" +
		" RETURNING " + col(q.c.ID) + ", " + q.attemptsCol() + ", " + col(q.c.Payload) + q.metaCols()
	return sql, s.args
}

// pgAckClaimSQL (Postgres) settles a batch of acks (fenced) and claims up to limit rows
// in one statement: one round trip and one commit per cycle. ids and fences are
// pairs: an id may come more than once, with each deadline its row may hold. Result
// rows are (kind, id, attempts, payload, and the meta columns: metaCols), kind 0
// for a row claimed, 1 for an ack written.
//
// With PerPartition (kc not nil) the claim takes rows of the keys and up to the
// numbers kc names (pgKeyedPick), and rows without a key only if kc.keyless.
// With kc.take as well, the statement also takes places as keyTakeSQL does, and
// the claim takes rows of the keys of the places held after it (kept, got and
// made), up to kc.take.per rows a place less the lane's rows of each key
// (kc.take.infKeys, infNs): the lane's keys change with one round trip and one
// commit, not two. Its result then also has keyTakeSQL's rows, after the others,
// each with the name in the partition key's column and a NULL payload (which
// may be of any type the schema allows): kind 2 for a place kept, 3 for one
// taken, 4 for a key walked, n-th in the walk (as attempts), 5 for one walked
// that has ready rows.
func (q *Queue[T]) pgAckClaimSQL(l Limits, ids []int64, fences []time.Time, deadline, now time.Time, limit int, kc *keyClaim) (string, []any) {
	s := &stmt[T]{q: q}
	c := q.c
	idsA := s.arg(ids)
	fA := s.arg(fences)
	var ack string
	fenceSQL := "t." + col(c.ID) + " = a.id AND t." + col(c.LockedUntil) + " = a.lu"
	if q.holdsCancel() {
		fenceSQL += " AND t." + col(c.CancelledAt) + " IS NULL" // a cancelled job is settled as Cancelled
	}
	match := " FROM unnest(" + idsA + "::bigint[], " + fA + "::timestamptz[]) AS a(id, lu) WHERE " + fenceSQL + " RETURNING t." + col(c.ID) + " AS id"
	if c.ProcessedAt == "" {
		ack = "DELETE FROM " + q.table + " AS t USING unnest(" + idsA + "::bigint[], " + fA + "::timestamptz[]) AS a(id, lu) WHERE " + fenceSQL + " RETURNING t." + col(c.ID) + " AS id"
	} else {
		set := col(c.ProcessedAt) + " = " + s.arg(q.ts(now)) + ", " + col(c.LockedUntil) + " = " + s.arg(q.ts(farFuture()))
		if c.ClaimedAt != "" {
			set += ", " + col(c.ClaimedAt) + " = NULL"
		}
		if q.hasUnique() {
			set += ", " + q.keepKeyOf("t", UniqueProcessed)
		}
		ack = "UPDATE " + q.table + " AS t SET " + set + match
	}
	sql := "WITH acked AS (" + ack + ")"
	var take *keyTakeReq
	if kc != nil && limit > 0 {
		take = kc.take
	}
	var walked string
	if take != nil {
		var ctes string
		ctes, walked = q.keyTakeCTEs(s, take.names, take.cur, take.f, take.w, take.enough, take.tag, take.until, take.deadline, take.now, take.k, take.n, take.per)
		sql = "WITH RECURSIVE " + ctes + ", acked AS (" + ack + ")"
	}
	if limit > 0 {
		dl := s.arg(q.ts(deadline))
		n := s.arg(q.ts(now))
		set := append([]string{col(c.LockedUntil) + " = " + dl}, q.claimSet(s, n)...)
		extra := " AND " + col(c.ID) + " <> ALL(" + idsA + "::bigint[])"
		var where string
		if kc != nil {
			var src string
			if take != nil {
				keys, ns := take.infKeys, take.infNs
				if keys == nil {
					keys, ns = []string{}, []int{}
				}
				src = "(SELECT p.k, greatest(count(*) * " + s.arg(take.per) + "::int - coalesce(max(f.n), 0), 0)::int" +
					" FROM (SELECT regexp_replace(h.name, '^p [0-9]+ ', '') AS k FROM (SELECT name FROM kept UNION ALL SELECT name FROM got UNION ALL SELECT name FROM made) AS h) AS p" +
					" LEFT JOIN unnest(" + s.arg(keys) + "::text[], " + s.arg(ns) + "::int[]) AS f(k, n) ON f.k = p.k GROUP BY p.k) AS k(v, n)"
			} else {
				keys, ns := kc.keys, kc.ns
				if keys == nil {
					keys, ns = []string{}, []int{}
				}
				src = "unnest(" + s.arg(keys) + "::text[], " + s.arg(ns) + "::int[]) AS k(v, n)"
			}
			where = " = ANY(" + q.pgKeyedPick(n, q.claimable(n)+q.groupReady("r", true)+extra, s.arg(limit), src, s.arg(kc.keyless)) + ")"
		} else {
			where = " IN (" + q.pickSQL(s, l, now, n, extra, s.arg(limit), true) + ")"
		}
		sql += ", claimed AS (UPDATE " + q.table + " SET " + strings.Join(set, ", ") +
			" WHERE " + col(c.ID) + where +
			" RETURNING " + col(c.ID) + ", " + q.attemptsCol() + ", " + col(c.Payload) + q.metaCols() + ")" +
			" SELECT 1, id, 0, NULL" + q.metaNulls() + " FROM acked UNION ALL SELECT 0, " + col(c.ID) + ", " + q.attemptsCol() + ", " + col(c.Payload) + q.metaRefs() + " FROM claimed"
		if take != nil {
			name := func(kind, from string) string {
				return " UNION ALL SELECT " + kind + ", 0, 0, NULL" + q.metaKeyed("name") + " FROM " + from
			}
			sql += name("2", "kept") + name("3", "got") + name("3", "made") +
				" UNION ALL SELECT CASE WHEN rd THEN 5 ELSE 4 END, 0, n, NULL" + q.metaKeyed("v") + " FROM " + walked
		}
	} else {
		sql += " SELECT 1, id, 0, NULL::bytea" + q.metaNulls() + " FROM acked"
	}
	return sql, s.args
}

// rowClaimSQL (row-lock form) takes one claimable row (up to limit, for a batch
// subscription) in a statement that commits
// on its own: it writes a lock deadline rescue from now (how long the row stays in
// work if its holder vanishes), counts the attempt, and returns id, attempts,
// payload and the deadline written. The row lock is taken next (rowHoldSQL).
func (q *Queue[T]) rowClaimSQL(now time.Time, rescue time.Duration, limit int) (string, []any) {
	s := &stmt[T]{q: q}
	n := s.now(now)
	set := append([]string{col(q.c.LockedUntil) + " = " + s.after(now, rescue)}, q.claimSet(s, n)...)
	where := " = ("
	if limit > 1 {
		where = " IN (" // a batch (SubscribeBatch): up to limit rows
	}
	return "UPDATE " + q.table + " SET " + strings.Join(set, ", ") + " WHERE " + col(q.c.ID) + where + q.pickSQL(s, Limits{}, now, n, "", strconv.Itoa(max(limit, 1)), true) + ")" +
		" RETURNING " + col(q.c.ID) + ", " + q.attemptsCol() + ", " + col(q.c.Payload) + ", " + col(q.c.LockedUntil) + q.metaCols(), s.args
}

// rowHoldSQL (row-lock form) locks, inside the transaction held while the handler
// runs, the row a rowClaimSQL just took, provided it still carries the claim's
// deadline (Cancel may have written it in between).
func (q *Queue[T]) rowHoldSQL(id int64, deadline time.Time) (string, []any) {
	s := &stmt[T]{q: q}
	return "SELECT 1 FROM " + q.table + " WHERE " + col(q.c.ID) + " = " + s.arg(id) + " AND " + col(q.c.LockedUntil) + " = " + s.arg(deadline) + " FOR UPDATE", s.args
}

// rowFreeSQL (row-lock form) makes a row whose lock was lost with its connection
// claimable now, its attempt counted, if it still carries the claim's deadline and
// no transaction holds it (a session the server has not yet ended may).
func (q *Queue[T]) rowFreeSQL(id int64, deadline, now time.Time) (string, []any) {
	s := &stmt[T]{q: q}
	set := []string{col(q.c.LockedUntil) + " = " + s.now(now)}
	if q.c.ClaimedAt != "" {
		set = append(set, col(q.c.ClaimedAt)+" = NULL")
	}
	return "UPDATE " + q.table + " SET " + strings.Join(set, ", ") + " WHERE " + col(q.c.ID) + " = (SELECT " + col(q.c.ID) + " FROM " + q.table +
		" WHERE " + col(q.c.ID) + " = " + s.arg(id) + " AND " + col(q.c.LockedUntil) + " = " + s.arg(deadline) + " FOR UPDATE SKIP LOCKED)", s.args
}

// candidatesSQL (advisory form) lists up to limit claimable ids in claim order.
func (q *Queue[T]) candidatesSQL(now time.Time, limit int) (string, []any) {
	s := &stmt[T]{q: q}
	n := s.now(now)
	return q.pickSQL(s, Limits{}, now, n, "", s.arg(limit), false), s.args
}

// takeSQL (row-lock and advisory forms) counts the attempt on a held row and reads
// it, provided it is still claimable.
func (q *Queue[T]) takeSQL(id int64, now time.Time) (string, []any) {
	s := &stmt[T]{q: q}
	n := s.now(now)
	set := q.claimSet(s, n)
	if len(set) == 0 {
		set = []string{col(q.c.ID) + " = " + col(q.c.ID)}
	}
	return "UPDATE " + q.table + " AS r SET " + strings.Join(set, ", ") + " WHERE " + col(q.c.ID) + " = " + s.arg(id) +
		" AND " + q.claimable(n) + q.groupReady("r", true) + " RETURNING " + q.attemptsCol() + ", " + col(q.c.Payload) + q.metaCols(), s.args
}

// maxErrorLen bounds the error message a settlement stores in the LastError column.
const maxErrorLen = 4096

// storedError is an error message as the LastError column stores it: valid UTF-8
// without NUL bytes (Postgres text refuses both, and a settlement must not fail on
// its own message), at most maxErrorLen bytes.
func storedError(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", "")
	if len(msg) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return msg
}
