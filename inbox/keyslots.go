package inbox

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Key slots: how Limits.PerPartition holds without claims waiting for each other
// or counting rows in work.
//
// TABLE_limits has, for each partition key that has had ready rows, PerPartition
// rows named "p I KEY" (I from 0), made on demand. A lane holds some of them under
// a lease of its own, as with the slots of Concurrency (slots.go): window_start is
// the lane's tag and starts the lease's deadline in microseconds since the Unix
// epoch; a row whose deadline has passed is free. A lane claims rows of a key only
// for the places of that key it holds and that no row it holds fills, so at most
// PerPartition rows of a key are held across every instance, by the lanes that hold
// its places; rows without a key are not limited.
//
// A lane takes free places of keys with ready rows (FOR UPDATE SKIP LOCKED) while
// it has workers to spare, extends the lease of all it holds in the same statement
// every third of a lease, and gives back the places of a key that its last claim
// found no more ready rows for. The keys it takes places of are found by a walk of
// the keys in key order (keyWalkSQL: two index probes a key) from where its last
// walk stopped, the first from the key of a random row, wrapping around: at most
// keyWindow(k, n) keys for k places, stopping after keyEnough(k, n) keys with
// ready rows, so that a take costs as much with 5,000 keys with ready rows as
// with 5, each key with ready rows gets its turn in each round of a lane's walk,
// and one key's backlog cannot hold more than its PerPartition places. A take
// gives a key a second place (a third...) only if the key has more ready rows
// than the places it takes of it would hold (keyPer rows each): a key of a few
// rows gets one place, so that the lane's claims take rows of as many keys as
// its places allow (over 2,000 keys of 5 rows with PerPartition 2, a lane that
// took both places of each key claimed 80 rows a cycle, not 160), and a key with
// a backlog tends to get its places in one lane (places of one key spread over lanes
// made their claims contend for its first rows: 0.83x as fast over 20 keys).
// A take that got fewer than it asked for before its walk went round every key
// asks again at once, until the walks of such takes have gone round every key
// together (goOn). Places given back ride with the lane's next take, after it in
// its transaction. The statement that takes makes the rows of the places it
// takes that have none, and no others; the rows of keys whose places are all
// free and that have no unfinished row are deleted once a lane has given back
// the last places of a key it held and the settlements of the key's rows it
// held are written (with its next take or give-back), and once per poll by a
// lane that holds none. A lane whose places' lease is
// about to end unextended (a tenth of a lease before) cancels the handlers of its
// keyed jobs and holds none; a crashed instance's places come free when their
// lease ends. The cost of the limit is a statement when a lane's keys change, not
// one per claim.
//
// On Postgres a take rides with the lane's claim when it claims next (not with
// Rate): the claim's statement takes the places first, and claims rows of the
// keys of the places held after it (pgAckClaimSQL), with the give-back after it,
// in one round trip and one transaction. A lane whose keys ran dry then changes
// them and claims their rows with one commit, not two (a drain over 2,000 keys of
// 5 rows: 1.3 times as fast). A failed statement fails the take as well: it is
// refused (a database error) or in doubt, as a take of its own would be; and a
// failed give-back fails the acks and the claim, which are tried again (the take
// is not). A row of the result that cannot be read ends it (pgx), and with it the
// take's rows, which come last: places the lane holds but does not know of come
// free when their lease ends.
//
// On SQLite, which has one writer, the extension and the take, which makes the
// places it takes, are two statements of one write transaction (sqliteKeyTakeSQL),
// and the claim takes rows of the lane's keys one index scan per key
// (sqliteKeyedClaimSQL).
// A lane holds, for the places it has, as many rows as it would hold without the
// limit (keyPer): the claim is one statement per cycle as without it.

// keySlots is a lane's holding of places of Limits.PerPartition. Only
// the lane's loop uses it; running and the expiry timer are shared with the
// workers.
type keySlots struct {
	tag         int64
	held        map[string][]string // the places held, by key
	cursor      keyCursor           // where the last take's walk of the keys stopped
	round       keyCursor           // where the walk of the current run of takes that came back short began
	inflight    map[string]int      // the lane's rows held, by key
	unwritten   map[string]int      // by key, rows settled whose settlements are not yet written
	dropLater   map[string]bool     // keys given back whose places to delete once none of their rows is unwritten
	dry         map[string]bool     // keys the last claim found no more ready rows of
	until       time.Time           // the places' lease deadline
	extendAt    time.Time
	retryAt     time.Time // no new places asked for before (the last ask came back short)
	sweepAt     time.Time // keyDropSQL next, while the lane holds no place (once per poll)
	fullSweepAt time.Time // keyDropSQL next, whatever the lane holds (once per lease)
	backoff     time.Duration
	timer       *time.Timer
	expired     chan struct{} // a token from the timer: the lease is about to end unextended
	pending     *keyTakeReq   // a take syncKeys left to ride with the claim (Postgres)
	backLater   []string      // places to give back with the next give-back (a refused one's)
	giveAt      time.Time     // backLater is due (giveLater)
	giveFails   int           // refused give-backs in a row

	// The gate of the workers: a keyed job's handler runs only while its key has
	// fewer handlers running in the lane than places held (caps).
	mu      sync.Mutex
	caps    map[string]int           // places held, by key (a copy of held's counts)
	run     map[string]int           // handlers running, by key
	running map[*leased]struct{}     // keyed jobs whose handlers run
	wakes   map[string]chan struct{} // by key: closed (and dropped) when a handler of the key may start
	waiting *atomic.Int64            // Health.LimitWaiting
}

func newKeySlots(waiting *atomic.Int64) *keySlots {
	return &keySlots{waiting: waiting,
		tag: rand.Int64(), held: map[string][]string{}, inflight: map[string]int{}, dry: map[string]bool{},
		unwritten: map[string]int{}, dropLater: map[string]bool{},
		expired: make(chan struct{}, 1), caps: map[string]int{}, run: map[string]int{}, running: map[*leased]struct{}{},
		wakes: map[string]chan struct{}{},
	}
}

// enter waits until keyed job j's handler may run (a place of its key free in the
// lane): false if j's context ends first or stop is closed.
func (ks *keySlots) enter(j *leased, stop <-chan struct{}) bool {
	k := j.meta.key
	wake := func() chan struct{} {
		w := ks.wakes[k]
		if w == nil {
			w = make(chan struct{})
			ks.wakes[k] = w
		}
		return w
	}
	return waitTurn(&ks.mu, wake, ks.waiting, j, stop, func() bool {
		if ks.run[k] >= ks.caps[k] {
			return false
		}
		ks.run[k]++
		ks.running[j] = struct{}{}
		return true
	})
}

// leave records that keyed job j's handler returned.
func (ks *keySlots) leave(j *leased) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.running, j)
	if ks.run[j.meta.key]--; ks.run[j.meta.key] <= 0 {
		delete(ks.run, j.meta.key)
	}
	if w := ks.wakes[j.meta.key]; w != nil {
		close(w) // the handlers waiting for a place of this key: one of them may start
		delete(ks.wakes, j.meta.key)
	}
}

// signalLocked wakes every handler waiting for a place.
func (ks *keySlots) signalLocked() {
	for k, w := range ks.wakes {
		close(w)
		delete(ks.wakes, k)
	}
}

