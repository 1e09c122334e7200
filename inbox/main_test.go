package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/gotp/gotp/inbox"
)

// TestMain fails the package if any goroutine outlives the tests: every
// subscription, listener and pool (database/sql keeps an opener goroutine per
// *sql.DB until Close) must be stopped by the test that made it.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(faultChildEnv); cfg != "" {
		os.Exit(runFaultChild(cfg)) // an instance process of a fault test (faultproc_test.go)
	}
	goleak.VerifyTestMain(m)
}

// msg is the payload of every test job.
type msg struct {
	N    int    `json:"n"`
	Text string `json:"text,omitempty"`
}

// backend opens fresh pools ("instances") on one test's database and names its table.
type backend struct {
	dialect inbox.Dialect
	table   string
	path    string                 // SQLite: the database file
	newDB   func(t *testing.T) any // *sql.DB or *pgxpool.Pool
	exec    func(t *testing.T, sql string, args ...any)
	queryN  func(t *testing.T, sql string, args ...any) int64
}

// ph returns the i-th placeholder of the backend's SQL.
func (b *backend) ph(i int) string {
	if b.dialect == inbox.SQLite {
		return fmt.Sprintf("?%d", i)
	}
	return fmt.Sprintf("$%d", i)
}

func newQueue(t *testing.T, b *backend, cfg inbox.Config[msg]) *inbox.Queue[msg] {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = b.table
	}
	if cfg.Logger == nil && os.Getenv("INBOX_TEST_LOG") == "" {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var q *inbox.Queue[msg]
	var err error
	switch db := b.newDB(t).(type) {
	case *sql.DB:
		q, err = inbox.NewSQLite(db, cfg)
	case *pgxpool.Pool:
		q, err = inbox.NewPostgres(db, cfg)
	}
	if err != nil {
		t.Fatalf("new queue: %v", err)
	}
	return q
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

var tableSeq atomic.Int64

// tableName is unique per test and process, so parallel tests never share a table.
func tableName(t *testing.T) string {
	n := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	// The process id keeps two test processes on one database (a developer's run
	// beside CI's) off each other's tables.
	return fmt.Sprintf("t%d_%d_%s", os.Getpid(), tableSeq.Add(1), strings.Trim(n, "_"))
}

func sqliteBackend(t *testing.T) *backend {
	t.Helper()
	path := filepath.Join(t.TempDir(), "inbox.db")
	b := &backend{dialect: inbox.SQLite, table: tableName(t), path: path}
	var admin *sql.DB
	b.newDB = func(t *testing.T) any {
		db, err := inbox.OpenSQLite(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(4)
		t.Cleanup(func() { db.Close() })
		return db
	}
	admin = b.newDB(t).(*sql.DB)
	b.exec = func(t *testing.T, q string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b.queryN = func(t *testing.T, q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := admin.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	return b
}

func pgURL(t testing.TB) string {
	u := os.Getenv("POSTGRES_TEST_URL")
	if u == "" {
		t.Skip("POSTGRES_TEST_URL not set")
	}
	return u
}

func pgBackend(t *testing.T) *backend {
	t.Helper()
	url := pgURL(t)
	b := &backend{dialect: inbox.Postgres, table: tableName(t)}
	b.newDB = func(t *testing.T) any {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 6
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	admin := b.newDB(t).(*pgxpool.Pool)
	b.exec = func(t *testing.T, q string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(context.Background(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b.queryN = func(t *testing.T, q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := admin.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	// Table names repeat across runs: forget a version recorded by an earlier run.
	forget := `DO $$ BEGIN IF to_regclass('gotp_schema') IS NOT NULL THEN DELETE FROM gotp_schema WHERE key = 'inbox:` + b.table + `'; END IF; END $$`
	b.exec(t, forget)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS "`+b.table+`" CASCADE`)
		_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS "`+b.table+`_periodic"`)
		_, _ = admin.Exec(context.Background(), `DROP TABLE IF EXISTS "`+b.table+`_limits"`)
		_, _ = admin.Exec(context.Background(), forget)
	})
	return b
}

// eachDB runs f on SQLite and, when POSTGRES_TEST_URL is set, on Postgres.
func eachDB(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, sqliteBackend(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, pgBackend(t))
	})
}

// defaultTable makes the default schema for b's table.
func defaultTable(t *testing.T, b *backend) *inbox.Queue[msg] {
	t.Helper()
	q := newQueue(t, b, inbox.Config[msg]{})
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	return q
}

// start starts a subscription and stops it at cleanup.
func start(t *testing.T, q *inbox.Queue[msg], h inbox.Handler[msg], o inbox.SubscribeOptions) *inbox.Subscription[msg] {
	t.Helper()
	s, err := q.Subscribe(h, o)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return run(t, s)
}

// run starts a subscription and stops it at cleanup, within 10 s.
func run(t *testing.T, s *inbox.Subscription[msg]) *inbox.Subscription[msg] {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// tally counts handled jobs by payload number and signals when want distinct ones
// have been seen.
type tally struct {
	mu   sync.Mutex
	seen map[int]int
	want int
	all  chan struct{}
}

func newTally(want int) *tally {
	return &tally{seen: map[int]int{}, want: want, all: make(chan struct{})}
}

func (c *tally) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[n]++
	if len(c.seen) == c.want && c.seen[n] == 1 {
		close(c.all)
	}
}

func (c *tally) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-c.all:
	case <-time.After(d):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("only %d of %d jobs handled within %v", len(c.seen), c.want, d)
	}
}

// exactlyOnce fails unless jobs 0..want-1 were each handled exactly once.
func (c *tally) exactlyOnce(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.want {
		if c.seen[i] != 1 {
			t.Errorf("job %d handled %d times", i, c.seen[i])
		}
	}
	if len(c.seen) != c.want {
		t.Errorf("handled %d distinct jobs, want %d", len(c.seen), c.want)
	}
}

func within(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// userTx is a caller's transaction on either database.
type userTx struct {
	tx       inbox.Tx
	commit   func() error
	rollback func() error
}

func beginTx(ctx context.Context, db any) (userTx, error) {
	switch db := db.(type) {
	case *sql.DB:
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return userTx{}, err
		}
		return userTx{tx: inbox.SQLTx(tx), commit: tx.Commit, rollback: tx.Rollback}, nil
	case *pgxpool.Pool:
		tx, err := db.Begin(ctx)
		if err != nil {
			return userTx{}, err
		}
		return userTx{tx: inbox.PgxTx(tx),
			commit:   func() error { return tx.Commit(ctx) },
			rollback: func() error { return tx.Rollback(ctx) }}, nil
	}
	return userTx{}, fmt.Errorf("unknown db %T", db)
}

func quiet() *slog.Logger {
	if os.Getenv("INBOX_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}
