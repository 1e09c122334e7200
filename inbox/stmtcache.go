package inbox

import (
	"container/list"
	"context"
	"database/sql"
	"sync"
)

// SQLite statements prepared once.
//
// modernc's SQLite prepares a statement afresh each time database/sql runs a text
// that is not a prepared *sql.Stmt: the parse and plan were a fifth of the CPU of
// a drain without limits and nearly a third of one under PerPartition (the walk,
// the take and the keyed claim are long texts). While a subscription of the Queue
// runs, the statements the Queue runs (the subscriptions' cycles, takes and
// give-backs, and publishes) go through stmtCache: a text run a second time is
// prepared on the *sql.DB and kept, and database/sql prepares it once on each
// connection it runs on and reuses it there; in a transaction it is bound to the
// transaction's connection (Tx.StmtContext). At most stmtCacheSize texts are kept,
// the least recently used closed first; once the last subscription stops, every
// statement is closed, so that a Queue that runs none holds nothing prepared.

// stmtCacheSize bounds the texts a Queue keeps prepared. A claim's text varies
// with its limits (LIMIT is a literal), so a drain runs a few dozen texts.
const stmtCacheSize = 96

// stmtSeenSize bounds the texts remembered as run once; the memory is cleared when
// it is full.
const stmtSeenSize = 512

// stmtCache keeps a Queue's SQLite statements prepared while its subscriptions
// run. Safe for concurrent use.
type stmtCache struct {
	db *sql.DB

	mu   sync.Mutex
	refs int                      // running subscriptions; nothing is kept while 0
	m    map[string]*list.Element // by text; values *cachedStmt
	lru  list.List                // most recently used first
	seen map[string]bool          // texts run once unprepared
}

type cachedStmt struct {
	text string
	st   *sql.Stmt
	uses int  // callers between get and put
	gone bool // no longer kept: closed by the last put
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*list.Element{}, seen: map[string]bool{}}
}

// acquire marks a subscription running: statements are kept from now on. A nil
// cache (Postgres) does nothing, as does its release.
func (c *stmtCache) acquire() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
}

// release marks a subscription ended; the last one closes every statement kept.
func (c *stmtCache) release() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.refs--
	var closing []*sql.Stmt
	if c.refs == 0 {
		for e := c.lru.Front(); e != nil; e = e.Next() {
			if cs := e.Value.(*cachedStmt); cs.uses == 0 {
				closing = append(closing, cs.st)
			} else {
				cs.gone = true
			}
		}
		c.lru.Init()
		clear(c.m)
		clear(c.seen)
	}
	c.mu.Unlock()
	for _, st := range closing {
		_ = st.Close()
	}
}

// len is how many statements are kept (0 for a nil cache: Postgres).
func (c *stmtCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// get returns the statement kept for text, or nil; with nil, prepare reports
// whether text has been run before and is worth preparing. A statement returned
// is the caller's to use until it calls put.
func (c *stmtCache) get(text string) (cs *cachedStmt, prepare bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[text]; ok {
		c.lru.MoveToFront(e)
		cs := e.Value.(*cachedStmt)
		cs.uses++
		return cs, false
	}
	if c.refs == 0 {
		return nil, false
	}
	if c.seen[text] {
		delete(c.seen, text)
		return nil, true
	}
	if len(c.seen) >= stmtSeenSize {
		clear(c.seen)
	}
	c.seen[text] = true
	return nil, false
}

// put ends a use of cs that get or prepare returned: once its statement has
// started (a query's rows hold it open until they are closed), it may be closed.
func (c *stmtCache) put(cs *cachedStmt) {
	c.mu.Lock()
	cs.uses--
	closing := cs.gone && cs.uses == 0
	c.mu.Unlock()
	if closing {
		_ = cs.st.Close()
	}
}

// prepare prepares text on the pool and keeps it, and returns it for use as get
// does (nil if it could not be prepared: the caller runs the text unprepared).
// It takes a connection of the pool: never call it while holding one, as a
// transaction does.
func (c *stmtCache) prepare(ctx context.Context, text string) *cachedStmt {
	st, err := c.db.PrepareContext(ctx, text)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	if e, ok := c.m[text]; ok || c.refs == 0 {
		// Kept meanwhile by another caller, or no subscription runs any more.
		var cs *cachedStmt
		if ok {
			cs = e.Value.(*cachedStmt)
			cs.uses++
		}
		c.mu.Unlock()
		_ = st.Close()
		return cs
	}
	cs := &cachedStmt{text: text, st: st, uses: 1}
	c.m[text] = c.lru.PushFront(cs)
	var closing *sql.Stmt
	if c.lru.Len() > stmtCacheSize {
		e := c.lru.Back()
		c.lru.Remove(e)
		old := e.Value.(*cachedStmt)
		delete(c.m, old.text)
		if old.uses == 0 {
			closing = old.st
		} else {
			old.gone = true
		}
	}
	c.mu.Unlock()
	if closing != nil {
		_ = closing.Close()
	}
	return cs
}

// cachedQ runs statements through a stmtCache, on the pool (tx nil) or in a
// transaction; while no subscription runs, it runs them as sqlQ does. Texts worth
// preparing that were run in the transaction are noted in
// pending, to be prepared once it has ended (prepareTx) and its connection is back
// in the pool: preparing on the pool inside it could wait for ever on a pool of
// one connection.
type cachedQ struct {
	c       *stmtCache
	tx      *sql.Tx
	pending *[]string
}

// stmt returns the statement to run text with, or nil to run it unprepared;
// done ends its use (after the statement has started).
func (q cachedQ) stmt(ctx context.Context, text string) (st *sql.Stmt, done func()) {
	cs, prepare := q.c.get(text)
	switch {
	case cs == nil && prepare && q.tx == nil:
		cs = q.c.prepare(ctx, text)
	case cs == nil && prepare:
		*q.pending = append(*q.pending, text)
	}
	if cs == nil {
		return nil, func() {}
	}
	st = cs.st
	if q.tx != nil {
		st = q.tx.StmtContext(ctx, st)
	}
	return st, func() { q.c.put(cs) }
}

func (q cachedQ) target() sqlExecQuery {
	if q.tx != nil {
		return q.tx
	}
	return q.c.db
}

func (q cachedQ) exec(ctx context.Context, text string, args ...any) (int64, error) {
	var res sql.Result
	var err error
	if st, done := q.stmt(ctx, text); st != nil {
		res, err = st.ExecContext(ctx, args...)
		done()
	} else {
		res, err = q.target().ExecContext(ctx, text, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q cachedQ) query(ctx context.Context, text string, args ...any) (rows, error) {
	var r *sql.Rows
	var err error
	if st, done := q.stmt(ctx, text); st != nil {
		r, err = st.QueryContext(ctx, args...)
		done()
	} else {
		r, err = q.target().QueryContext(ctx, text, args...)
	}
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

// uncached is db without the statement cache, for texts that vary too much to
// keep prepared.
func uncached(db querier) querier {
	if c, ok := db.(cachedQ); ok {
		return sqlQ{c.target()}
	}
	return db
}

// prepareTx prepares the texts a transaction noted in pending, once it has ended.
func (c *stmtCache) prepareTx(ctx context.Context, pending []string) {
	for _, text := range pending {
		if cs := c.prepare(ctx, text); cs != nil {
			c.put(cs)
		}
	}
}