// publish gives the workers' gate the places held now. A key whose places fell
// below its running handlers (places lost) has every keyed handler cancelled with
// cause (which handler runs in which place is not known).
func (ks *keySlots) publish(cause error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	clear(ks.caps)
	for k, h := range ks.held {
		ks.caps[k] = len(h)
	}
	for k, r := range ks.run {
		if r > ks.caps[k] {
			for j := range ks.running {
				j.cancel(cause)
			}
			break
		}
	}
	ks.signalLocked()
}

// stopAll cancels every running keyed handler with cause.
func (ks *keySlots) stopAll(cause error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for j := range ks.running {
		j.cancel(cause)
	}
}

// count is how many places the lane holds.
func (ks *keySlots) count() int {
	n := 0
	for _, ns := range ks.held {
		n += len(ns)
	}
	return n
}

// names are every place held.
func (ks *keySlots) names() []string {
	out := []string{}
	for _, ns := range ks.held {
		out = append(out, ns...)
	}
	return out
}

// free are the keys the lane may claim rows of now and how many of each: its
// places times per (keyPer) less its rows, in a random order.
func (ks *keySlots) free(per int) (keys []string, ns []int, total int) {
	keys, ns = []string{}, []int{}
	for k, h := range ks.held {
		if c := len(h)*per - ks.inflight[k]; c > 0 {
			keys = append(keys, k)
			ns = append(ns, c)
			total += c
		}
	}
	return keys, ns, total
}

// claimed notes the rows a claim took of the keys in caps: a key of which it took
// fewer than it could has no more ready rows for now, unless the claim took all it
// asked for (full): its limit, not the key, may have cut the key's share.
func (ks *keySlots) claimed(keys []string, ns []int, got []*leased, full bool) {
	took := map[string]int{}
	for _, j := range got {
		if j.meta.keyed {
			ks.inflight[j.meta.key]++
			took[j.meta.key]++
		}
	}
	for i, k := range keys {
		ks.dry[k] = took[k] < ns[i] && !full
	}
}

// settled notes a keyed row the lane holds no more: its place may be claimed
// for, though its settlement is yet to be written.
func (ks *keySlots) settled(j *leased) {
	if !j.meta.keyed {
		return
	}
	if ks.inflight[j.meta.key]--; ks.inflight[j.meta.key] <= 0 {
		delete(ks.inflight, j.meta.key)
	}
	ks.unwritten[j.meta.key]++
}

// written notes that the settlement of keyed row j (settled) was written, or
// failed to be. The places of a key given back are deleted (if it is idle) only
// once the settlements of its rows are written: before, the deletion would find
// them in work (on Postgres a cycle of acks alone runs beside the lane), and the
// places would stay in TABLE_limits for the sweep, which reads every place.
func (ks *keySlots) written(j *leased) {
	if !j.meta.keyed {
		return
	}
	if ks.unwritten[j.meta.key]--; ks.unwritten[j.meta.key] <= 0 {
		delete(ks.unwritten, j.meta.key)
	}
}

// giveLater keeps the places back and the keys gone of a give-back the database
// refused (rolled back: the places are still the lane's, under the same lease)
// for the next give-back, rather than leave the places held until their lease
// ends: another lane could take none of them meanwhile, and their keys' rows
// would wait a lease. The next is due after slotRetry, doubling, and after
// giveTries refusals in a row (or once the lease has ended) the places are let
// go: they come free when their lease ends. It reports whether it kept them.
func (ks *keySlots) giveLater(back, gone []string, now time.Time) bool {
	if ks.giveFails++; ks.giveFails > giveTries || !now.Before(ks.until) {
		ks.giveFails = 0
		return false
	}
	ks.backLater = append(ks.backLater, back...)
	for _, k := range gone {
		ks.dropLater[k] = true
	}
	ks.giveAt = now.Add(slotRetry << ks.giveFails)
	return true
}

// giveTries is how many refused give-backs in a row giveLater tries again.
const giveTries = 4

// dropDue reports whether a key given back is due for the deletion of its
// places (the settlements of its rows are written), or places are to be given
// back again (giveLater).
func (ks *keySlots) dropDue() bool {
	if len(ks.backLater) > 0 && !time.Now().Before(ks.giveAt) {
		return true
	}
	for k := range ks.dropLater {
		if ks.unwritten[k] == 0 {
			return true
		}
	}
	return false
}

// goOn reports whether a take that came back short (short), whose walk began
// after prev and stopped before it went round every key (more), should be
// followed by another at once. Not once the walks of the run of short takes
// since the first have together gone round every key (from round, where that
// run began): the keys were all walked, none had a place to take, and the lane
// backs off. A walk stops after a few keys with ready rows, and ready keys
// whose places are all held (by other lanes, or this one) would otherwise keep
// a lane taking back to back over a handful of keys.
func (ks *keySlots) goOn(prev keyCursor, more, short bool) bool {
	if !short || !more {
		ks.round = keyCursor{}
		return false
	}
	if !ks.round.set {
		ks.round = prev // unset if the lane has not walked yet: set at its next take
		return true
	}
	if passed(prev.key, ks.cursor.key, ks.round.key) {
		ks.round = keyCursor{}
		return false
	}
	return true
}

// nextTake sets when the lane may take again after a take of k places that got
// got, whose walk began after prev and stopped before it went round every key
// (more): at once while goOn says so, else after a back-off (doubling from
// slotRetry up to poll) if it came back short. The back-off stays as it was
// when goOn goes on, unless this take got some: runs of takes that get nothing,
// each ended by a back-off, would otherwise take back to back with a back-off
// of slotRetry between runs (a lane holding no place, over 20 keys whose
// places another lane held, took every 1.5 ms for seconds).
func (ks *keySlots) nextTake(prev keyCursor, more bool, got, k int, now time.Time, poll time.Duration) {
	switch {
	case ks.goOn(prev, more, got < k):
		ks.retryAt = now
		if got > 0 {
			ks.backoff = 0
		}
	case got < k:
		ks.backoff = min(max(2*ks.backoff, slotRetry), poll)
		ks.retryAt = now.Add(ks.backoff)
	default:
		ks.backoff = 0
	}
}

// passed reports whether a walk of the keys in key order from after from to to,
// wrapping around after the last key, went by key r (from == to: it went round).
func passed(from, to, r string) bool {
	if from < to {
		return from < r && r <= to
	}
	return r > from || r <= to
}

// placeKey is the key of a place's name.
func placeKey(name string) string {
	_, rest, _ := strings.Cut(name, " ")
	_, k, _ := strings.Cut(rest, " ")
	return k
}

// keyCursor is where a lane's walk of the keys stopped: the last key it passed
// (set false: none yet, the walk starts after the key of a random row).
type keyCursor struct {
	key string
	set bool
}

// keyWindow is how many keys a take of k places of PerPartition n walks at most:
// twice keyEnough, and 12, so that the cost of a take is bounded by the places
// asked for, not by the keys with ready rows.
func keyWindow(k, n int) int { return 2*keyEnough(k, n) + 12 }

// keyEnough is how many keys with ready rows a take of k places of PerPartition
// n walks before it stops (within keyWindow): twice the keys that k places
// fill, and at least k (keys of a few rows get one place each), and 2, so that a
// walk over thousands of ready keys reads a few more keys than it takes places
// of, not the whole window; a take that comes back short asks again at once
// from where its walk stopped.
func keyEnough(k, n int) int { return max(2*((k+n-1)/n), k) + 2 }

