package inbox

import (
	"context"
	"sync/atomic"
	"time"
)

// A claim of a queue with FIFO groups reads the claim index in order and tests
// each row it passes (groupReady). Under a backlog most rows wait behind their
// group's head, and a claim that finds fewer heads than it asks for, or that
// runs beside another instance's claim of the same heads (locked, not yet
// committed: the rows behind them look free), tests thousands of them: at
// 60,000 jobs in 100 groups a Postgres drain ran at 2,000-12,000 jobs/s, a
// fraction of its rate at 10,000. A claim of heads walks the index of the
// groups' live rows (schema version 6) instead, one probe a group, and tests
// only each group's head: its cost follows the number of groups, not the
// backlog. It takes the rows a claim in order takes (a fair claim: the rows a
// fair claim in order could take, keys level in turn going in a random order),
// but for rows without a group, which it looks for only when the last census
// found one ready (up to censusEvery late).
//
// Which of the two a claim makes is decided by a census of the table, taken by
// the queue's claims at most once per censusEvery: a claim of heads while the
// table has at most headsMaxGroups groups with live rows and at least
// headsRowsPerGroup ready rows a group (with fewer, a claim in order is as
// cheap).
//
// On Postgres only. SQLite serialises its claims, so none runs beside another,
// and there a claim of heads made a drain of 60,000 jobs in 100 groups slower
// (0.84x of claims in order, sitting AM): each step of its walk reads the next
// group's row twice (SQLite has no LATERAL) and each row it passes in the group
// index once more, to tell whether it is finished.

const (
	// headsMaxGroups is the most groups with live rows for which claims read
	// heads: each claim reads every group's head.
	headsMaxGroups = 512
	// headsRowsPerGroup is the fewest ready rows a group, on average, for which
	// claims read heads.
	headsRowsPerGroup = 16
	// censusEvery is how often a queue takes its census: how late a claim of
	// heads sees the first ready row without a group (see headsIn).
	censusEvery = time.Second
	// headsCTE names the heads in a claim's text. headsMark, which
	// pgGroupClaimSettings looks for, cannot come from a table's or column's name
	// (plain identifiers: isIdent).
	headsCTE  = "inbox_heads"
	headsMark = "WITH RECURSIVE " + headsCTE + "(g, id)"
)

// groupCensus is a queue's last census of its table's groups.
type groupCensus struct {
	next  atomic.Int64 // when the next census is due, in Unix nanoseconds
	state atomic.Int32 // censusHeads, censusLoose: one value, so that a claim reads both of one census
	force atomic.Int32 // tests: 0 as the census says, 1 heads (looking for rows without a group), 2 in order
}

const (
	censusHeads int32 = 1 << iota // claims read heads
	censusLoose                   // a claim of heads also looks for rows without a group
)

// headsOn reports whether claims read heads, and whether a claim of heads looks
// for rows without a group.
func (c *groupCensus) headsOn() (heads, loose bool) {
	switch c.force.Load() {
	case 1:
		return true, true
	case 2:
		return false, false
	}
	st := c.state.Load()
	return st&censusHeads != 0, st&censusLoose != 0
}

// groupCensus takes the table's census if one is due and claims under l may read
// heads (l has no PerPartition, whose claims take each key's rows in order), on
// Postgres, on a table with the group index of schema version 6 (headsIndexed).
// One claim takes it while the others go on with the last (a census slower than
// censusEvery may overlap the next, and the later to end is kept). A census that
// fails makes claims go in order, which take every row, until one succeeds, and
// is logged at WARN; the claim that took it goes on.
func (q *Queue[T]) groupCensus(ctx context.Context, l Limits) {
	if q.c.Group == "" || q.dialect != Postgres || l.PerPartition > 0 || !q.headsIndexed.Load() || q.census.force.Load() != 0 {
		return
	}
	now := time.Now()
	due := q.census.next.Load()
	if now.UnixNano() < due || !q.census.next.CompareAndSwap(due, now.Add(censusEvery).UnixNano()) {
		return
	}
	heads, loose, err := q.takeCensus(ctx, q.now())
	if err != nil {
		q.census.state.Store(0)
		if ctx.Err() == nil {
			q.log.Warn("inbox: census of FIFO groups failed; claims read the claim index in order", "table", q.name, "err", err)
		}
		return
	}
	var st int32
	if heads {
		st |= censusHeads
	}
	if loose {
		st |= censusLoose
	}
	q.census.state.Store(st)
}

