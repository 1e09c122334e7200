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
// 60,000 jobs in 100 groups a Postgres drain ran at 2,000-2,500 jobs/s, a tenth
// of its rate at 10,000. A claim of heads reads the group index instead, one
// probe a group, and tests only each group's head: its cost follows the number
// of groups, not the backlog.
//
// Which of the two a claim makes is decided by a census of the table, taken by
// the queue's claims at most once per censusEvery: a claim of heads while the
// table has at most headsMaxGroups groups with live rows and at least
// headsRowsPerGroup ready rows a group (under that backlog a claim in order is
// as cheap).

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
	// headsCTE names the heads in a claim's text (pgGroupClaimSettings reads it).
	headsCTE = "inbox_heads"
)

// groupCensus is a queue's last census of its table's groups.
type groupCensus struct {
	next  atomic.Int64 // when the next census is due, in Unix nanoseconds
	heads atomic.Bool  // claims read heads
	loose atomic.Bool  // a claim of heads also looks for rows without a group
	force atomic.Int32 // tests: 0 as the census says, 1 heads (looking for rows without a group), 2 in order
}

// headsOn reports whether claims read heads.
func (c *groupCensus) headsOn() bool {
	switch c.force.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	return c.heads.Load()
}

// looseOn reports whether a claim of heads looks for rows without a group.
func (c *groupCensus) looseOn() bool { return c.force.Load() == 1 || c.loose.Load() }

// groupCensus takes the table's census if one is due (at most one claim at a
// time takes it; the others go on with the last). A census that fails keeps the
// last and is logged at WARN; the claim that took it goes on: a claim in either
// form takes the same rows.
func (q *Queue[T]) groupCensus(ctx context.Context) {
	if q.c.Group == "" || q.census.force.Load() != 0 {
		return
	}
	now := time.Now()
	due := q.census.next.Load()
	if now.UnixNano() < due || !q.census.next.CompareAndSwap(due, now.Add(censusEvery).UnixNano()) {
		return
	}
	groups, ready, loose, err := q.takeCensus(ctx, q.now())
	if err != nil {
		if ctx.Err() == nil {
			q.log.Warn("inbox: census of FIFO groups failed; claims go on as before", "table", q.name, "err", err)
		}
		return
	}
	q.census.heads.Store(groups <= headsMaxGroups && ready >= headsRowsPerGroup*max(groups, 1))
	q.census.loose.Store(loose)
}

// takeCensus counts the groups with live rows (up to headsMaxGroups+1) and the
// ready rows (up to headsRowsPerGroup times that), and reports whether a row
// without a group is ready. The groups are counted by a walk of the group index,
// one probe a group; a table with no ready row without a group is read whole to
// tell, once a census.
func (q *Queue[T]) takeCensus(ctx context.Context, at time.Time) (groups, ready int, loose bool, err error) {
	s := &stmt[T]{q: q}
	n := s.now(at)
	capG := s.arg(headsMaxGroups + 1)
	capR := s.arg(headsRowsPerGroup * (headsMaxGroups + 1))
	g := col(q.c.Group)
	next := func(after string) string {
		return "SELECT h." + g + " FROM " + q.table + " AS h WHERE " + after + " AND " + q.live("h") + " ORDER BY h." + g + " LIMIT 1"
	}
	var walk string
	if q.dialect == Postgres {
		walk = "WITH RECURSIVE w(g) AS ((" + next("h."+g+" IS NOT NULL") + ") UNION ALL SELECT x." + g + " FROM w CROSS JOIN LATERAL (" + next("h."+g+" > w.g") + ") AS x)" +
			" SELECT 1 FROM w LIMIT " + capG
	} else {
		// The walk ends with a NULL (the probe past the last group), counted out.
		walk = "WITH RECURSIVE w(g) AS (SELECT (" + next("h."+g+" IS NOT NULL") + ") UNION ALL SELECT (" + next("h."+g+" > w.g") + ") FROM w WHERE w.g IS NOT NULL LIMIT " + capG + ")" +
			" SELECT 1 FROM w WHERE g IS NOT NULL"
	}
	text := "SELECT (SELECT count(*) FROM (" + walk + ") AS c)," +
		" (SELECT count(*) FROM (SELECT 1 FROM " + q.table + " WHERE " + q.claimable(n) + " LIMIT " + capR + ") AS b)," +
		" EXISTS (SELECT 1 FROM " + q.table + " WHERE " + g + " IS NULL AND " + q.claimable(n) + ")"
	var row interface{ Scan(...any) error }
	if q.dialect == Postgres {
		row = q.pool.QueryRow(ctx, text, s.args...)
	} else {
		row = q.sqldb.QueryRowContext(ctx, text, s.args...)
	}
	var gs, rs int64
	var l any
	if err := row.Scan(&gs, &rs, &l); err != nil {
		return 0, 0, false, err
	}
	switch v := l.(type) {
	case bool:
		loose = v
	case int64:
		loose = v != 0
	}
	return int(gs), int(rs), loose, nil
}