// keyWalkSQL walks up to w keys of the table in key order after the key cur (a
// NULL cur: after the key of the first keyed row from the id at fraction f of the
// ids, a random row), wrapping around once to the first key and ending at cur,
// and stopping once it has walked enough keys with a row claimable at now: two
// index probes per key. Result rows are (key, ready: it has a row claimable at
// now), in walk order.
func (q *Queue[T]) keyWalkSQL(cur *string, f float64, w, enough int, now time.Time) (string, []any) {
	s := &stmt[T]{q: q}
	ctes, walked := q.keyWalkCTEs(s, cur, f, w, enough, now)
	sql := "WITH RECURSIVE " + ctes + " SELECT walked.v, walked.rd FROM " + walked + " ORDER BY walked.n"
	return sql, s.args
}

// keyWalkCTEs are the common table expressions of keyWalkSQL's walk (to follow
// WITH RECURSIVE), and a FROM item that names its keys walked (v), their order
// (n) and whether each has a row claimable at now (rd).
//
// Each step of the walk carries the key after its own (nx), so that it finds the
// next key with one index probe, and whether its key is ready, read once, so
// that the walk can stop after enough ready keys (r counts those before it).
func (q *Queue[T]) keyWalkCTEs(s *stmt[T], cur *string, f float64, w, enough int, now time.Time) (ctes, walked string) {
	pk, id, t := col(q.c.Partition), col(q.c.ID), q.table
	curA, fA, wA, eA, nowTs := s.arg(cur), s.arg(f), s.arg(w), s.arg(enough), s.arg(q.ts(now))
	text, big, tr, fl, fc := "::text", "::bigint", "true", "false", "::float8"
	if q.dialect == SQLite {
		text, big, tr, fl, fc = "", "", "1", "0", ""
	}
	next := func(v string) string { return "(SELECT min(" + pk + ") FROM " + t + " WHERE " + pk + " > " + v + ")" }
	ready := func(v string) string {
		return "EXISTS (SELECT 1 FROM " + t + " AS r WHERE r." + pk + " = " + v + " AND " + q.claimable(nowTs) + ")"
	}
	first := "(SELECT min(" + pk + ") FROM " + t + " WHERE " + pk + " IS NOT NULL)"
	random := "(SELECT " + pk + " FROM " + t + " WHERE " + pk + " IS NOT NULL AND " + id + " >= (SELECT min(" + id + ") + CAST((max(" + id + ") - min(" + id + ") + 1) * " + fA + fc + " AS bigint) FROM " + t + ") ORDER BY " + id + " LIMIT 1)"
	step := "coalesce(w.nx, CASE WHEN w.wr THEN NULL ELSE " + first + " END)" // the key after w's
	upTo := "w.r + CASE WHEN w.rd THEN 1 ELSE 0 END"                          // ready keys up to w's
	ctes = "c(v) AS (SELECT coalesce(" + curA + text + ", " + random + ", '') WHERE " + wA + big + " > 0)" +
		", s0(v, wr) AS (SELECT coalesce(" + next("c.v") + ", " + first + "), CASE WHEN " + next("c.v") + " IS NULL THEN " + tr + " ELSE " + fl + " END FROM c)" +
		", w(v, nx, n, wr, r, rd) AS (SELECT s0.v, " + next("s0.v") + ", 1, s0.wr, 0, " + ready("s0.v") + " FROM s0" +
		" UNION ALL SELECT " + step + ", " + next(step) + ", w.n + 1, CASE WHEN w.wr OR w.nx IS NULL THEN " + tr + " ELSE " + fl + " END, " + upTo + ", " + ready(step) + " FROM w, c" +
		" WHERE w.v IS NOT NULL AND w.n < " + wA + big + " AND " + upTo + " < " + eA + big + " AND NOT (w.wr AND w.v >= c.v))" +
		", walked(v, n, rd) AS (SELECT w.v, w.n, w.rd FROM w, c WHERE w.v IS NOT NULL AND NOT (w.wr AND w.v > c.v))"
	return ctes, "walked"
}

// keyTakeSQL (Postgres) extends the lease of the places a lane holds (names,
// under tag and the deadline until) to deadline and, in the same statement, walks
// up to w keys as keyWalkSQL does (from cur, or from fraction f, stopping after
// enough ready keys) and takes up to
// k free places of the walked keys with ready rows at now, in walk order, the
// i-th place of a key (from 0) only if the key has more than i times per ready
// rows (pick): those that exist it locks, passing over those another take has
// locked (SKIP LOCKED); those that have no row yet it makes taken (and makes no
// others), inserting them in name order, so that two takes that make the same
// places never wait for each other in a cycle (in walk order, which starts at
// each lane's own cursor, they deadlocked: 15 of 40 rounds of four lanes making
// 40 new keys' places at once). Each place it takes or makes it first holds an
// advisory lock on for its transaction (pg_try_advisory_xact_lock, with
// placeLockKey and the name's hash), passing over a place another take holds
// one on: a make (INSERT ... ON CONFLICT) waits for another transaction's
// insert or update of the same name, and a take that updated a free place
// another was about to make, and made one that other had made, deadlocked with
// it (40P01; once a take rode with a claim, 12 times in 40 drains over 2,000
// keys, each stalling both lanes for Postgres's deadlock_timeout). With them no
// take waits for another's makes or takes; one may still wait for a lane
// extending or giving back a place it holds (none seen in 40 drains), and what
// a deadlock refuses is given back again (keySlots.giveLater). Result rows are (name, kind, n): kind 0 for a
// place held already, 1 for one taken, 2 for a key walked (name), n-th in the
// walk, 3 for one walked that has ready rows. One round trip a take, not two,
// and the keys' readiness is read once. The places are found by their names
// (= ANY(ARRAY(...)): index probes), not joined: TABLE_limits holds a place for
// each key with unfinished rows, and Postgres chose two sequential scans of it
// per take (2.4 of 3.5 ms with 2,000 keys). Whether a candidate place exists is
// whether its deadline was found (starts is NOT NULL): an EXISTS beside it was
// planned as a hashed subplan, which reads every place, twice a take.
func (q *Queue[T]) keyTakeSQL(names []string, cur *string, f float64, w, enough int, tag int64, until, deadline, now time.Time, k, n, per int) (string, []any) {
	s := &stmt[T]{q: q}
	ctes, walked := q.keyTakeCTEs(s, names, cur, f, w, enough, tag, until, deadline, now, k, n, per)
	return "WITH RECURSIVE " + ctes +
		" SELECT name, 0, 0 FROM kept UNION ALL SELECT name, 1, 0 FROM got UNION ALL SELECT name, 1, 0 FROM made UNION ALL SELECT v, CASE WHEN rd THEN 3 ELSE 2 END, n FROM " + walked, s.args
}

