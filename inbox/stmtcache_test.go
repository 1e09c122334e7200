package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// drainPools drains n jobs over 4 partition keys with two instances, each a Queue
// on a pool of its own made by open, under PerPartition 2 and Concurrency 3, while
// the jobs are published one by one from a third pool, and that pool deletes as
// many delayed jobs one by one (a transaction that reads before it writes). It
// fails the test if a job is run twice or not settled as a clean ack, if a key or
// the table goes over its limit, if a delete fails, or if any instance met a
// failed claim.
func drainPools(t *testing.T, open func(t *testing.T, path string) *sql.DB, n int) {
	path := filepath.Join(t.TempDir(), "inbox.db")
	newQ := func() *inbox.Queue[msg] {
		q, err := inbox.NewSQLite(open(t, path), inbox.Config[msg]{Table: "jobs", Columns: inbox.GroupColumns(), Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	pub := newQ()
	if err := pub.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	var later []int64
	for i := range n {
		id, err := pub.Publish(t.Context(), msg{N: -1 - i}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, id)
	}
	g := newGauge()
	seen := newTally(n)
	var bad atomic.Int64
	var qs []*inbox.Queue[msg]
	for range 2 {
		q := newQ()
		qs = append(qs, q)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			k := fmt.Sprint("k", j.Payload.N%4)
			g.enter(k)
			time.Sleep(time.Millisecond)
			g.leave(k)
			seen.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 4, PollInterval: 10 * time.Millisecond,
			Limits: inbox.Limits{PerPartition: 2, Concurrency: 3},
			Observe: func(r inbox.Result) {
				if r.Outcome != inbox.Acked || r.SettleErr != nil {
					bad.Add(1)
				}
			}})
	}
	deleted := make(chan error, 1)
	go func() {
		for _, id := range later {
			if err := pub.DeleteJob(t.Context(), id); err != nil {
				deleted <- fmt.Errorf("delete job %d: %w", id, err)
				return
			}
		}
		deleted <- nil
	}()
	for i := range n {
		if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: fmt.Sprint("k", i%4)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-deleted; err != nil {
		t.Error(err)
	}
	seen.wait(t, 60*time.Second)
	seen.exactlyOnce(t)
	if g.max > 3 {
		t.Errorf("%d jobs in work at once, limit 3", g.max)
	}
	for k, m := range g.keyMax {
		if m > 2 {
			t.Errorf("key %s had %d jobs in work at once, limit 2", k, m)
		}
	}
	if n := bad.Load(); n > 0 {
		t.Errorf("%d settlements were not clean acks", n)
	}
	for i, q := range qs {
		if h := q.Health(); h.ClaimErrors > 0 {
			t.Errorf("instance %d: %d failed claims, the last: %s", i, h.ClaimErrors, h.LastError)
		}
	}
}

// A pool of one connection: the statements a subscription keeps prepared are
// prepared only once a transaction has given its connection back (preparing on
// the pool inside one would wait for ever), so two instances of one connection
// each drain, publishes and all, and stop.
func TestSQLiteOneConnectionPool(t *testing.T) {
	drainPools(t, onePool, 200)
}

// onePool opens the SQLite file at path for the inbox as a pool of one
// connection, closed at cleanup.
func onePool(t *testing.T, path string) *sql.DB {
	db, err := inbox.OpenSQLite(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// Pools not opened by OpenSQLite, whose transactions begin DEFERRED (no
// _txlock=immediate): the inbox's write transactions still take the write lock
// first (a write that changes nothing), so that two instances and a publisher
// wait for each other rather than fail with SQLITE_BUSY, and so does a delete,
// which reads the job before it deletes it.
func TestSQLiteDeferredTransactions(t *testing.T) {
	var once sync.Once
	drainPools(t, func(t *testing.T, path string) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		once.Do(func() {
			if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
				t.Fatal(err)
			}
		})
		return db
	}, 300)
}

// panicky is JSON but panics encoding a negative N, as a buggy codec might.
type panicky struct{ inbox.JSON[msg] }

func (c panicky) Encode(m msg) ([]byte, error) {
	if m.N < 0 {
		panic("codec bug")
	}
	return c.JSON.Encode(m)
}

// A codec that panics inside PublishBatch's transaction, on a pool of one
// connection while a subscription runs (statements are being kept prepared):
// the panic reaches the caller at once, the transaction is rolled back (none of
// the batch is written) and its connection is back in the pool, so the next
// publish is written and seen from another pool.
func TestSQLiteTransactionPanic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inbox.db")
	q, err := inbox.NewSQLite(onePool(t, path), inbox.Config[msg]{Table: "jobs", Codec: panicky{}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	ran := newTally(1)
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
		ran.add(j.Payload.N)
		return nil
	}, inbox.SubscribeOptions{Workers: 2, PollInterval: 10 * time.Millisecond})
	batch := make([]msg, 450) // two full chunks of 200 rows, then 50 with the panic
	for i := range batch {
		batch[i] = msg{N: 1000 + i}
	}
	batch[len(batch)-1].N = -1
	for range 2 { // the second time, the chunks' texts are worth preparing
		recovered := make(chan any, 1)
		go func() {
			defer func() { recovered <- recover() }()
			_ = q.PublishBatch(t.Context(), batch, nil)
		}()
		select {
		case r := <-recovered:
			if r == nil {
				t.Fatal("PublishBatch did not panic")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("PublishBatch neither returned nor panicked in 10 s")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := q.Publish(ctx, msg{N: 1}, nil); err != nil {
		t.Fatalf("publish after the panic: %v", err)
	}
	ran.wait(t, 10*time.Second)
	var n int
	if err := onePool(t, path).QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("%d rows in the table, want at most the one published after: the batch that panicked was written", n)
	}
}

// Health.Prepared shows the statements kept while a subscription runs, and none
// once it has stopped.
func TestSQLiteHealthPrepared(t *testing.T) {
	b := sqliteBackend(t)
	q := defaultTable(t, b)
	ran := newTally(20)
	s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
		ran.add(j.Payload.N)
		return nil
	}, inbox.SubscribeOptions{Workers: 2, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ran.wait(t, 10*time.Second)
	if p := q.Health().Prepared; p == 0 || p > 96 {
		t.Errorf("Health.Prepared = %d while a subscription runs, want 1 to 96", p)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := q.Health().Prepared; p != 0 {
		t.Errorf("Health.Prepared = %d after the subscription stopped, want 0", p)
	}
}
