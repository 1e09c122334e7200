package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// BenchmarkDrainGroups times two instances (two Queues on pools of their own)
// draining a table of the default schema, each subscription with Workers workers:
//
//   - plain and fifo100: 8 workers each; a queue with DefaultColumns and jobs in
//     no group, or a queue with GroupColumns and the jobs spread round-robin
//     over 100 FIFO groups (published in that order, as interleaved producers
//     would). fifo2k: the same over 2,000 groups (more than a claim of heads
//     reads: claims read the claim index in order). fifo100fair and fifo100pp:
//     the 100 groups with the jobs also round-robin over 20 partition keys,
//     with Limits{Fair: true} or Limits{PerPartition: 2}.
//   - nolimit and limit40: 32 workers each (64 in all); no limit, or
//     Limits{Concurrency: 40} across both instances.
//   - perpart2, perpart2limit40 and rate: 32 workers each; the jobs spread
//     round-robin over 20 partition keys (a queue with GroupColumns less the
//     Group column), with Limits{PerPartition: 2} (40 in work at most in all),
//     that and Concurrency: 40, or a Rate of 10,000,000 per second (which does
//     not bind: the cost of counting starts). nolimit20 is that queue and those
//     keys with no limit.
//   - nolimit2k and perpart2k: the same over 2,000 keys, with no limit or
//     Limits{PerPartition: 2} (tenants by the thousand).
//
// One op is one drain of the whole table; jobs/s is reported. Publishing and Start
// are outside the timer. INBOX_BENCH_JOBS sets the jobs a drain (default 4,000),
// INBOX_BENCH_CLAIMERS each subscription's Claimers (default DefaultClaimers).
func BenchmarkDrainGroups(b *testing.B) {
	cases := []struct {
		name    string
		groups  int // 0: a queue with DefaultColumns; else GroupColumns
		workers int
		limits  inbox.Limits
		keys    int // partition keys: a queue with GroupColumns less Group
	}{
		{"plain", 0, 8, inbox.Limits{}, 0},
		{"fifo100", 100, 8, inbox.Limits{}, 0},
		{"fifo2k", 2000, 8, inbox.Limits{}, 0},
		{"fifo100pp", 100, 8, inbox.Limits{PerPartition: 2}, 20},
		{"fifo100fair", 100, 8, inbox.Limits{Fair: true}, 20},
		{"nolimit", 0, 32, inbox.Limits{}, 0},
		{"limit40", 0, 32, inbox.Limits{Concurrency: 40}, 0},
		{"nolimit20", 0, 32, inbox.Limits{}, 20},
		{"perpart2", 0, 32, inbox.Limits{PerPartition: 2}, 20},
		{"perpart2limit40", 0, 32, inbox.Limits{PerPartition: 2, Concurrency: 40}, 20},
		{"rate", 0, 32, inbox.Limits{Rate: 10_000_000, Per: time.Second}, 20},
		{"nolimit2k", 0, 32, inbox.Limits{}, 2000},
		{"perpart2k", 0, 32, inbox.Limits{PerPartition: 2}, 2000},
	}
	columns := func(groups, keys int) inbox.Columns {
		switch {
		case keys > 0 && groups > 0:
			return inbox.GroupColumns()
		case keys > 0:
			c := inbox.GroupColumns()
			c.Group = ""
			return c
		case groups > 0:
			return inbox.GroupColumns()
		}
		return inbox.DefaultColumns()
	}
	for _, c := range cases {
		b.Run("sqlite/"+c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "bench.db")
			open := func(cols inbox.Columns) (*inbox.Queue[msg], any) {
				db, err := inbox.OpenSQLite(context.Background(), path)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				q, err := inbox.NewSQLite(db, inbox.Config[msg]{Table: "drain", Columns: cols, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				return q, db
			}
			benchGroups(b, open, columns(c.groups, c.keys), c.groups, c.keys, c.workers, c.limits, benchJobs(4000))
		})
	}
	for _, c := range cases {
		b.Run("postgres/"+c.name, func(b *testing.B) {
			url := pgURL(b)
			table := fmt.Sprintf("bench_groups_%d_%d", os.Getpid(), benchSeq.Add(1))
			open := func(cols inbox.Columns) (*inbox.Queue[msg], any) {
				cfg, err := pgxpool.ParseConfig(url)
				if err != nil {
					b.Fatal(err)
				}
				cfg.MaxConns = 10
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pool.Close)
				q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: table, Columns: cols, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				return q, pool
			}
			b.Cleanup(func() {
				pool, err := pgxpool.New(context.Background(), url)
				if err == nil {
					_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`"`)
					_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`_periodic"`)
					_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`_limits"`)
					pool.Close()
				}
			})
			benchGroups(b, open, columns(c.groups, c.keys), c.groups, c.keys, c.workers, c.limits, benchJobs(4000))
		})
	}
}

