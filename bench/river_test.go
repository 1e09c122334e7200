package bench

import (
	"context"
	"database/sql"
	"log/slog"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

type riverArgs struct {
	N int `json:"n"`
}

func (riverArgs) Kind() string { return "bench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	fn func(int)
}

func (w *riverWorker) Work(ctx context.Context, j *river.Job[riverArgs]) error {
	w.fn(j.Args.N)
	return nil
}

// riverSys is River v0.51.2 on a fresh SQLite file or Postgres schema.
type riverSys struct {
	b       *testing.B
	db      string
	path    string
	url     string
	schema  string
	tuned   bool
	fast    bool // batch publish through InsertManyFast
	workers int  // if set, MaxWorkers per instance instead of the workload's
	closes  []func()

	sqlClient *river.Client[*sql.Tx]
	pgClient  *river.Client[pgx.Tx]
}

// publishers: once an instance runs, single publishes go through it (as gotp's do
// through the subscribed Queue), so that River's in-process paths are used too.

func riverInsertOnly(b *testing.B, db string) system { return mkRiver(b, db, false, false) }
func riverInsertFast(b *testing.B, db string) system { return mkRiver(b, db, false, true) }
func riverTuned(b *testing.B, db string) system      { return mkRiver(b, db, true, false) }
func riverDefault(b *testing.B, db string) system    { return mkRiver(b, db, false, false) }

// riverTuned100 is river-tuned with MaxWorkers 100 per instance instead of the
// workload's 8: each fetch can take up to 100 rows, River's counterpart of Prefetch.
func riverTuned100(b *testing.B, db string) system {
	s := mkRiver(b, db, true, false).(*riverSys)
	s.workers = 100
	return s
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func mkRiver(b *testing.B, db string, tuned, fast bool) system {
	s := &riverSys{b: b, db: db, tuned: tuned, fast: fast}
	ctx := context.Background()
	if db == "sqlite" {
		s.path = filepath.Join(b.TempDir(), "river.db")
		pool := s.sqlitePool()
		m, err := rivermigrate.New(riversqlite.New(pool), &rivermigrate.Config{Logger: quietLog()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			b.Fatal(err)
		}
		s.sqlClient, err = river.NewClient(riversqlite.New(pool), s.config(nil, 0))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s.url = pgURL(b)
	s.schema = uniq("river_bench")
	pool := s.pgPool()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+s.schema); err != nil {
		b.Fatal(err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quietLog(), Schema: s.schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	s.pgClient, err = river.NewClient(riverpgxv5.New(pool), s.config(nil, 0))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// sqlitePool opens the database as River's driver documentation advises: one
// connection per pool (SQLite has one writer); WAL and a busy timeout so that two
// instances' pools wait for each other.
func (s *riverSys) sqlitePool() *sql.DB {
	v := url.Values{}
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "busy_timeout(10000)")
	v.Add("_pragma", "synchronous(NORMAL)")
	v.Add("_txlock", "immediate")
	pool, err := sql.Open("sqlite", "file:"+s.path+"?"+v.Encode())
	if err != nil {
		s.b.Fatal(err)
	}
	pool.SetMaxOpenConns(1)
	s.closes = append(s.closes, func() { pool.Close() })
	return pool
}

func (s *riverSys) pgPool() *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		s.b.Fatal(err)
	}
	pc.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		s.b.Fatal(err)
	}
	s.closes = append(s.closes, pool.Close)
	return pool
}

// config is River's client configuration. Default: River's defaults (fetch cooldown
// 100 ms, fetch poll 1 s) with the workload's workers. Tuned for throughput: fetch
// cooldown 1 ms and fetch poll 10 ms (River's minimum cooldown), same workers.
func (s *riverSys) config(fn func(int), workers int) *river.Config {
	cfg := &river.Config{Logger: quietLog(), Schema: s.schema, SkipUnknownJobCheck: fn == nil}
	if fn != nil {
		w := river.NewWorkers()
		river.AddWorker(w, &riverWorker{fn: fn})
		cfg.Workers = w
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	if s.tuned {
		cfg.FetchCooldown = time.Millisecond
		cfg.FetchPollInterval = 10 * time.Millisecond
	}
	return cfg
}

func (s *riverSys) publishOne(ctx context.Context, n int) error {
	var err error
	if s.sqlClient != nil {
		_, err = s.sqlClient.Insert(ctx, riverArgs{N: n}, nil)
	} else {
		_, err = s.pgClient.Insert(ctx, riverArgs{N: n}, nil)
	}
	return err
}

func (s *riverSys) publishBatch(ctx context.Context, ns []int) error {
	params := make([]river.InsertManyParams, len(ns))
	for i, n := range ns {
		params[i] = river.InsertManyParams{Args: riverArgs{N: n}}
	}
	var err error
	switch {
	case s.sqlClient != nil && s.fast:
		_, err = s.sqlClient.InsertManyFast(ctx, params)
	case s.sqlClient != nil:
		_, err = s.sqlClient.InsertMany(ctx, params)
	case s.fast:
		_, err = s.pgClient.InsertManyFast(ctx, params)
	default:
		_, err = s.pgClient.InsertMany(ctx, params)
	}
	return err
}

func (s *riverSys) startInstance(ctx context.Context, workers int, fn func(int)) (func(), error) {
	if s.workers > 0 {
		workers = s.workers
	}
	if s.db == "sqlite" {
		c, err := river.NewClient(riversqlite.New(s.sqlitePool()), s.config(fn, workers))
		if err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		s.sqlClient = c
		return func() { _ = c.Stop(context.Background()) }, nil
	}
	c, err := river.NewClient(riverpgxv5.New(s.pgPool()), s.config(fn, workers))
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	s.pgClient = c
	return func() { _ = c.Stop(context.Background()) }, nil
}

func (s *riverSys) close() {
	if s.db == "postgres" {
		pool, err := pgxpool.New(context.Background(), s.url)
		if err == nil {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s.schema+" CASCADE")
			pool.Close()
		}
	}
	for i := len(s.closes) - 1; i >= 0; i-- {
		s.closes[i]()
	}
}