// headsIn is the SQL of a row r whose id is among the candidates of a claim of
// heads of up to limit rows: each group's first live row (a walk of the group
// index, one probe a group), the groups' claimed rows (one crashed claim is taken
// again first, even behind a row made live again since), and, when a census
// found one ready, the first limit ready rows without a group that satisfy extra
// (as in pickSQL). The
// claim then tests each candidate as a claim in order would (claimable,
// groupReady), and takes them in claim order: it takes the rows a claim in order
// takes.
func (q *Queue[T]) headsIn(r, now, extra, limit string) string {
	g, id, ca := col(q.c.Group), col(q.c.ID), col(q.c.ClaimedAt)
	first := func(after string) string {
		return "SELECT h." + g + ", h." + id + " FROM " + q.table + " AS h WHERE " + after + " AND " + q.live("h") + " ORDER BY h." + g + ", h." + id + " LIMIT 1"
	}
	claimed := " UNION ALL SELECT h." + id + " FROM " + q.table + " AS h WHERE h." + g + " IS NOT NULL AND h." + ca + " IS NOT NULL AND " + q.live("h")
	loose := ""
	if q.census.looseOn() {
		loose = " UNION ALL SELECT id FROM (SELECT " + id + " AS id FROM " + q.table + " WHERE " + g + " IS NULL AND " + q.claimable(now) + extra + " ORDER BY " + q.order() + " LIMIT " + limit + ") AS l"
	}
	if q.dialect == Postgres {
		// An array: the planner then reads the candidates by id, where with IN it
		// read every ready row and joined.
		return r + "." + id + " = ANY(ARRAY(WITH RECURSIVE " + headsCTE + "(g, id) AS ((" + first("h."+g+" IS NOT NULL") + ")" +
			" UNION ALL SELECT x." + g + ", x." + id + " FROM " + headsCTE + " CROSS JOIN LATERAL (" + first("h."+g+" > "+headsCTE+".g") + ") AS x)" +
			" SELECT id FROM " + headsCTE + claimed + loose + "))"
	}
	// SQLite has no LATERAL: each step finds the next group's head by id, and
	// reads its group from that row.
	firstID := func(after string) string {
		return "SELECT h." + id + " FROM " + q.table + " AS h WHERE " + after + " AND " + q.live("h") + " ORDER BY h." + g + ", h." + id + " LIMIT 1"
	}
	return r + "." + id + " IN (WITH RECURSIVE " + headsCTE + "(id) AS (SELECT (" + firstID("h."+g+" IS NOT NULL") + ")" +
		" UNION ALL SELECT (" + firstID("h."+g+" > (SELECT p."+g+" FROM "+q.table+" AS p WHERE p."+id+" = "+headsCTE+".id)") + ") FROM " + headsCTE + " WHERE " + headsCTE + ".id IS NOT NULL)" +
		" SELECT id FROM " + headsCTE + " WHERE id IS NOT NULL" + claimed + loose + ")"
}