// keyTakeCTEs are keyTakeSQL's common table expressions (to follow WITH
// RECURSIVE), with their arguments in s: kept, got and made return the names of
// the places kept and taken (name), and the FROM item walked the keys walked (v),
// their order (n) and whether each has ready rows (rd).
func (q *Queue[T]) keyTakeCTEs(s *stmt[T], names []string, cur *string, f float64, w, enough int, tag int64, until, deadline, now time.Time, k, n, per int) (ctes, walkedFrom string) {
	if names == nil {
		names = []string{} // an empty array, not NULL (which no name is unequal to)
	}
	lt := q.limitsTable()
	ctes, walked := q.keyWalkCTEs(s, cur, f, w, enough, now)
	namesA, tagA, untilA, dlA := s.arg(names), s.arg(tag), s.arg(until.UnixMicro()), s.arg(deadline.UnixMicro())
	nowA, kA, nA, perA := s.arg(now.UnixMicro()), s.arg(k), s.arg(n), s.arg(max(per, 1))
	try := "pg_try_advisory_xact_lock(" + s.arg(q.placeLockKey()) + "::int, hashtext(" // + name + "))"
	sql := ctes +
		", ready AS (SELECT walked.v, walked.n AS o, (SELECT count(*) FROM (SELECT 1 FROM " + q.table + " AS r WHERE r." + col(q.c.Partition) + " = walked.v AND " + q.claimable(s.arg(q.ts(now))) +
		" LIMIT " + perA + "::int * " + nA + "::int) AS x) AS c FROM " + walked + " WHERE " + kA + "::int > 0 AND walked.rd)" +
		", cand AS (SELECT 'p ' || i || ' ' || ready.v AS name, ready.o, i FROM ready CROSS JOIN generate_series(0, " + nA + "::int - 1) AS i WHERE i = 0 OR i * " + perA + "::int < ready.c)" +
		", kept AS (UPDATE " + lt + " SET starts = " + dlA + "::bigint WHERE name = ANY(" + namesA + "::text[]) AND window_start = " + tagA + "::bigint AND starts = " + untilA + "::bigint RETURNING name)" +
		", pick AS (SELECT c.name, c.st IS NOT NULL AS ex FROM (SELECT cand.name, cand.o, cand.i, (SELECT l.starts FROM " + lt + " AS l WHERE l.name = cand.name) AS st FROM cand) AS c" +
		" WHERE c.name <> ALL(" + namesA + "::text[]) AND (c.st IS NULL OR c.st <= " + nowA + "::bigint)" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS f WHERE f.name = 'fence' AND f.starts > " + nowA + "::bigint)" +
		" ORDER BY c.o, c.i LIMIT " + kA + "::int)" +
		", got AS (UPDATE " + lt + " SET window_start = " + tagA + "::bigint, starts = " + dlA + "::bigint WHERE name = ANY(ARRAY(SELECT l.name FROM " + lt + " AS l" +
		" WHERE l.name = ANY(ARRAY(SELECT name FROM pick WHERE ex AND " + try + "name))))" +
		" AND l.starts <= " + nowA + "::bigint FOR UPDATE OF l SKIP LOCKED)) RETURNING name)" +
		", made AS (INSERT INTO " + lt + " (name, window_start, starts) SELECT pick.name, " + tagA + "::bigint, " + dlA + "::bigint FROM pick WHERE NOT pick.ex AND " + try + "pick.name))" +
		" ORDER BY pick.name ON CONFLICT (name) DO NOTHING RETURNING name)"
	return sql, walked
}

// placeLockKey is the first key of the advisory locks a take holds, with the
// hash of a place's name, on the places it takes or makes (keyTakeSQL).
func (q *Queue[T]) placeLockKey() int32 {
	h := fnv.New32a()
	h.Write([]byte(q.name + " places"))
	return int32(h.Sum32())
}

// keyDropSQL deletes, at now, the places of every key that has no unfinished row
// and no place held (up to n places a key): keys gone idle, including the places
// of lanes that ended without giving them back. On Postgres a place another
// transaction has locked (a lane taking it, or giving it back) is passed over,
// not waited for (SKIP LOCKED), and left for a later deletion: two lanes each
// deleting the places of a key whose other place the other had locked waited
// for each other (40P01: TestPlacesHammer).
func (q *Queue[T]) keyDropSQL(now time.Time, n int) (string, []any) {
	s := &stmt[T]{q: q}
	lt := q.limitsTable()
	pk := col(q.c.Partition)
	nowA, nA := s.arg(now.UnixMicro()), s.arg(n)
	if q.dialect == SQLite {
		key := placeKeySQLite("l.name")
		return "WITH RECURSIVE i(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM i WHERE i + 1 < " + nA + ")" +
			" DELETE FROM " + lt + " AS l WHERE l.name GLOB 'p *' AND l.starts <= " + nowA +
			" AND NOT EXISTS (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = " + key + " AND " + q.live("r") + ")" +
			" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS h WHERE h.name IN (SELECT 'p ' || i.i || ' ' || " + key + " FROM i) AND h.starts > " + nowA + ")", s.args
	}
	key := "regexp_replace(l.name, '^p [0-9]+ ', '')"
	return "DELETE FROM " + lt + " AS d WHERE d.name = ANY(ARRAY(SELECT l.name FROM " + lt + " AS l WHERE l.name LIKE 'p %' AND l.starts <= " + nowA + "::bigint" +
		" AND NOT EXISTS (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = " + key + " AND " + q.live("r") + ")" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS h WHERE h.name = ANY(ARRAY(SELECT 'p ' || i || ' ' || " + key + " FROM generate_series(0, " + nA + "::int - 1) AS i)) AND h.starts > " + nowA + "::bigint)" +
		" FOR UPDATE OF l SKIP LOCKED))", s.args
}

// keyDropKeysSQL is keyDropSQL for the keys keys only: the places of those of
// them that have no unfinished row and no place held are deleted, a few index
// probes a key. A lane runs it for the keys whose last places it gave back, so
// that keys going dry cost as much with 5,000 keys in TABLE_limits as with 5
// (keyDropSQL reads every place row).
func (q *Queue[T]) keyDropKeysSQL(keys []string, now time.Time, n int) (string, []any) {
	s := &stmt[T]{q: q}
	lt := q.limitsTable()
	pk := col(q.c.Partition)
	nowA, nA := s.arg(now.UnixMicro()), s.arg(n)
	if q.dialect == SQLite {
		keysA := s.arg(jsonNames(keys))
		return "WITH RECURSIVE i(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM i WHERE i + 1 < " + nA + ")" +
			" DELETE FROM " + lt + " WHERE starts <= " + nowA + " AND name IN (SELECT 'p ' || i.i || ' ' || g.value FROM json_each(" + keysA + ") AS g, i" +
			" WHERE NOT EXISTS (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = g.value AND " + q.live("r") + ")" +
			" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS h WHERE h.name IN (SELECT 'p ' || j.i || ' ' || g.value FROM i AS j) AND h.starts > " + nowA + "))", s.args
	}
	// Every lookup of TABLE_limits by name is an index probe (= ANY(ARRAY(...))):
	// with IN (SELECT ...) Postgres read the whole table once and then tested
	// each of its rows against each key (1 ms for 15 keys and 94 places).
	keysA := s.arg(keys)
	return "DELETE FROM " + lt + " AS d WHERE d.name = ANY(ARRAY(SELECT l.name FROM " + lt + " AS l WHERE l.starts <= " + nowA + "::bigint AND l.name = ANY(ARRAY(SELECT 'p ' || i || ' ' || g.k FROM unnest(" + keysA + "::text[]) AS g(k), generate_series(0, " + nA + "::int - 1) AS i" +
		" WHERE NOT EXISTS (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = g.k AND " + q.live("r") + ")" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS h WHERE h.name = ANY(ARRAY(SELECT 'p ' || j || ' ' || g.k FROM generate_series(0, " + nA + "::int - 1) AS j)) AND h.starts > " + nowA + "::bigint)))" +
		" FOR UPDATE OF l SKIP LOCKED))", s.args
}

