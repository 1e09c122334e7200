package inbox

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"
)

// headsRow is a row of a random table state: its group ("" for none), and what
// it is: ready, delayed, in work, a crashed claim (claimed, its lease run out),
// dead, or cancelled.
type headsRow struct {
	group    string
	key      string // partition key, "" for none
	state    int
	priority int
}

const (
	rowReady = iota
	rowDelayed
	rowInWork
	rowCrashed
	rowDead
	rowCancelled
	rowStates
)

// fillHeadsState empties the table and inserts rows, each in its state at now,
// in id order.
func fillHeadsState[T any](ctx context.Context, t testing.TB, q *Queue[T], exec func(string, ...any) error, rows []headsRow, now time.Time) {
	t.Helper()
	if err := exec("DELETE FROM " + q.table); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		lu, claimed, dead, cancelled := q.ts(now.Add(-time.Duration(len(rows)-i)*time.Second)), any(nil), any(nil), any(nil)
		switch r.state {
		case rowDelayed:
			lu = q.ts(now.Add(time.Hour))
		case rowInWork:
			lu, claimed = q.ts(now.Add(time.Minute)), q.ts(now.Add(-time.Second))
		case rowCrashed:
			claimed = q.ts(now.Add(-time.Hour))
		case rowDead:
			lu, dead = q.ts(farFuture()), q.ts(now)
		case rowCancelled:
			cancelled = q.ts(now)
		}
		var grp, key any
		if r.group != "" {
			grp = r.group
		}
		if r.key != "" {
			key = r.key
		}
		if err := exec("INSERT INTO "+q.table+" (payload, priority, locked_until, fifo_group, claimed_at, dead_at, cancelled_at, partition_key) VALUES ("+
			q.p(1)+", "+q.p(2)+", "+q.p(3)+", "+q.p(4)+", "+q.p(5)+", "+q.p(6)+", "+q.p(7)+", "+q.p(8)+")",
			[]byte("{}"), r.priority, lu, grp, claimed, dead, cancelled, key); err != nil {
			t.Fatal(err)
		}
	}
}

// A claim of heads takes the rows a claim in order takes, in the same order,
// whatever the table's state: groups with a head ready, delayed, in work or
// crashed, dead rows before and behind, rows without a group, partition keys,
// priorities, fair or not (with the random order of keys level in turn made the
// id order in both), with Concurrency, a condition of the caller's (extra), a
// lock or not, and any limit. A claim of heads whose census found no ready row
// without a group is compared with claims that take none.
//
// It runs 1,000 checks (about 5 s) unless -rapid.checks asks for a number: a
// fair claim of heads that took the first rows without a group of the whole
// table, rather than each key's, failed within 50-420 checks in 3 runs of 5.
func TestHeadsClaimTakesWhatAClaimInOrderTakes(t *testing.T) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if f := flag.Lookup("rapid.checks"); f != nil && !set {
		old := f.Value.String()
		_ = f.Value.Set("1000")
		defer func() { _ = f.Value.Set(old) }()
	}
	q, exec, query := headsQueue(t)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		groups := rapid.SampledFrom([]string{"", "", "a", "b", "c"})
		keys := rapid.SampledFrom([]string{"", "k1", "k2"})
		n := rapid.IntRange(0, 24).Draw(rt, "rows")
		rows := make([]headsRow, n)
		claimed := map[string]bool{}
		for i := range rows {
			r := headsRow{group: groups.Draw(rt, "group"), key: keys.Draw(rt, "key"), state: rapid.IntRange(0, rowStates-1).Draw(rt, "state"), priority: rapid.IntRange(0, 1).Draw(rt, "priority")}
			if (r.state == rowInWork || r.state == rowCrashed) && r.group != "" {
				if claimed[r.group] {
					r.state = rowReady // one claimed row a group (Postgres's unique index)
				}
				claimed[r.group] = true
			}
			rows[i] = r
		}
		now := time.Now()
		fillHeadsState(ctx, t, q, exec, rows, now)
		limit := rapid.SampledFrom([]int{1, 2, 3, 5, 8, 30}).Draw(rt, "limit") // mostly fewer than the rows ready
		l := Limits{Fair: rapid.Bool().Draw(rt, "fair"), Concurrency: rapid.SampledFrom([]int{0, 2, 5}).Draw(rt, "concurrency")}
		extra := rapid.SampledFrom([]string{"", ` AND "priority" = 0`, ` AND "id" % 3 <> 0`}).Draw(rt, "extra")
		loose := rapid.Bool().Draw(rt, "loose")
		if !loose {
			extra += ` AND "fifo_group" IS NOT NULL`
		}
		skipLocked := rapid.Bool().Draw(rt, "skipLocked")
		pick := func(heads bool) []int64 {
			if heads {
				q.census.force.Store(0)
				st := censusHeads
				if loose {
					st |= censusLoose
				}
				q.census.state.Store(st)
			} else {
				q.census.force.Store(2)
			}
			s := &stmt[struct{}]{q: q}
			text := q.pickSQL(s, l, now, s.now(now), extra, s.arg(limit), skipLocked)
			if strings.Contains(text, headsMark) != heads {
				rt.Fatalf("heads %v: claim text %q", heads, text)
			}
			text = strings.ReplaceAll(text, "random()", `x."id"`)
			ids, err := query(text, s.args...)
			if err != nil {
				rt.Fatalf("heads %v: %v\n%s", heads, err, text)
			}
			if skipLocked && l.fair() {
				slices.Sort(ids) // the lock's wrapper keeps no order
			}
			return ids
		}
		inOrder, heads := pick(false), pick(true)
		if !slices.Equal(inOrder, heads) {
			rt.Fatalf("claim in order took %v, claim of heads %v", inOrder, heads)
		}
	})
}

