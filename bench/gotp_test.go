package bench

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

type job struct {
	N int `json:"n"`
}

// gotpSys is gotp's inbox, lease form, on a fresh table.
type gotpSys struct {
	b       *testing.B
	db      string
	path    string // sqlite
	url     string // postgres
	table   string
	notify  bool
	o       gotpOpts
	q       *inbox.Queue[job] // the publisher's queue (its own pool)
	started int
	closes  []func()
}

// newGotp is gotp's inbox with its defaults (lease form, prefetch of 2 x Workers
// while handlers are fast, synchronous commits) and the workload's workers.
func newGotp(b *testing.B, db string) system { return mkGotp(b, db, gotpOpts{}) }

// newGotpNotify adds Config.ListenNotify: publisher and subscriber are separate Queues
// with separate pools, so only the Postgres notification wakes the subscriber.
func newGotpNotify(b *testing.B, db string) system { return mkGotp(b, db, gotpOpts{notify: true}) }

// newGotpTuned is tuned for throughput: Prefetch of 16 rows beyond the 8 workers and,
// on Postgres, AsyncCommit for the claim-and-ack statements.
func newGotpTuned(b *testing.B, db string) system {
	return mkGotp(b, db, gotpOpts{prefetch: 16, async: db == "postgres"})
}

// newGotpNoPrefetch is the defaults before sitting K: no prefetch (inbox.NoPrefetch).
func newGotpNoPrefetch(b *testing.B, db string) system {
	return mkGotp(b, db, gotpOpts{prefetch: inbox.NoPrefetch})
}

// newGotpAsync is the defaults plus AsyncCommit (Postgres).
func newGotpAsync(b *testing.B, db string) system { return mkGotp(b, db, gotpOpts{async: true}) }

type gotpOpts struct {
	notify, async bool
	prefetch      int
	batch         int // SubscribeBatch with batches of this many jobs
}

// newGotpBatch16 is the defaults with SubscribeBatch, 16 jobs a batch.
func newGotpBatch16(b *testing.B, db string) system { return mkGotp(b, db, gotpOpts{batch: 16}) }

func mkGotp(b *testing.B, db string, o gotpOpts) system {
	s := &gotpSys{b: b, db: db, table: uniq("gotp_jobs"), notify: o.notify, o: o}
	if db == "sqlite" {
		s.path = filepath.Join(b.TempDir(), "gotp.db")
	} else {
		s.url = pgURL(b)
	}
	s.q = s.queue()
	if err := s.q.CreateTable(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// queue opens a new pool and a Queue on it: one "instance".
func (s *gotpSys) queue() *inbox.Queue[job] {
	cfg := inbox.Config[job]{Table: s.table, ListenNotify: s.notify}
	if s.db == "sqlite" {
		db, err := inbox.OpenSQLite(context.Background(), s.path)
		if err != nil {
			s.b.Fatal(err)
		}
		db.SetMaxOpenConns(4)
		s.closes = append(s.closes, func() { db.Close() })
		q, err := inbox.NewSQLite(db, cfg)
		if err != nil {
			s.b.Fatal(err)
		}
		return q
	}
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
	q, err := inbox.NewPostgres(pool, cfg)
	if err != nil {
		s.b.Fatal(err)
	}
	return q
}

func (s *gotpSys) publishOne(ctx context.Context, n int) error {
	_, err := s.q.Publish(ctx, job{N: n}, nil)
	return err
}

func (s *gotpSys) publishBatch(ctx context.Context, ns []int) error {
	jobs := make([]job, len(ns))
	for i, n := range ns {
		jobs[i] = job{N: n}
	}
	return s.q.PublishBatch(ctx, jobs, nil)
}

func (s *gotpSys) startInstance(ctx context.Context, workers int, fn func(int)) (func(), error) {
	// The first instance shares the publisher's Queue (and pool), so that a publish
	// wakes it in-process at once; the publisher is idle while Q2 drains, so each
	// instance still has a pool of its own. With notify, every instance has its own
	// Queue and pool and only the notification reaches it.
	q := s.q
	if s.notify || s.started > 0 {
		q = s.queue()
	}
	s.started++
	o := inbox.SubscribeOptions{Workers: workers, Prefetch: s.o.prefetch, AsyncCommit: s.o.async}
	var sub *inbox.Subscription[job]
	var err error
	if s.o.batch > 0 {
		sub, err = q.SubscribeBatch(func(ctx context.Context, js []inbox.Job[job]) error {
			for _, j := range js {
				fn(j.Payload.N)
			}
			return nil
		}, s.o.batch, o)
	} else {
		sub, err = q.Subscribe(func(ctx context.Context, j inbox.Job[job]) error {
			fn(j.Payload.N)
			return nil
		}, o)
	}
	if err != nil {
		return nil, err
	}
	if err := sub.Start(ctx); err != nil {
		return nil, err
	}
	return func() { _ = sub.Stop(context.Background()) }, nil
}

func (s *gotpSys) close() {
	if s.db == "postgres" {
		pool, err := pgxpool.New(context.Background(), s.url)
		if err == nil {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+s.table+`"`)
			pool.Close()
		}
	}
	for _, c := range s.closes {
		c()
	}
}