// fillGroups inserts jobs rows with plain SQL, job i in group i % groups (none if
// groups is 0) and partition key i % keys (none if keys is 0), in one statement.
func fillGroups(b *testing.B, q *inbox.Queue[msg], db any, jobs, groups, keys int) {
	grp, key := "NULL", "NULL"
	if groups > 0 {
		grp = fmt.Sprintf("'g' || (i %% %d)", groups)
	}
	if keys > 0 {
		key = fmt.Sprintf("'k' || (i %% %d)", keys)
	}
	ctx := context.Background()
	var err error
	switch db := db.(type) {
	case *sql.DB:
		_, err = db.ExecContext(ctx, `WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?1)
INSERT INTO "`+q.Table()+`" (payload, fifo_group, partition_key) SELECT CAST('{"n":' || i || '}' AS BLOB), `+grp+`, `+key+` FROM s`, jobs)
	case *pgxpool.Pool:
		_, err = db.Exec(ctx, `INSERT INTO "`+q.Table()+`" (payload, fifo_group, partition_key)
SELECT convert_to('{"n":' || i || '}', 'UTF8'), `+grp+`, `+key+` FROM generate_series(0, $1 - 1) AS i`, jobs)
	}
	if err != nil {
		b.Fatal(err)
	}
}

func benchGroups(b *testing.B, open func(inbox.Columns) (*inbox.Queue[msg], any), cols inbox.Columns, groups, keys, workers int, limits inbox.Limits, jobs int) {
	ctx := context.Background()
	q0, db := open(cols)
	q1, _ := open(cols)
	qs := []*inbox.Queue[msg]{q0, q1}
	mk := q0
	if keys > 0 {
		mk, _ = open(inbox.GroupColumns()) // CreateTable makes the default schemas only
	}
	if err := mk.CreateTable(ctx); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		fillGroups(b, qs[0], db, jobs, groups, keys)
		var settled, bad atomic.Int64
		all := make(chan struct{})
		var subs []*inbox.Subscription[msg]
		for _, q := range qs {
			sub, err := q.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{
				Workers: workers, Limits: limits, Claimers: benchEnvInt("INBOX_BENCH_CLAIMERS"),
				Observe: func(r inbox.Result) {
					if r.Outcome != inbox.Acked || r.SettleErr != nil {
						bad.Add(1)
					}
					if settled.Add(1) == int64(jobs) {
						close(all)
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			subs = append(subs, sub)
		}
		// The clock starts before the first Start: the first subscription
		// drains while the second starts (its Start waits for the write lock on
		// SQLite), and a drain timed from after both once counted 10,000 jobs
		// done in 38 ms.
		t0 := time.Now()
		b.StartTimer()
		for _, sub := range subs {
			if err := sub.Start(ctx); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-all:
		case <-time.After(2 * time.Minute):
			b.Fatalf("drain: %d of %d jobs settled after 2 min", settled.Load(), jobs)
		}
		b.StopTimer()
		elapsed += time.Since(t0)
		for _, sub := range subs {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := sub.Stop(sctx)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		if n := bad.Load(); n > 0 {
			b.Fatalf("%d settlements were not clean acks", n)
		}
	}
	b.ReportMetric(float64(jobs)*float64(b.N)/elapsed.Seconds(), "jobs/s")
}
