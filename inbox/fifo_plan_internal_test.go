package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A claim of a queue with FIFO groups costs the same whatever the backlog: it
// reads the claim index in order and probes each row it passes twice, through
// indexes, not its whole group. These tests read the plans, as the cost they
// guard against (a claim that reads every ready row, or every row of a group,
// for each row it passes) shows in the plan and not reliably in a test's time.

// fifoBacklog is the backlog the plan tests claim from: rows in 100 groups,
// published round-robin, of which the first claim puts 16 groups in work.
const fifoBacklog = 20000

// On SQLite the probe for a group's claimed row uses the index of version 5
// (_group_work), and the probe for a live row before the candidate reads the
// group's index backwards from it.
func TestSQLiteGroupClaimProbesThroughIndexes(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "fifo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Migrate(ctx, db, "fifo"); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	q, err := NewSQLite(db, Config[struct{}]{Table: "fifo", Columns: GroupColumns(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.checkGroupColumns(ctx); err != nil || !q.groupIndexed.Load() || logs.Len() > 0 {
		t.Fatalf("check of a table at version 5: %v, indexed %v, logged %q", err, q.groupIndexed.Load(), logs.String())
	}
	if _, err := db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?1)
INSERT INTO fifo (payload, fifo_group) SELECT x'7b7d', 'g' || (i % 100) FROM s`, fifoBacklog); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	text, args := q.leaseClaimSQL(Limits{}, now.Add(time.Minute), now, 16)
	if _, err := db.ExecContext(ctx, text, args...); err != nil {
		t.Fatal(err)
	}
	text, args = q.leaseClaimSQL(Limits{}, now.Add(time.Minute), now, 40)
	r, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+text, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var plan []string
	for r.Next() {
		var id, parent, unused int
		var detail string
		if err := r.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan, "\n")
	for _, want := range []string{"SCAN r USING INDEX fifo_claim", "SEARCH h USING INDEX fifo_group_work (fifo_group>?)", "SEARCH h USING INDEX fifo_group_work (fifo_group=?)", "SEARCH h USING INDEX fifo_group (fifo_group=? AND id<?)"} {
		if !strings.Contains(all, want) {
			t.Errorf("the claim's plan lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "fifo_group (fifo_group=?)\n") || strings.HasSuffix(all, "fifo_group (fifo_group=?)") {
		t.Errorf("a probe reads a whole group:\n%s", all)
	}

	// Without the index (a table not migrated to version 5), Start warns and
	// claims go without the set of groups in work, which they would read from
	// the whole group index.
	if _, err := db.ExecContext(ctx, `DROP INDEX fifo_group_work`); err != nil {
		t.Fatal(err)
	}
	if err := q.checkGroupColumns(ctx); err != nil || q.groupIndexed.Load() || !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "run Migrate") {
		t.Fatalf("check of a table without the index: %v, indexed %v, logged %q", err, q.groupIndexed.Load(), logs.String())
	}
	if text, _ := q.leaseClaimSQL(Limits{}, now.Add(time.Minute), now, 40); strings.Contains(text, "NOT IN") {
		t.Errorf("the claim reads the set of groups in work without an index for it:\n%s", text)
	}
}

// On Postgres the claim runs under pgGroupClaimSettings: it reads the claim
// index in order, with no sort and no JIT, on a table whose statistics are not
// yet gathered (where the planner had chosen to test every ready row and sort
// them) and once they are (where it had compiled every run).
func TestPostgresGroupClaimReadsTheClaimIndexInOrder(t *testing.T) {
	q, pool, table := pgGroupQueue(t, "fifo_plan")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`" (payload, fifo_group) SELECT '\x7b7d', 'g' || (i % 100) FROM generate_series(0, $1 - 1) AS i`, fifoBacklog); err != nil {
		t.Fatal(err)
	}
	claimPlans(t, q, pool, table, func(analyzed bool, all string) {
		if !strings.Contains(all, "Index Scan using "+table+"_claim on "+table+" r") {
			t.Errorf("analyzed %v: the claim does not read the claim index:\n%s", analyzed, all)
		}
		for _, bad := range []string{"Sort", "Bitmap Heap Scan on " + table + " r", "JIT:"} {
			if strings.Contains(all, bad) {
				t.Errorf("analyzed %v: the claim's plan has %q:\n%s", analyzed, bad, all)
			}
		}
	})
}

