package inbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// This file uses the package's exported API only, and helpers of its own, so that
// docs/bench/ab-inbox-drain.sh can lay it over an older tree and compare the two.

// benchJobs is how many jobs one drain takes: INBOX_BENCH_JOBS, or def.
func benchJobs(def int) int {
	if n := benchEnvInt("INBOX_BENCH_JOBS"); n > 0 {
		return n
	}
	return def
}

// benchEnvInt is the positive integer in the environment variable name, or 0.
func benchEnvInt(name string) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return 0
}

var benchSeq atomic.Int64

// BenchmarkDrain times one subscription (8 workers) draining a table of published
// jobs: from the moment Start returns until the last job's settlement is observed.
// One op is one drain of the whole table; jobs/s is reported beside it. Publishing
// and Start (which checks the table) are outside the timer.
func BenchmarkDrain(b *testing.B) {
	b.Run("sqlite/lease", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "bench.db")
		db, err := inbox.OpenSQLite(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		q, err := inbox.NewSQLite(db, inbox.Config[msg]{Table: "drain", Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		benchDrain(b, q, inbox.Lease, benchJobs(2000))
	})
	for _, f := range []struct {
		name string
		form inbox.Form
		jobs int
	}{{"lease", inbox.Lease, 2000}, {"rowlock", inbox.RowLock, 500}, {"advisory", inbox.AdvisoryLock, 500}} {
		b.Run("postgres/"+f.name, func(b *testing.B) {
			cfg, err := pgxpool.ParseConfig(pgURL(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 10
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			table := fmt.Sprintf("bench_drain_%d_%d", os.Getpid(), benchSeq.Add(1))
			defer func() {
				// CreateTable makes the side tables too (TABLE_periodic, TABLE_limits).
				for _, s := range []string{"", "_periodic", "_limits"} {
					_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+s+`"`)
				}
			}()
			q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: table, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			benchDrain(b, q, f.form, benchJobs(f.jobs))
		})
	}
}

func benchDrain(b *testing.B, q *inbox.Queue[msg], form inbox.Form, jobs int) {
	ctx := context.Background()
	if err := q.CreateTable(ctx); err != nil {
		b.Fatal(err)
	}
	batch := make([]msg, jobs)
	for i := range batch {
		batch[i] = msg{N: i}
	}
	var elapsed time.Duration
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		if err := q.PublishBatch(ctx, batch, nil); err != nil {
			b.Fatal(err)
		}
		var settled atomic.Int64
		var bad atomic.Int64
		all := make(chan struct{})
		sub, err := q.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{
			Workers: 8, Form: form,
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
		if err := sub.Start(ctx); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		b.StartTimer()
		select {
		case <-all:
		case <-time.After(2 * time.Minute):
			b.Fatalf("drain: %d of %d jobs settled after 2 min", settled.Load(), jobs)
		}
		b.StopTimer()
		elapsed += time.Since(t0)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = sub.Stop(sctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		if n := bad.Load(); n > 0 {
			b.Fatalf("%d settlements were not clean acks", n)
		}
	}
	b.ReportMetric(float64(jobs)*float64(b.N)/elapsed.Seconds(), "jobs/s")
}