// syncKeys brings the lane's places towards what it needs: it gives back the idle
// places of keys its last claim found dry (deleting the rows of keys gone idle),
// and asks for more, extending the lease of those it holds in the same statement,
// while it claims (claiming) and holds fewer places than it has workers, or when
// the lease is due for extension. Failures are logged and tried again later
// (places a refused give-back held, with the next: giveLater); the
// expiry timer stops the keyed handlers if the lease cannot be extended in time.
// Rows of inflight whose key it holds no place of any more are released
// (releaseUnplaced).
//
// With ride (Postgres: the lane claims next, in a statement of its own), a take
// of more places is not run but left in ks.pending, for keyedWant to put in
// the claim's statement (pgAckClaimSQL); took ends it.
func (s *Subscription[T]) syncKeys(l *lane, claiming, ride bool, inflight map[int64]*leased) {
	ks := l.keys
	ks.pending = nil
	defer s.releaseUnplaced(ks, inflight)
	select {
	case <-ks.expired:
		clear(ks.held)
		ks.publish(&LeaseLostError{Table: s.q.name, Op: "slot expired"})
	default:
	}
	now := time.Now()
	n := s.o.Limits.PerPartition
	// The places the lane can use: one per worker, and with Concurrency no more
	// than the slots it holds (a place it cannot use would keep its key's rows
	// from the lanes that can).
	need := l.n
	if l.slots != nil {
		need = min(need, len(l.slots.names))
	}
	back, gone := ks.backLater, []string(nil)
	ks.backLater = nil
	for k := range ks.dropLater {
		if len(ks.held[k]) > 0 {
			delete(ks.dropLater, k) // taken again
		} else if ks.unwritten[k] == 0 {
			delete(ks.dropLater, k)
			gone = append(gone, k)
		}
	}
	giveBack := func(k string, idle int) {
		h := ks.held[k]
		back = append(back, h[len(h)-idle:]...)
		if idle == len(h) {
			delete(ks.held, k)
			if ks.unwritten[k] == 0 {
				gone = append(gone, k)
			} else {
				ks.dropLater[k] = true // deleted once its settlements are written
			}
		} else {
			ks.held[k] = slices.Clip(h[:len(h)-idle])
		}
	}
	for k, dry := range ks.dry {
		if idle := len(ks.held[k]) - ks.inflight[k]; dry && idle > 0 {
			giveBack(k, idle)
		}
		delete(ks.dry, k)
	}
	if over := ks.count() - need; over > 0 {
		for k, h := range ks.held {
			if idle := min(len(h)-ks.inflight[k], over); idle > 0 {
				giveBack(k, idle)
				if over -= idle; over == 0 {
					break
				}
			}
		}
	}
	if len(back) > 0 {
		ks.publish(nil) // the places given back are idle: no handler runs in them
		// Given back with the take below, if there is one, else on their own;
		// either way another lane of this process may be waiting for them.
		defer s.q.Wake()
	}
	if (len(ks.held) == 0 && !now.Before(ks.sweepAt)) || !now.Before(ks.fullSweepAt) {
		// Every key's, once per poll while the lane holds none (as an idle lane
		// polls) and once per lease whatever it holds: for the places of lanes
		// that ended without giving them back, and those given back while
		// another lane held a place of their key.
		ks.sweepAt, ks.fullSweepAt = now.Add(s.o.PollInterval), now.Add(s.o.Lease)
		sql, args := s.q.keyDropSQL(trunc(now), n)
		_, _ = s.q.db().exec(s.ctx, sql, args...)
	}
	held := ks.count()
	k := 0
	if claiming && held < need && !now.Before(ks.retryAt) {
		k = need - held
	}
	if k == 0 && (held == 0 || now.Before(ks.extendAt)) {
		if len(back) > 0 || len(gone) > 0 {
			if err := s.q.giveBackPlaces(s.ctx, back, ks.tag, ks.until, gone, trunc(now), n); err != nil {
				s.q.health.noteErr(err)
				// Rolled back for a passing cause (a deadlock, say): given back with
				// the next.
				if !isPgError(err) || permanent(err) || !ks.giveLater(back, gone, now) {
					s.q.log.Warn("inbox: giving back places of Limits.PerPartition failed; they come free when their lease ends", "table", s.q.name, "err", err)
				}
			} else {
				ks.giveFails = 0
			}
		}
		return
	}
	deadline := trunc(now.Add(s.o.Lease))
	names := ks.names()
	prev := ks.cursor
	per := s.keyPerOf(l, held+k) // rows a place holds once the take got all it asks for
	if ride && k > 0 && s.q.dialect == Postgres {
		t := &keyTakeReq{names: names, back: back, gone: gone, tag: ks.tag, until: ks.until, deadline: deadline, now: trunc(now), k: k, n: n, per: per, prev: prev, f: rand.Float64()}
		t.w, t.enough = keyWindow(k, n), keyEnough(k, n)
		if ks.cursor.set {
			t.cur = &ks.cursor.key
		}
		ks.pending = t
		return
	}
	kept, got, more, refused, err := s.q.keyTake(s.ctx, &ks.cursor, names, back, gone, ks.tag, ks.until, deadline, trunc(now), k, n, per)
	s.keysTaken(ks, now, deadline, prev, k, back, gone, kept, got, more, refused, err)
}

// keysTaken brings the lane's places up to date after a take of k places
// (keyTake, or one that rode with a claim: took) at now: kept and got on
// success, else err (refused: the database refused it, and nothing changed).
// back are the places given back with it, gone the keys whose places it was
// to delete: after a take refused for a passing cause (a deadlock, say) they
// are given back (deleted) with the next.
func (s *Subscription[T]) keysTaken(ks *keySlots, now, deadline time.Time, prev keyCursor, k int, back, gone []string, kept, got []string, more, refused bool, err error) {
	if err != nil {
		s.q.health.noteErr(err)
		if s.ctx.Err() != nil {
			return
		}
		if len(back) > 0 || len(gone) > 0 {
			if (!refused || permanent(err) || !ks.giveLater(back, gone, now)) && len(back) > 0 {
				s.q.log.Warn("inbox: giving back places of Limits.PerPartition failed; they come free when their lease ends", "table", s.q.name, "err", err)
			}
		}
		if refused {
			if s.backOffRefused(err, now, &ks.backoff, &ks.extendAt, &ks.retryAt) {
				return
			}
			s.q.log.Warn("inbox: places of Limits.PerPartition not extended; trying again", "table", s.q.name, "err", err, "retry_in", ks.backoff)
			return
		}
		s.q.log.Warn("inbox: places of Limits.PerPartition in doubt; holding none until their lease ends", "table", s.q.name, "err", err)
		clear(ks.held)
		ks.until, ks.retryAt = time.Time{}, now.Add(s.o.Lease)
		s.armKeys(ks)
		ks.publish(&LeaseLostError{Table: s.q.name, Op: "slot lost"})
		return
	}
	clear(ks.held)
	ks.giveFails = 0
	for _, name := range append(kept, got...) {
		key := placeKey(name)
		ks.held[key] = append(ks.held[key], name)
	}
	ks.until = deadline
	ks.extendAt = now.Add(s.o.Lease / 3)
	ks.nextTake(prev, more, len(got), k, now, s.o.PollInterval)
	s.armKeys(ks)
	// Places held no more (their lease ended before this extension) stop their
	// keys' handlers, which may run beside another lane's.
	ks.publish(&LeaseLostError{Table: s.q.name, Op: "slot lost"})
}