// On Postgres a cycle that acks the head of a group claims the group's next
// job in the same round trip: the acks run in a statement of their own before
// the claim, which sees them. As one statement, the claim read the rows as they
// were before its acks, found the group still in work, and came back short:
// such a claim reads the whole claim index, and the lane had to claim again.
func TestPostgresGroupAckThenClaimSeesTheAck(t *testing.T) {
	q, _, _ := pgGroupQueue(t, "fifo_ack")
	ctx := context.Background()
	for range 2 {
		if _, err := q.Publish(ctx, struct{}{}, &PublishOpts{Group: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := q.Subscribe(func(context.Context, Job[struct{}]) error { return nil }, SubscribeOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := &lane{n: 1, work: 1, max: 1}
	cycle := func(batch []settlement) []*leased {
		t.Helper()
		now := time.Now()
		deadline := trunc(now.Add(time.Minute)) // as cycle does
		var got []*leased
		if err := s.pgCycle(ctx, l, batch, 1, now, deadline, &got, map[int64]bool{}, false); err != nil {
			t.Fatal(err)
		}
		for _, j := range got {
			j.fence = deadline
		}
		return got
	}
	head := cycle(nil)
	if len(head) != 1 {
		t.Fatalf("first claim took %d rows, want the group's head", len(head))
	}
	next := cycle([]settlement{{j: head[0], d: decision{out: Acked}}})
	if len(next) != 1 || next[0].id == head[0].id {
		t.Fatalf("the cycle that acked the head (id %d) claimed %v: want the group's next job", head[0].id, next)
	}
	if !l.sawAcks || s.claimBlind(l, []settlement{{j: head[0], d: decision{out: Acked}}}) {
		t.Errorf("the lane takes its claim for blind to its acks (sawAcks %v)", l.sawAcks)
	}
}

// pgGroupQueue makes a table of the default schema on POSTGRES_TEST_URL (named
// from prefix, dropped with its side tables at cleanup) and a queue of it with
// GroupColumns, or skips the test without a Postgres.
func pgGroupQueue(t *testing.T, prefix string) (*Queue[struct{}], *pgxpool.Pool, string) {
	t.Helper()
	url := os.Getenv("POSTGRES_TEST_URL")
	if url == "" {
		t.Skip("POSTGRES_TEST_URL not set")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the tables' drop, registered later
	table := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano())
	if _, err := Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range []string{"", "_limits", "_periodic"} {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+s+`"`)
		}
	})
	q, err := NewPostgres(pool, Config[struct{}]{Table: table, Columns: GroupColumns(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return q, pool, table
}

// A claim of heads reads each group's head through the index of the groups'
// live rows (version 6), which holds no dead letter, and its candidates by id,
// on Postgres without a scan of the table or a bitmap (whose reads of an index
// pass no entry of a row gone), on a table analysed or not.
func TestPostgresHeadsClaimReadsTheGroupIndex(t *testing.T) {
	q, pool, table := pgGroupQueue(t, "fifo_heads")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`" (payload, fifo_group) SELECT '\x7b7d', 'g' || (i % 100) FROM generate_series(0, $1 - 1) AS i`, fifoBacklog); err != nil {
		t.Fatal(err)
	}
	// Dead letters of groups long done, ahead of and among the live ones in the
	// group order: the group index of version 4 holds them.
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`" (payload, fifo_group, locked_until, dead_at) SELECT '\x7b7d', 'd' || (i % 2000), '9999-01-01 00:00:00+00', now() FROM generate_series(0, $1 - 1) AS i`, fifoBacklog); err != nil {
		t.Fatal(err)
	}
	q.census.force.Store(1)
	claimPlans(t, q, pool, table, func(analyzed bool, all string) {
		for _, want := range []string{"Index Only Scan using " + table + "_group_live on " + table, "Index Cond: (id = ANY ("} {
			if !strings.Contains(all, want) {
				t.Errorf("analyzed %v: the claim's plan lacks %q:\n%s", analyzed, want, all)
			}
		}
		for _, bad := range []string{"Seq Scan", "Bitmap", "JIT:", "Index Scan using " + table + "_claim on " + table + " r", "_group on " + table} {
			if strings.Contains(all, bad) {
				t.Errorf("analyzed %v: the claim's plan has %q:\n%s", analyzed, bad, all)
			}
		}
	})
}

// claimPlans claims 16 rows of q's table (16 groups in work),
// then runs check on the plan of a claim of 40 (EXPLAIN ANALYZE, which runs it:
// its transaction commits the claim, on a table that only the test claims
// from), before the table's statistics are gathered and after.
func claimPlans(t *testing.T, q *Queue[struct{}], pool *pgxpool.Pool, table string, check func(analyzed bool, plan string)) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	text, args := q.pgAckClaimSQL(Limits{}, []int64{}, []time.Time{}, now.Add(time.Minute), now, 16, nil)
	if err := q.pgClaimQuery(ctx, pool, text, args, func(pgx.Rows) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := pool.Exec(ctx, `ANALYZE "`+table+`"`); err != nil {
				t.Fatal(err)
			}
		}
		text, args = q.pgAckClaimSQL(Limits{}, []int64{}, []time.Time{}, now.Add(time.Minute), now, 40, nil)
		var plan []string
		if err := q.pgClaimQuery(ctx, pool, "EXPLAIN (ANALYZE) "+text, args, func(r pgx.Rows) error {
			for r.Next() {
				var line string
				if err := r.Scan(&line); err != nil {
					return err
				}
				plan = append(plan, line)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		check(analyzed, strings.Join(plan, "\n"))
	}
}