// takeCensus (Postgres) reports whether claims should read heads: whether the
// table has at most headsMaxGroups groups with live rows (counted by a walk of
// the group index of version 6, one probe a group) and at least
// headsRowsPerGroup ready rows a group (counted in the claim index, up to that
// many); and if so, whether a row without a group is ready, which reads the
// table until it finds one (all of it when there is none, once a census).
func (q *Queue[T]) takeCensus(ctx context.Context, at time.Time) (heads, loose bool, err error) {
	s := &stmt[T]{q: q}
	n := s.now(at)
	capG := s.arg(headsMaxGroups + 1)
	capR := s.arg(headsRowsPerGroup * (headsMaxGroups + 1))
	g := col(q.c.Group)
	next := func(after string) string {
		return "SELECT h." + g + " FROM " + q.table + " AS h WHERE " + after + " AND " + q.live("h") + " ORDER BY h." + g + " LIMIT 1"
	}
	walk := "WITH RECURSIVE w(g) AS ((" + next("h."+g+" IS NOT NULL") + ") UNION ALL SELECT x." + g + " FROM w CROSS JOIN LATERAL (" + next("h."+g+" > w.g") + ") AS x)" +
		" SELECT 1 FROM w LIMIT " + capG
	counts := "SELECT (SELECT count(*) FROM (" + walk + ") AS c) AS groups," +
		" (SELECT count(*) FROM (SELECT 1 FROM " + q.table + " WHERE " + q.claimable(n) + " LIMIT " + capR + ") AS b) AS ready"
	pays := "k.groups <= " + s.arg(headsMaxGroups) + " AND k.ready >= " + s.arg(headsRowsPerGroup) + " * greatest(k.groups, 1)"
	text := "SELECT " + pays + ", CASE WHEN " + pays + " THEN EXISTS (SELECT 1 FROM " + q.table + " WHERE " + g + " IS NULL AND " + q.claimable(n) + ") ELSE false END FROM (" + counts + ") AS k"
	err = q.pool.QueryRow(ctx, text, s.args...).Scan(&heads, &loose)
	return heads, loose, err
}

// headsIn is the SQL (Postgres) of a row r whose id is among the candidates of
// a claim of heads of up to limit rows: each group's first live row (a walk of
// the group index, one probe a group), the groups' claimed rows (one crashed
// claim is taken again first, even behind a row made live again since), and,
// when a census found one ready, the first limit ready rows without a group that
// satisfy extra (as in pickSQL). The claim then tests each candidate as a claim
// in order would (claimable, groupReady), and takes them in claim order: it
// takes the rows a claim in order takes.
func (q *Queue[T]) headsIn(r, now, extra, limit string, loose, skipLocked bool) string {
	g, id, ca := col(q.c.Group), col(q.c.ID), col(q.c.ClaimedAt)
	first := func(after string) string {
		return "SELECT h." + g + ", h." + id + " FROM " + q.table + " AS h WHERE " + after + " AND " + q.live("h") + " ORDER BY h." + g + ", h." + id + " LIMIT 1"
	}
	claimed := " UNION ALL SELECT h." + id + " FROM " + q.table + " AS h WHERE h." + g + " IS NOT NULL AND h." + ca + " IS NOT NULL AND " + q.live("h")
	without := ""
	if loose {
		// Locked as the claim locks (SKIP LOCKED): rows another claim holds are
		// passed over for the next ones, as a claim in order passes them. Rows
		// locked here that the claim does not take are free again at its commit.
		lock := ""
		if skipLocked {
			lock = " FOR UPDATE SKIP LOCKED"
		}
		without = " UNION ALL SELECT id FROM (SELECT " + id + " AS id FROM " + q.table + " WHERE " + g + " IS NULL AND " + q.claimable(now) + extra + " ORDER BY " + q.order() + " LIMIT " + limit + lock + ") AS l"
	}
	// An array: the planner then reads the candidates by id, where with IN it
	// read every ready row and joined.
	return r + "." + id + " = ANY(ARRAY(" + headsMark + " AS ((" + first("h."+g+" IS NOT NULL") + ")" +
		" UNION ALL SELECT x." + g + ", x." + id + " FROM " + headsCTE + " CROSS JOIN LATERAL (" + first("h."+g+" > "+headsCTE+".g") + ") AS x)" +
		" SELECT id FROM " + headsCTE + claimed + without + "))"
}