// releaseUnplaced gives back to the table the rows the lane holds, not running,
// of keys it holds no place of: their places were lost (their lease expired or
// its extension was in doubt). They would wait in the lane for a place of their
// key, their leases extended, and the lane asks only for places of keys with
// ready rows: once the key's other rows had run elsewhere, none, and they would
// never run. Released (their attempt not counted), they are ready rows of their
// key again, for whichever lane takes its places.
func (s *Subscription[T]) releaseUnplaced(ks *keySlots, inflight map[int64]*leased) {
	lost := false
	for k, n := range ks.inflight {
		if n > 0 && len(ks.held[k]) == 0 {
			lost = true
			break
		}
	}
	if !lost {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, j := range inflight {
		if _, running := ks.running[j]; running || !j.meta.keyed || len(ks.held[j.meta.key]) > 0 {
			continue
		}
		// Its worker (waiting in enter, or yet to take it) gives it back.
		j.cancel(&LeaseLostError{Table: s.q.name, ID: j.id, Op: "place lost"})
	}
}

// armKeys (re)starts the timer that stops the lane's keyed handlers a tenth of a
// lease before the places' lease ends unextended.
func (s *Subscription[T]) armKeys(ks *keySlots) {
	if ks.timer != nil {
		ks.timer.Stop()
	}
	select {
	case <-ks.expired:
	default:
	}
	if len(ks.held) == 0 {
		return
	}
	ks.timer = time.AfterFunc(s.untilExpiry(ks.until), func() {
		// Stop the handlers now (the loop may be waiting on the database) and
		// start none until the loop holds places again.
		ks.mu.Lock()
		clear(ks.caps)
		ks.mu.Unlock()
		ks.stopAll(&LeaseLostError{Table: s.q.name, Op: "slot expired"})
		select {
		case ks.expired <- struct{}{}:
		default:
		}
	})
}

// keyWait is how long from now the loop may sleep before syncKeys has work.
func (ks *keySlots) keyWait(now time.Time, next time.Duration, claiming bool, workers int) time.Duration {
	if len(ks.held) > 0 {
		next = min(next, max(ks.extendAt.Sub(now), time.Millisecond))
	}
	if claiming && ks.count() < workers {
		next = min(next, max(ks.retryAt.Sub(now), time.Millisecond))
	}
	if len(ks.backLater) > 0 {
		next = min(next, max(ks.giveAt.Sub(now), time.Millisecond))
	}
	return next
}

// freeKeys gives back every place of a lane whose loop ends (best effort), unless
// the subscription was abandoned or halted, as in a crash.
func (s *Subscription[T]) freeKeys(l *lane) {
	ks := l.keys
	if ks.timer != nil {
		ks.timer.Stop()
	}
	if len(ks.held) == 0 || s.ctx.Err() != nil {
		return
	}
	sql, args := s.q.slotFreeSQL(ks.names(), ks.tag, ks.until)
	_, _ = s.q.db().exec(s.ctx, sql, args...)
	clear(ks.held)
}

// giveBackPlaces frees the places back (held under tag until the deadline until)
// and deletes the places of the keys gone, whose last places back held, if those
// keys have no unfinished row and no place held (keyDropKeysSQL: best effort, the
// rows are made again on demand), in one transaction: one commit, not two. On
// SQLite a failed delete alone is not reported; on Postgres it undoes the
// freeing, and is.
func (q *Queue[T]) giveBackPlaces(ctx context.Context, back []string, tag int64, until time.Time, gone []string, now time.Time, n int) error {
	if len(gone) == 0 {
		free, freeArgs := q.slotFreeSQL(back, tag, until)
		_, err := q.db().exec(ctx, free, freeArgs...)
		return err
	}
	if q.dialect == SQLite {
		return q.sqliteTx(ctx, func(db querier) error {
			return q.sqliteGive(ctx, db, back, tag, until, gone, now, n)
		})
	}
	b := &pgx.Batch{}
	q.queueGive(b, back, tag, until, gone, now, n)
	br := q.pool.SendBatch(ctx, b)
	err := execN(br, len(b.QueuedQueries))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// sqliteGive is giveBackPlaces in the SQLite transaction db: the deletion under a
// savepoint, so that it failing does not undo the freeing.
func (q *Queue[T]) sqliteGive(ctx context.Context, db querier, back []string, tag int64, until time.Time, gone []string, now time.Time, n int) error {
	if len(back) > 0 {
		free, freeArgs := q.slotFreeSQL(back, tag, until)
		if _, err := db.exec(ctx, free, freeArgs...); err != nil {
			return err
		}
	}
	if len(gone) == 0 {
		return nil
	}
	drop, dropArgs := q.keyDropKeysSQL(gone, now, n)
	if _, err := db.exec(ctx, "SAVEPOINT drop_keys"); err != nil {
		return nil
	}
	if _, err := db.exec(ctx, drop, dropArgs...); err != nil {
		_, _ = db.exec(ctx, "ROLLBACK TO drop_keys")
	}
	_, _ = db.exec(ctx, "RELEASE drop_keys")
	return nil
}

// queueGive (Postgres) queues giveBackPlaces's statements on b, to run in one
// round trip and one implicit transaction with the rest of b (a take, before
// them): a failed delete undoes the freeing too (the places then come free when
// their lease ends), and the take, which a pipeline cannot roll back to a
// savepoint for. execN reads their results.
func (q *Queue[T]) queueGive(b *pgx.Batch, back []string, tag int64, until time.Time, gone []string, now time.Time, n int) {
	if len(back) > 0 {
		free, freeArgs := q.slotFreeSQL(back, tag, until)
		b.Queue(free, freeArgs...)
	}
	if len(gone) > 0 {
		drop, dropArgs := q.keyDropKeysSQL(gone, now, n)
		b.Queue(drop, dropArgs...)
	}
}

// execN reads the results of the next n statements of br, stopping at the first
// that failed.
func execN(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// placeKeySQLite is the key of the place named by the SQL expression name (SQLite:
// the name is "p I KEY").
func placeKeySQLite(name string) string {
	return "substr(" + name + ", instr(substr(" + name + ", 3), ' ') + 3)"
}

// sqliteKeyTakeSQL is keyTakeSQL on SQLite, which has no writes in a WITH: the
// extension of the places held (kept, as sqliteSlotSQL's), then the take of up
// to k free places of the keys cand with ready rows, in cand's order, the i-th
// place of a key only if the key has more than i times per ready rows (got),
// run in one write transaction. The take makes the places it takes that have no
// row yet (an upsert), and no others: a place exists while it is held, or until
// the sweep finds its key idle. It reads the keys in cand's order (a CROSS JOIN
// keeps json_each the outer loop) and stops at the k-th place, rather than
// sorting every place of the walked keys. Its LIMIT is a literal (see
// sqliteKeyedClaimSQL). Both return the names.
func (q *Queue[T]) sqliteKeyTakeSQL(names, cand []string, tag int64, until, deadline, now time.Time, k, n, per int) (kept string, keptArgs []any, got string, gotArgs []any) {
	lt := q.limitsTable()
	pk := col(q.c.Partition)
	held := jsonNames(names)
	keys := jsonNames(cand)
	kept = "UPDATE " + lt + " SET starts = ?1 WHERE name IN (SELECT value FROM json_each(?2)) AND window_start = ?3 AND starts = ?4 RETURNING name"
	place := "'p ' || i.i || ' ' || c.value"
	got = "WITH RECURSIVE i(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM i WHERE i + 1 < ?7)" +
		" INSERT INTO " + lt + " AS l (name, window_start, starts) SELECT " + place + ", ?1, ?2 FROM json_each(?6) AS c CROSS JOIN i" +
		" WHERE " + place + " NOT IN (SELECT value FROM json_each(?4))" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS h WHERE h.name = " + place + " AND h.starts > ?3)" +
		" AND NOT EXISTS (SELECT 1 FROM " + lt + " AS f WHERE f.name = 'fence' AND f.starts > ?3)" +
		" AND EXISTS (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = c.value AND " + q.claimable("?5") + ")" +
		" AND (i.i = 0 OR i.i * " + strconv.Itoa(max(per, 1)) + " < (SELECT count(*) FROM (SELECT 1 FROM " + q.table + " AS r WHERE r." + pk + " = c.value AND " + q.claimable("?5") + " LIMIT " + strconv.Itoa(max(per, 1)*n) + ")))" +
		" LIMIT " + strconv.Itoa(k) + " ON CONFLICT (name) DO UPDATE SET window_start = excluded.window_start, starts = excluded.starts WHERE l.starts <= ?3" +
		" RETURNING name"
	return kept, []any{deadline.UnixMicro(), held, tag, until.UnixMicro()},
		got, []any{tag, deadline.UnixMicro(), now.UnixMicro(), held, q.ts(now), keys, n}
}

// keyTake runs keyTakeSQL, which walks the keys from the lane's cursor cur when
// it takes (k > 0) (on SQLite keyWalkSQL, then sqliteKeyTakeSQL in a
// transaction): the places kept and the places got. cur moves to the last key
// the take is done with: that of the last place got if it got k, else the last
// key walked; more reports that the walk stopped before it went round every key
// (at its window, or after enough keys with ready rows: keyEnough) (a take that
// got fewer than k may find more at once). refused reports an error after which
// nothing changed. per is how many rows a place will hold (keyPer): a key gets
// its i-th place only if it has more than i times per ready rows.
//
// The places back, no more in names, are given back after the take, as
// giveBackPlaces does with the keys gone, in the same transaction (SQLite) or
// round trip and implicit transaction (Postgres): a lane whose keys ran dry
// gives back their places and takes others with one commit, not two. After, not
// before: on Postgres the places freed are locked until the transaction ends,
// and other lanes' takes would pass them over for as long as the take ran.
func (q *Queue[T]) keyTake(ctx context.Context, cur *keyCursor, names, back, gone []string, tag int64, until, deadline, now time.Time, k, n, per int) (kept, got []string, more, refused bool, err error) {
	var walked []string
	w, enough, ready := 0, 0, 0
	var c *string
	if k > 0 {
		w, enough = keyWindow(k, n), keyEnough(k, n)
		if cur.set {
			c = &cur.key
		}
	}
	if q.dialect == SQLite {
		var cand []string
		if k > 0 {
			sql, args := q.keyWalkSQL(c, rand.Float64(), w, enough, now)
			r, err := q.db().query(ctx, sql, args...)
			if err != nil {
				return nil, nil, false, true, err
			}
			for r.Next() {
				var v string
				var rd bool
				if err := r.Scan(&v, &rd); err != nil {
					r.Close()
					return nil, nil, false, true, err
				}
				walked = append(walked, v)
				if rd {
					cand = append(cand, v)
					ready++
				}
			}
			r.Close()
			if err := r.Err(); err != nil {
				return nil, nil, false, true, err
			}
		}
		ks, ka, gs, ga := q.sqliteKeyTakeSQL(names, cand, tag, until, deadline, now, k, n, per)
		err = q.sqliteTx(ctx, func(db querier) error {
			r, err := db.query(ctx, ks, ka...)
			if err != nil {
				return err
			}
			if kept, err = scanNames(r); err != nil {
				return err
			}
			if k > 0 {
				if r, err = db.query(ctx, gs, ga...); err != nil {
					return err
				}
				if got, err = scanNames(r); err != nil {
					return err
				}
			}
			return q.sqliteGive(ctx, db, back, tag, until, gone, now, n)
		})
		refused = true // a transaction that failed was rolled back
	} else {
		sql, args := q.keyTakeSQL(names, c, rand.Float64(), w, enough, tag, until, deadline, now, k, n, per)
		err = func() (err error) {
			// One round trip and transaction; never compiled (JIT): its
			// estimate can cross jit_above_cost, and compiling it took 25 to 45
			// times as long as running it (as with the claim: pgCycle). An
			// aborted batch leaves the connection in a failed transaction, which
			// the pool closes instead of reusing.
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue("SET LOCAL jit = off")
			b.Queue(sql, args...)
			q.queueGive(b, back, tag, until, gone, now, n)
			gives := b.Len() - 3
			b.Queue("COMMIT")
			br := q.pool.SendBatch(ctx, b)
			defer func() {
				if cerr := br.Close(); err == nil {
					err = cerr
				}
			}()
			if err := execN(br, 2); err != nil {
				return err
			}
			r, err := br.Query()
			if err != nil {
				return err
			}
			if err := q.scanTake(r, &kept, &got, &walked, &ready); err != nil {
				return err
			}
			if err := execN(br, gives); err != nil {
				return err
			}
			_, err = br.Exec()
			return err
		}()
		refused = isPgError(err)
	}
	if err != nil || k == 0 {
		return kept, got, false, refused, err
	}
	return kept, got, cur.walkedTo(walked, ready, got, k, w, enough), false, nil
}

// walkedTo moves the cursor to the last key a take of k places is done with,
// whose walk (of window w, stopping after enough keys with ready rows) walked
// the keys walked, ready of them with ready rows, and got the places got: that
// of the last place got if it got k, else the last key walked. It reports
// whether the walk stopped before it went round every key.
func (cur *keyCursor) walkedTo(walked []string, ready int, got []string, k, w, enough int) (more bool) {
	more = len(walked) >= w || ready >= enough
	pos := make(map[string]int, len(walked))
	for i, v := range walked {
		pos[v] = i
	}
	end := len(walked) - 1
	if len(got) >= k {
		end = 0
		for _, name := range got {
			end = max(end, pos[placeKey(name)])
		}
	}
	if end >= 0 {
		cur.key, cur.set = walked[end], true
	}
	return more
}

// takeAlone runs the lane's pending take (keySlots.pending) in a statement of
// its own, as syncKeys does without ride.
func (s *Subscription[T]) takeAlone(l *lane) {
	ks := l.keys
	t := ks.pending
	ks.pending = nil
	kept, got, more, refused, err := s.q.keyTake(s.ctx, &ks.cursor, t.names, t.back, t.gone, t.tag, t.until, t.deadline, t.now, t.k, t.n, t.per)
	s.keysTaken(ks, t.now, t.deadline, t.prev, t.k, t.back, t.gone, kept, got, more, refused, err)
}

// keyTakeReq is a take of places that rides with a claim (syncKeys, keyedWant,
// pgAckClaimSQL): keyTake's arguments, and what the statement read.
type keyTakeReq struct {
	names, back, gone []string // the places held, those to give back, the keys whose places to delete
	cur               *string  // the walk's cursor, nil for none yet
	f                 float64
	tag               int64
	until, deadline   time.Time
	now               time.Time
	w, enough, k, n   int
	prev              keyCursor
	per               int      // rows a place may hold (keyPer with the k places)
	infKeys           []string // the lane's rows held, by key: how many (infNs)
	infNs             []int

	kept, got, walked []string // read from the statement; walked in walk order
	steps             []int    // walked's places in the walk
	ready             int
}

// read notes one of the take's result rows (pgAckClaimSQL's kinds 2 to 5).
func (t *keyTakeReq) read(kind int, name string, n int) {
	switch kind {
	case 2:
		t.kept = append(t.kept, name)
	case 3:
		t.got = append(t.got, name)
	default:
		t.walked, t.steps = append(t.walked, name), append(t.steps, n)
		if kind == 5 {
			t.ready++
		}
	}
}

// took ends the take t that rode with the lane's claim: err is the statement's
// (nil: it committed, and t holds what it read). The claim's keys and numbers
// (keyClaim) become those the statement worked out, for keySlots.claimed.
func (s *Subscription[T]) took(l *lane, t *keyTakeReq, err error) {
	ks := l.keys
	now := t.now
	if err != nil {
		s.keysTaken(ks, now, t.deadline, t.prev, t.k, t.back, t.gone, nil, nil, false, isPgError(err), err)
		return
	}
	idx := make([]int, len(t.walked))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return t.steps[a] - t.steps[b] })
	walked := make([]string, len(idx))
	for i, j := range idx {
		walked[i] = t.walked[j]
	}
	more := ks.cursor.walkedTo(walked, t.ready, t.got, t.k, t.w, t.enough)
	s.keysTaken(ks, now, t.deadline, t.prev, t.k, t.back, t.gone, t.kept, t.got, more, false, nil)
	// The claim took up to per rows a place less the lane's rows of each key
	// held now (the statement's arithmetic, again).
	inf := make(map[string]int, len(t.infKeys))
	for i, k := range t.infKeys {
		inf[k] = t.infNs[i]
	}
	l.kc.keys, l.kc.ns = l.kc.keys[:0], l.kc.ns[:0]
	for k, h := range ks.held {
		l.kc.keys = append(l.kc.keys, k)
		l.kc.ns = append(l.kc.ns, max(len(h)*t.per-inf[k], 0))
	}
}

