package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// BenchmarkDrainBatchLimits times two instances (two Queues on pools of their own)
// draining a table of the default schema with batch subscriptions (batches of 16,
// 4 workers each: 128 jobs in work at most in all), with no limit (nolimit) or
// Limits{Concurrency: 40} across both instances (limit40). One op is one drain of
// the whole table; jobs/s is reported. Publishing and Start are outside the timer.
//
// It uses the package's exported API and the helpers of groups_bench_test.go
// (fillGroups), so that a sitting can lay it over an older tree.
func BenchmarkDrainBatchLimits(b *testing.B) {
	cases := []struct {
		name   string
		limits inbox.Limits
	}{
		{"nolimit", inbox.Limits{}},
		{"limit40", inbox.Limits{Concurrency: 40}},
	}
	for _, c := range cases {
		b.Run("sqlite/"+c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "bench.db")
			open := func() (*inbox.Queue[msg], any) {
				db, err := inbox.OpenSQLite(context.Background(), path)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				q, err := inbox.NewSQLite(db, inbox.Config[msg]{Table: "drain", Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				return q, db
			}
			benchBatchLimits(b, open, c.limits, benchJobs(4000))
		})
	}
	for _, c := range cases {
		b.Run("postgres/"+c.name, func(b *testing.B) {
			url := pgURL(b)
			table := fmt.Sprintf("bench_batchlim_%d_%d", os.Getpid(), benchSeq.Add(1))
			open := func() (*inbox.Queue[msg], any) {
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
				q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: table, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				return q, pool
			}
			b.Cleanup(func() {
				pool, err := pgxpool.New(context.Background(), url)
				if err == nil {
					for _, s := range []string{"", "_periodic", "_limits"} {
						_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+s+`"`)
					}
					pool.Close()
				}
			})
			benchBatchLimits(b, open, c.limits, benchJobs(4000))
		})
	}
}

func benchBatchLimits(b *testing.B, open func() (*inbox.Queue[msg], any), limits inbox.Limits, jobs int) {
	ctx := context.Background()
	q0, db := open()
	q1, _ := open()
	if err := q0.CreateTable(ctx); err != nil {
		b.Fatal(err)
	}
	var elapsed time.Duration
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		fillGroups(b, q0, db, jobs, 0, 0)
		var settled, bad atomic.Int64
		all := make(chan struct{})
		var subs []*inbox.Subscription[msg]
		for _, q := range []*inbox.Queue[msg]{q0, q1} {
			sub, err := q.SubscribeBatch(func(context.Context, []inbox.Job[msg]) error { return nil }, 16, inbox.SubscribeOptions{
				Workers: 4, Limits: limits,
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