// headsQueue makes a queue with GroupColumns on a Postgres table of the default
// schema (pgGroupQueue), with functions to run a statement and to read a column
// of ids.
func headsQueue(t *testing.T) (*Queue[struct{}], func(string, ...any) error, func(string, ...any) ([]int64, error)) {
	t.Helper()
	ctx := context.Background()
	q, pool, _ := pgGroupQueue(t, "heads")
	if err := q.checkGroupColumns(ctx); err != nil || !q.headsIndexed.Load() {
		t.Fatalf("check of a table at version %d: %v, indexed for heads %v", SchemaVersion, err, q.headsIndexed.Load())
	}
	return q, func(s string, args ...any) error { _, err := pool.Exec(ctx, s, args...); return err },
		func(s string, args ...any) ([]int64, error) { return pgIDs(ctx, q, pool, s, args) }
}

func pgIDs(ctx context.Context, q *Queue[struct{}], pool *pgxpool.Pool, text string, args []any) ([]int64, error) {
	var ids []int64
	err := q.pgClaimQuery(ctx, pool, text, args, func(r pgx.Rows) (err error) {
		ids, err = pgx.CollectRows(r, pgx.RowTo[int64])
		return err
	})
	return ids, err
}

// The census makes claims read heads while the table has few groups and many
// ready rows a group, and in order otherwise; a claim of heads looks for rows
// without a group when the last census found one ready, and so takes a row
// without a group behind a backlog of groups at the next census at the latest.
func TestGroupCensusChoosesHeadsUnderABacklog(t *testing.T) {
	q, exec, query := headsQueue(t)
	ctx := context.Background()
	census := func() {
		t.Helper()
		q.census.next.Store(0) // due now
		q.groupCensus(ctx, Limits{})
	}
	mode := func(wantHeads, wantLoose bool) {
		t.Helper()
		text, _ := q.candidatesSQL(time.Now(), 10)
		_, loose := q.census.headsOn()
		if heads := strings.Contains(text, headsMark); heads != wantHeads || loose != wantLoose {
			t.Fatalf("claims read heads %v (want %v), look for rows without a group %v (want %v)", heads, wantHeads, loose, wantLoose)
		}
		if wantHeads && strings.Contains(text, `"fifo_group" IS NULL AND "locked_until"`) != wantLoose {
			t.Fatalf("a claim of heads looks for rows without a group: %v, want %v:\n%s", !wantLoose, wantLoose, text)
		}
	}
	insert := func(rows, groups int, offset int) {
		t.Helper()
		values := make([]string, rows)
		for i := range values {
			values[i] = fmt.Sprintf("(%s, 'g%d')", q.p(1), offset+i%groups)
		}
		if err := exec("INSERT INTO "+q.table+" (payload, fifo_group) VALUES "+strings.Join(values, ", "), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	census()
	mode(false, false) // empty

	insert(100*headsRowsPerGroup-1, 100, 0)
	census()
	mode(false, false) // a ready row short of the backlog that pays

	insert(1, 100, 0)
	census()
	mode(true, false)

	// A row without a group, published behind the backlog: the claims of
	// heads do not see it until the next census.
	if err := exec("INSERT INTO "+q.table+" (payload) VALUES ("+q.p(1)+")", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	var loose int64
	if err := func() error {
		ids, err := query("SELECT max(id) FROM " + q.table)
		loose = ids[0]
		return err
	}(); err != nil {
		t.Fatal(err)
	}
	takes := func() bool {
		text, args := q.candidatesSQL(time.Now(), 200)
		ids, err := query(text, args...)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(ids, loose)
	}
	if takes() {
		t.Fatal("a claim of heads took a row without a group before a census found one")
	}
	census()
	mode(true, true)
	if !takes() {
		t.Fatal("a claim of heads after the census did not take the row without a group")
	}

	// A census that fails (here its context is done) makes claims go in order.
	done, cancel := context.WithCancel(ctx)
	cancel()
	q.census.next.Store(0)
	q.groupCensus(done, Limits{})
	mode(false, false)
	census()
	mode(true, true)

	// PerPartition claims take each key's rows in order, and no census.
	q.census.next.Store(0)
	q.groupCensus(ctx, Limits{PerPartition: 2})
	if q.census.next.Load() != 0 {
		t.Fatal("a PerPartition subscription took a census")
	}

	// More groups than a claim of heads reads: the census does not look for
	// rows without a group.
	insert((headsMaxGroups+1)*headsRowsPerGroup, headsMaxGroups+1, 1000)
	census()
	mode(false, false)

	// Without the index of version 6, no census: claims go in order.
	if err := exec(`DROP INDEX "` + strings.Trim(q.table, `"`) + `_group_live"`); err != nil {
		t.Fatal(err)
	}
	if err := q.checkGroupColumns(ctx); err != nil || q.headsIndexed.Load() {
		t.Fatalf("check without the index: %v, indexed for heads %v", err, q.headsIndexed.Load())
	}
}

// A claim of heads that runs beside another claim passes over the rows without a
// group that the other holds, and takes the next ones, as a claim in order does:
// it locks them as it lists them (SKIP LOCKED). Listed without a lock, every
// overlapping claim listed the same first rows, and came back empty when another
// held them.
func TestHeadsClaimBesideAnotherTakesOtherRowsWithoutAGroup(t *testing.T) {
	q, exec, _ := headsQueue(t)
	ctx := context.Background()
	var rows []headsRow
	for _, g := range []string{"a", "b", "c", "d", "e"} {
		rows = append(rows, headsRow{group: g, state: rowInWork}, headsRow{group: g})
	}
	for range 20 {
		rows = append(rows, headsRow{})
	}
	now := time.Now()
	fillHeadsState(ctx, t, q, exec, rows, now)
	pool := q.pool
	for _, heads := range []bool{false, true} {
		q.census.force.Store(2)
		if heads {
			q.census.force.Store(1)
		}
		// The first claim holds its rows, uncommitted.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		text, args := q.rowClaimSQL(now, time.Minute, 5)
		r, err := tx.Query(ctx, text, args...)
		if err != nil {
			t.Fatal(err)
		}
		first := 0
		for r.Next() {
			first++
		}
		r.Close()
		if r.Err() != nil || first != 5 {
			t.Fatalf("heads %v: the first claim took %d rows (%v), want 5", heads, first, r.Err())
		}
		text, args = q.rowClaimSQL(now, time.Minute, 5)
		var second int
		if err := q.pgClaimQuery(ctx, pool, "WITH c AS ("+text+") SELECT count(*) FROM c", args, func(r pgx.Rows) error {
			r.Next()
			return r.Scan(&second)
		}); err != nil {
			t.Fatal(err)
		}
		if second != 5 {
			t.Errorf("heads %v: a claim beside the first took %d rows, want the next 5 without a group", heads, second)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		fillHeadsState(ctx, t, q, exec, rows, now)
	}
}