// scanTake reads the result of keyTakeSQL into kept, got, walked (in walk
// order) and ready (the count of walked keys with ready rows), and closes it.
func (q *Queue[T]) scanTake(r pgx.Rows, kept, got, walked *[]string, ready *int) error {
	defer r.Close()
	type step struct {
		key string
		n   int
	}
	var steps []step
	for r.Next() {
		var name string
		var kind, i int
		if err := r.Scan(&name, &kind, &i); err != nil {
			return err
		}
		switch kind {
		case 0:
			*kept = append(*kept, name)
		case 1:
			*got = append(*got, name)
		default: // 2: a key walked; 3: one with ready rows
			steps = append(steps, step{name, i})
			if kind == 3 {
				*ready++
			}
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return a.n - b.n })
	for _, st := range steps {
		*walked = append(*walked, st.key)
	}
	return r.Err()
}

// scanNames reads a result of one text column and closes it.
func scanNames(r rows) ([]string, error) {
	defer r.Close()
	var out []string
	for r.Next() {
		var name string
		if err := r.Scan(&name); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, r.Err()
}

// sqliteKeyedClaimSQL (SQLite) is leaseClaimSQL with PerPartition: up to limit rows,
// of each of keys up to ns rows (the lane's free places, first in claim order), and
// rows without a key if keyless; taken turn by turn, keys level in turn in a random
// order (by priority first).
//
// Its text depends on the queue and the limits only, not on the keys, which come
// as JSON arrays: SQLite prepares every statement afresh, and one subquery a key
// (a text for each number of keys) made its parse and plan a fifth of the CPU of
// a drain over 2,000 keys. SQLite has no LATERAL, and a LIMIT cannot name a
// column: each key's first ready rows in claim order, as many as the most any key
// may take (one scan of the partition index, stopped there), are gathered in a
// JSON array in claim order (an ORDER BY in the aggregate: SQLite 3.44 and
// later), of which the key takes its first ns. Its LIMITs are literals: a
// LIMIT that is a parameter makes SQLite prepare the statement a second time
// once the parameter is bound (it plans with the value).
//
// When the claim may take every row the keys offer (no rows without a key, no
// Concurrency or Rate, and limit at least the sum of ns), nothing is cut, so
// the order of the turns does not matter: the statement takes the keys' rows
// without ranking them (no sort, no second read of each row for its priority),
// and its text then depends on the largest of ns alone, where the ranked one
// has a text for each limit. That is most claims of a lane whose places bound
// it (keyedWant), and it costs about a seventh less than the ranked one.
func (q *Queue[T]) sqliteKeyedClaimSQL(l Limits, keys []string, ns []int, keyless bool, deadline, now time.Time, limit int) (string, []any) {
	s := &stmt[T]{q: q}
	dl := s.arg(q.ts(deadline))
	n := s.arg(q.ts(now))
	set := append([]string{col(q.c.LockedUntil) + " = " + dl}, q.claimSet(s, n)...)
	id, pk := col(q.c.ID), col(q.c.Partition)
	prio := "0"
	if q.c.Priority != "" {
		prio = "p." + col(q.c.Priority)
	}
	lim := q.limitedBy(s, l, now, n, strconv.Itoa(limit)) // a literal: see above
	where := q.claimable(n) + q.groupReady("r", true)
	most, offered := 0, 0
	for _, v := range ns {
		most, offered = max(most, v), offered+v
	}
	keysA, nsA, mostA := s.arg(jsonNames(keys)), s.arg(jsonInts(ns)), strconv.Itoa(most)
	prioR := "0"
	if q.c.Priority != "" {
		prioR = "r." + col(q.c.Priority)
	}
	// Each key's first ns rows in claim order, with their turn (1 for its first).
	rows := "SELECT j.value AS id, j.key + 1 AS turn FROM json_each(" + keysA + ") AS k" +
		", json_each((SELECT json_group_array(x.id ORDER BY x.pr, x.lu, x.id) FROM (SELECT r." + id + " AS id, " + prioR + " AS pr, r." + col(q.c.LockedUntil) + " AS lu FROM " + q.table + " AS r WHERE r." + pk + " = k.value AND " + where +
		" ORDER BY " + q.order() + " LIMIT " + mostA + ") AS x)) AS j WHERE j.key < json_extract(" + nsA + ", '$[' || k.key || ']')"
	ret := " RETURNING " + id + ", " + q.attemptsCol() + ", " + col(q.c.Payload) + q.metaCols()
	if !keyless && lim == strconv.Itoa(limit) && limit >= offered {
		return "UPDATE " + q.table + " SET " + strings.Join(set, ", ") + " WHERE " + id + " IN (SELECT c.id FROM (" + rows + ") AS c)" + ret, s.args
	}
	keylessA := s.arg(keyless)
	keyed := "SELECT c.id, " + prio + " AS prio, c.turn FROM (" + rows + ") AS c" +
		" JOIN " + q.table + " AS p ON p." + id + " = c.id"
	none := "SELECT id, prio, row_number() OVER () AS turn FROM (SELECT r." + id + " AS id, " + prioR + " AS prio FROM " + q.table + " AS r WHERE " + keylessA + " AND r." + pk + " IS NULL AND " + where +
		" ORDER BY " + q.order() + " LIMIT " + lim + ")"
	sql := "UPDATE " + q.table + " SET " + strings.Join(set, ", ") +
		" WHERE " + id + " IN (SELECT id FROM (" + keyed + " UNION ALL " + none + ") ORDER BY turn, prio, random() LIMIT " + lim + ")" + ret
	return sql, s.args
}

// jsonInts is ns as a JSON array.
func jsonInts(ns []int) string {
	b := make([]byte, 0, 2+4*len(ns))
	b = append(b, '[')
	for i, v := range ns {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return string(append(b, ']'))
}
