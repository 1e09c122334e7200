package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func openCacheDB(t *testing.T, conns int) *sql.DB {
	t.Helper()
	db, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "cache.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	return db
}

// text is the i-th of many distinct statements.
func text(i int) string { return fmt.Sprintf("SELECT count(*) + %d FROM t", i) }

func closedStmt(st *sql.Stmt) bool {
	_, err := st.Exec()
	return err != nil && err.Error() == "sql: statement is closed"
}

// TestStmtCacheLifecycle: nothing is kept while no subscription runs; a text is
// prepared the second time it is run and reused after; at most stmtCacheSize are
// kept, the least recently used closed first, one in use only once its user is
// done; the last release closes every one.
func TestStmtCacheLifecycle(t *testing.T) {
	ctx := t.Context()
	c := newStmtCache(openCacheDB(t, 2))
	for range 3 {
		if cs, prepare := c.get(text(0)); cs != nil || prepare {
			t.Fatal("a statement kept or asked for while no subscription runs")
		}
	}
	c.acquire()
	if cs, prepare := c.get(text(0)); cs != nil || prepare {
		t.Fatal("a text run once is worth preparing already")
	}
	if _, prepare := c.get(text(0)); !prepare {
		t.Fatal("a text run twice is not worth preparing")
	}
	first := c.prepare(ctx, text(0))
	if first == nil {
		t.Fatal("prepare failed")
	}
	c.put(first)
	if cs, _ := c.get(text(0)); cs != first {
		t.Fatal("the statement kept is not reused")
	} else {
		c.put(cs)
	}
	held, _ := c.get(text(0)) // in use while it is evicted below
	for i := 1; i <= stmtCacheSize; i++ {
		cs := c.prepare(ctx, text(i))
		if cs == nil {
			t.Fatalf("prepare %d failed", i)
		}
		c.put(cs)
	}
	if n := c.lru.Len(); n != stmtCacheSize || len(c.m) != stmtCacheSize {
		t.Fatalf("%d statements kept (%d by text), want %d", n, len(c.m), stmtCacheSize)
	}
	if _, kept := c.m[text(0)]; kept {
		t.Fatal("the least recently used statement is still kept")
	}
	if closedStmt(held.st) {
		t.Fatal("an evicted statement in use was closed under its user")
	}
	c.put(held)
	if !closedStmt(held.st) {
		t.Fatal("an evicted statement was not closed once its user was done")
	}
	var kept []*sql.Stmt
	for e := c.lru.Front(); e != nil; e = e.Next() {
		kept = append(kept, e.Value.(*cachedStmt).st)
	}
	c.acquire()
	c.release()
	if c.lru.Len() == 0 {
		t.Fatal("statements dropped while a subscription still runs")
	}
	inUse, _ := c.get(text(stmtCacheSize)) // in use while the last release closes the rest
	c.release()
	if closedStmt(inUse.st) {
		t.Fatal("the last release closed a statement in use under its user")
	}
	c.put(inUse)
	if c.lru.Len() != 0 || len(c.m) != 0 || len(c.seen) != 0 {
		t.Fatalf("kept after the last release: %d statements, %d by text, %d seen", c.lru.Len(), len(c.m), len(c.seen))
	}
	for i, st := range kept {
		if !closedStmt(st) {
			t.Fatalf("statement %d not closed by the last release", i)
		}
	}
}

// TestStmtCacheConcurrent runs statements from more texts than are kept, on the
// pool and in transactions, from many goroutines while a subscription starts and
// stops over and over (each stop closes every statement kept, some in use):
// every statement runs and returns its result (none meets a statement closed
// under it), and once the last stop is done nothing is kept.
func TestStmtCacheConcurrent(t *testing.T) {
	db := openCacheDB(t, 3)
	c := newStmtCache(db)
	ctx := context.Background()
	stop := make(chan struct{})
	var flap sync.WaitGroup
	flap.Go(func() {
		// Subscriptions start and stop: the last release closes every
		// statement kept, some of them in use.
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.acquire()
			for range 50 {
				runtime.Gosched()
			}
			c.release()
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Go(func() {
			for k := range 300 {
				i := rand.N(stmtCacheSize + stmtCacheSize/2)
				var got int
				if g%2 == 0 {
					r, err := cachedQ{c: c}.query(ctx, text(i))
					if err != nil {
						errs <- err
						return
					}
					for r.Next() {
						_ = r.Scan(&got)
					}
					r.Close()
				} else {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					var pending []string
					r, err := cachedQ{c: c, tx: tx, pending: &pending}.query(ctx, text(i))
					if err == nil {
						for r.Next() {
							_ = r.Scan(&got)
						}
						r.Close()
					}
					_ = tx.Rollback()
					c.prepareTx(ctx, pending)
					if err != nil {
						errs <- err
						return
					}
				}
				if got != i {
					errs <- fmt.Errorf("goroutine %d run %d: %s returned %d", g, k, text(i), got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	flap.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.lru.Len() != 0 {
		t.Fatalf("%d statements kept after the last release", c.lru.Len())
	}
}

// Batch publishes of varied sizes do not churn the cache: the text of a partial
// chunk (one per row count) is never kept, a full chunk's (one text) is.
func TestStmtCacheBatchTexts(t *testing.T) {
	db := openCacheDB(t, 2)
	q, err := NewSQLite(db, Config[int]{Table: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	q.stmts.acquire()
	defer q.stmts.release()
	inserts := func() (n int) {
		q.stmts.mu.Lock()
		defer q.stmts.mu.Unlock()
		for text := range q.stmts.m {
			if strings.HasPrefix(text, "INSERT") {
				n++
			}
		}
		return n
	}
	for range 2 {
		for size := 1; size <= 120; size++ {
			if err := q.PublishBatch(t.Context(), make([]int, size), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := inserts(); n != 0 {
		t.Fatalf("%d insert texts kept after batches of 1 to 120 rows, want 0", n)
	}
	for range 3 {
		if err := q.PublishBatch(t.Context(), make([]int, 450), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := inserts(); n != 1 {
		t.Fatalf("%d insert texts kept after batches of 450 rows, want 1 (a full chunk's)", n)
	}
}
