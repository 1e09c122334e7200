package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Form is how a subscription claims rows.
type Form uint8

const (
	// Lease (the default; SQLite and Postgres): a claim writes a lock deadline, counts
	// the attempt and commits in one statement; the handler holds no connection; the
	// lease is extended every third of a lease while the handler runs, and every
	// settlement and extension is fenced by the deadline the claim wrote.
	Lease Form = iota
	// RowLock (Postgres): a claim (FOR UPDATE SKIP LOCKED) commits the attempt and a
	// lock deadline Lease ahead, then the row is locked FOR UPDATE in a transaction
	// held, with its connection, while the handler runs; the settlement commits
	// with it. In both lock forms a watcher on the held connection cancels the
	// handler as soon as the connection (and with it the lock) is lost. A crash
	// rolls the transaction back but not the attempt: the row is claimed again when
	// its deadline passes, and dead-lettered past MaxAttempts (see ExhaustedError).
	RowLock
	// AdvisoryLock (Postgres): a session advisory lock on the row's id, held with its
	// connection while the handler runs; the settlement is written on that
	// connection, fenced by the attempt the claim wrote.
	AdvisoryLock
)

// String names the form.
func (f Form) String() string {
	switch f {
	case Lease:
		return "lease"
	case RowLock:
		return "row lock"
	case AdvisoryLock:
		return "advisory lock"
	}
	return fmt.Sprintf("Form(%d)", uint8(f))
}

// Defaults of SubscribeOptions.
const (
	DefaultLease        = 30 * time.Second
	DefaultPollInterval = time.Second
	DefaultMaxAttempts  = 25
	DefaultClaimers     = 1
	// DefaultPrefetch is the default Prefetch per worker of the lease form.
	DefaultPrefetch = 4
	// NoPrefetch, as SubscribeOptions.Prefetch, claims for free workers only.
	NoPrefetch = -1
	// PrefetchBelow is the average handler duration under which the default
	// Prefetch is used.
	PrefetchBelow = 10 * time.Millisecond
)

// MaxHeld bounds the rows a subscription holds at once, in work or prefetched:
// Workers × the batch size (1, or SubscribeBatch's n) + Prefetch. Its buffers
// are sized for them when it starts; more is refused with a *ConfigError.
const MaxHeld = 1 << 20

// SubscribeOptions configure a Subscription. The zero value is valid.
type SubscribeOptions struct {
	// Workers is how many jobs this subscription has in work at once. Defaults to 1.
	// Workers (times the batch size) and Prefetch together hold at most MaxHeld rows.
	Workers int
	// Form is the claim form. Defaults to Lease.
	Form Form
	// Lease is the lease length of the Lease form. Defaults to DefaultLease (30 s);
	// it is extended every third of a lease while a handler runs. In the RowLock
	// form it is the rescue limit: how long a row whose holder's process died stays
	// in work before another claim takes it (the row lock, not the deadline, keeps
	// a live handler's row, however long it runs).
	Lease time.Duration
	// PollInterval is how long the subscription waits after a claim that came back
	// short before claiming again, unless woken. Defaults to DefaultPollInterval (1 s).
	PollInterval time.Duration
	// MaxAttempts dead-letters a job whose attempt fails when it has been claimed this
	// many times, and a job claimed more times than this without settling (its
	// handler crashed its process each time: an *ExhaustedError), without running it. Defaults to DefaultMaxAttempts; negative means never (on a table
	// without an Attempts column, never).
	MaxAttempts int
	// Backoff is the delay before retrying a failed attempt (1-based). Defaults to
	// DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Claimers is, on Postgres, how many lease claims run at once: the workers are
	// split between that many claimers, each claiming one row per free worker of its
	// own in one statement. Defaults to DefaultClaimers (1: on a small machine one
	// claimer taking many rows per statement outran several contending ones); at
	// most Workers and pool size - 1. SQLite has one writer: always one claimer.
	Claimers int
	// Prefetch (lease form) lets the subscription lease up to this many rows beyond
	// its free workers, so that a claim statement takes more rows at once and
	// workers find the next job waiting when they finish; prefetched rows wait
	// leased (their lease extended, their attempt counted), not in work, and are
	// released at once (attempt uncounted) by Stop. Every ack is still committed
	// before it is reported. 0 means the default: 4 × Workers (DefaultPrefetch)
	// while handlers are fast (the average of the last settled attempts, once 8
	// have run, under PrefetchBelow), so that slow or stuck handlers do not hold
	// rows other instances could run; none with Limits (a prefetched row would
	// hold a slot of the limit without running). NoPrefetch claims for free workers
	// only, as RustStream's inbox does; other negative values are refused. A value
	// set applies whatever the handlers' speed. On a table with a priority column
	// leased rows start in priority order (lower first), prefetched ones
	// included: a row claimed after prefetched rows of a lower priority starts
	// before them (a row a worker has started is never put back).
	Prefetch int
	// AsyncCommit (Postgres, lease form) commits each claim-and-ack statement without
	// waiting for its WAL flush (SET LOCAL synchronous_commit = off): a cycle costs no
	// disk flush. Publishes, retries and dead letters stay synchronous, so no accepted
	// job can be lost; but a crash of the database server may forget the last claims
	// and acks, and those jobs run again. Off by default.
	AsyncCommit bool
	// Limits bound the table's jobs in work across every instance, per table and
	// per partition key, and its starts per period; Limits.Fair takes turns
	// between partition keys. Lease form only (a *ConfigError otherwise). See
	// the package doc, Limits.
	Limits Limits
	// Observe, if set, is called once for every settled attempt, from the
	// subscription's goroutines; it must not block for long.
	Observe func(Result)
}

// Job is one claimed job as its handler sees it.
type Job[T any] struct {
	ID int64
	// Attempt counts the claims of this row, this one included (0 on a table without
	// an Attempts column).
	Attempt int
	Payload T
}

// Handler handles one job. Return nil to ack; Retry, Snooze, Drop or DeadLetter to say so;
// any other error (or a panic) is a failed attempt, retried after Backoff and
// dead-lettered at MaxAttempts. ctx is cancelled when the claim is lost (the cause is
// a *LeaseLostError: the lease could not be extended in time, or the connection
// holding a row or advisory lock failed), when Stop's deadline passes, or when
// Start's context ends, or when Queue.Cancel cancels the job (the cause is
// ErrJobCancelled; the job is then settled as Cancelled whatever the handler
// returns); a handler must return soon after, since another instance may be running
// the same job by then.
type Handler[T any] func(ctx context.Context, job Job[T]) error

// Causes of the cancellation of the subscription's contexts.
var (
	errAbandon = errors.New("inbox: subscription abandoned (start context ended)")
	errRelease = errors.New("inbox: subscription stopping (stop deadline passed)")
	errHalt    = errors.New("inbox: subscription halted (stop deadline passed long enough ago)")
)

// stopGrace is how long Stop goes on after its context ends: the first four fifths
// to release the jobs whose handlers were cancelled, the last fifth for the
// subscription's goroutines to return once every statement is cancelled.
const stopGrace = 500 * time.Millisecond

// Subscription handles a queue's jobs with up to Workers of them in work at once.
// Start it, then Stop it; it runs once. Its goroutines are its own: Stop (or the end
// of Start's context) ends them all, and Done is closed when they have returned.
type Subscription[T any] struct {
	q *Queue[T]
	h Handler[T]
	o SubscribeOptions
	// bh is the handler of a SubscribeBatch subscription (h is nil then), which
	// claims up to batch rows per call; batch is 1 otherwise.
	bh    BatchHandler[T]
	batch int
	// adaptive: Prefetch is the default, used only while handlers are fast (see
	// Subscription.limit).
	adaptive bool
	// dispatched counts the rows the lease form handed to its workers (tests wait
	// on it: export_test.go).
	dispatched atomic.Int64
	// slotted: Limits.Concurrency is held by slots (slots.go).
	slotted bool
	// lanes are the lease form's lanes, made by launch (read by tests).
	lanes []*lane

	w         *waker
	conns     chan struct{} // one token per connection the subscription may hold
	stopClaim chan struct{} // closed by Stop: claim no more
	done      chan struct{} // closed when every goroutine has returned

	mu      sync.Mutex // guards started, stopped
	started bool
	stopped bool

	// The contexts, made by launch. ctx bounds every statement and every wait of the
	// subscription's goroutines: it ends with Start's context (cause errAbandon) or
	// stopGrace*4/5 after Stop's deadline (errHalt). workCtx, its child, is the parent
	// of every handler's context and also ends at Stop's deadline (errRelease).
	// claimCtx, another child, bounds the lock forms' claims and ends when Stop is
	// called, so that a claim waiting for a connection does not hold Stop up.
	ctx         context.Context
	cancel      context.CancelCauseFunc
	workCtx     context.Context
	workCancel  context.CancelCauseFunc
	claimCtx    context.Context
	claimCancel context.CancelFunc
	stopWatch   func() bool // stops the AfterFunc on Start's ctx
}

// Subscribe makes a subscription of h on the queue's table. It checks the options and
// that the database can do the form (a *FormError otherwise); Start checks the table.
func (q *Queue[T]) Subscribe(h Handler[T], o SubscribeOptions) (*Subscription[T], error) {
	if h == nil {
		return nil, &ConfigError{Field: "handler", Reason: "nil"}
	}
	return q.subscribe(h, nil, 1, o)
}

func (q *Queue[T]) subscribe(h Handler[T], bh BatchHandler[T], batch int, o SubscribeOptions) (*Subscription[T], error) {
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Workers < 0 {
		return nil, &ConfigError{Field: "Workers", Reason: "negative"}
	}
	adaptive := false
	slotted := o.Form == Lease && o.Limits.slotted()
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < 2*time.Millisecond {
		return nil, &ConfigError{Field: "Lease", Reason: "shorter than 2ms"}
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PollInterval < 0 {
		return nil, &ConfigError{Field: "PollInterval", Reason: "negative"}
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Claimers == 0 {
		o.Claimers = DefaultClaimers
	}
	switch {
	case o.Prefetch == NoPrefetch:
		o.Prefetch = 0
	case o.Prefetch < 0:
		return nil, &ConfigError{Field: "Prefetch", Reason: "negative (NoPrefetch is -1)"}
	case o.Prefetch == 0 && o.Form == Lease && (o.Limits == (Limits{}) || o.Limits.prefetches(bh != nil)):
		o.Prefetch = DefaultPrefetch * o.Workers
		adaptive = true
	}
	if o.Workers > MaxHeld/batch || o.Prefetch > MaxHeld-o.Workers*batch {
		return nil, &ConfigError{Field: "Workers", Reason: fmt.Sprintf("%d workers of %d jobs each and a Prefetch of %d hold more than MaxHeld (%d) rows", o.Workers, batch, o.Prefetch, MaxHeld)}
	}
	if o.Claimers < 0 {
		return nil, &ConfigError{Field: "Claimers", Reason: "negative"}
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	switch o.Form {
	case Lease:
		if q.clock == DatabaseClock {
			return nil, &FormError{Form: o.Form, Dialect: q.dialect, Reason: "the lease form keeps the host clock; a DatabaseClock queue uses RowLock or AdvisoryLock"}
		}
	case RowLock, AdvisoryLock:
		if q.dialect != Postgres {
			return nil, &FormError{Form: o.Form, Dialect: q.dialect, Reason: "needs Postgres; SQLite has the lease form only"}
		}
	default:
		return nil, &FormError{Form: o.Form, Dialect: q.dialect, Reason: "unknown form"}
	}
	if err := q.checkLimits(&o); err != nil {
		return nil, err
	}
	s := &Subscription[T]{
		q: q, h: h, o: o, adaptive: adaptive, slotted: slotted, bh: bh, batch: batch,
		w:         &waker{},
		stopClaim: make(chan struct{}),
		done:      make(chan struct{}),
	}
	// Pool rule: never more than pool size - 1 connections (at least one).
	// A ListenNotify queue's listener holds one more for its whole life.
	limit := o.Workers + 1
	if size := q.poolSize(); size > 0 {
		limit = size - 1
		if q.notify {
			limit--
		}
		limit = max(1, limit)
	}
	s.conns = make(chan struct{}, limit)
	return s, nil
}

// poolSize reports the pool's maximum connections, 0 if unlimited.
func (q *Queue[T]) poolSize() int {
	if q.dialect == SQLite {
		return q.sqldb.Stats().MaxOpenConnections
	}
	return int(q.pool.Config().MaxConns)
}

// Start checks every statement of the subscription against the real table (a
// *StatementError names the table and the statement it refuses) and the table's
// columns (a *ColumnError names a column whose definition would break claims, such
// as a lock deadline that allows NULL without Columns.LockedUntilNullable), then
// starts the subscription's goroutines and returns. ctx is the subscription's lifetime: when it
// ends, handlers are cancelled and jobs in work are abandoned unsettled, as in a
// crash (leased jobs are claimed again once their lease expires); use Stop to end
// gracefully. A second Start, or a Start that Stop overtook while it checked the
// table, returns ErrStopped.
func (s *Subscription[T]) Start(ctx context.Context) error {
	if err := s.begin(); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		s.fail()
		return err
	}
	if !s.launch(ctx) {
		return ErrStopped
	}
	return nil
}

// begin marks the subscription started; a second call returns ErrStopped.
func (s *Subscription[T]) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return ErrStopped
	}
	s.started = true
	return nil
}

// fail ends a subscription whose start failed.
func (s *Subscription[T]) fail() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	close(s.done)
}

// launch starts the goroutines of a checked subscription. A subscription stopped
// while Start was checking it is not launched: launch closes done and reports false.
func (s *Subscription[T]) launch(ctx context.Context) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		close(s.done)
		return false
	}
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	s.workCtx, s.workCancel = context.WithCancelCause(s.ctx)
	s.claimCtx, s.claimCancel = context.WithCancel(s.ctx)
	s.mu.Unlock()
	s.stopWatch = context.AfterFunc(ctx, func() { s.cancel(errAbandon) })
	s.q.addWaker(s.w)
	if s.q.notify {
		s.q.listen(s.w)
	}
	s.q.stmts.acquire()
	var wg sync.WaitGroup
	if s.o.Form == Lease {
		lanes := 1
		if s.q.dialect == Postgres {
			lanes = min(s.o.Claimers, s.o.Workers, cap(s.conns))
		}
		for i := range lanes {
			l := &lane{n: s.o.Workers / lanes}
			if i < s.o.Workers%lanes {
				l.n++
			}
			s.lanes = append(s.lanes, l)
			l.work = l.n * max(s.batch, 1)
			l.max = l.work + s.o.Prefetch/lanes
			l.jobs = make(chan *leased, l.max)
			l.chunks = make(chan []*leased, l.max)
			l.settleCh = make(chan settlement, l.max)
			if s.slotted {
				l.slots = newLaneSlots(&s.q.health.limitWaiting)
			}
			if s.o.Limits.PerPartition > 0 {
				l.keys = newKeySlots(&s.q.health.limitWaiting)
			}
			for range l.n {
				if s.bh != nil {
					wg.Go(func() { s.leaseBatchWorker(l) })
				} else {
					wg.Go(func() { s.leaseWorker(l) })
				}
			}
			wg.Go(func() {
				s.leaseLoop(l)
				close(l.jobs)
				close(l.chunks)
			})
		}
	} else {
		for range s.o.Workers {
			wg.Go(s.lockWorker)
		}
	}
	go func() {
		wg.Wait()
		s.q.stmts.release()
		s.q.removeWaker(s.w)
		if s.q.notify {
			s.q.unlisten(s.w)
		}
		s.stopWatch()
		s.cancel(context.Canceled)
		close(s.done)
	}()
	return true
}

// Stop ends the subscription gracefully: it claims no more, waits for the jobs in work
// to finish and settles them, and returns nil once every goroutine of the
// subscription has returned.
//
// If ctx ends first, Stop keeps its deadline: it cancels the handlers' contexts and
// releases the jobs they had not finished (ready at once for another instance, their
// attempt not counted) for as long as the next 0.4 s allows; then it cancels every
// statement and wait still in flight, and returns ctx's error at most 0.5 s after ctx
// ended, whatever the database does. Jobs it could not release by then are left to
// their lease (or, in the lock forms, to the end of their connection). Done is
// closed when the last goroutine has returned: by the time Stop returns, unless a
// handler ignores its context.
//
// Stop on a subscription never started, or stopped already, returns nil. Safe for
// concurrent use.
func (s *Subscription[T]) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		if !s.stopped {
			s.stopped = true
			close(s.done)
		}
		s.mu.Unlock()
		return nil
	}
	if !s.stopped {
		s.stopped = true
		close(s.stopClaim)
		if s.claimCancel != nil {
			s.claimCancel()
		}
	}
	launched := s.workCancel != nil
	s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	if !launched {
		// Start is still checking the table; it will see the stop and not launch.
		return ctx.Err()
	}
	s.workCancel(errRelease)
	t := time.NewTimer(stopGrace * 4 / 5)
	defer t.Stop()
	select {
	case <-s.done:
		return ctx.Err()
	case <-t.C:
	}
	s.cancel(errHalt)
	t.Reset(stopGrace / 5)
	select {
	case <-s.done:
	case <-t.C:
	}
	return ctx.Err()
}

// Done is closed once every goroutine of the subscription has returned: after Stop,
// or after Start's context ended.
func (s *Subscription[T]) Done() <-chan struct{} { return s.done }

// check prepares every statement the subscription will run against the real table.
func (s *Subscription[T]) check(ctx context.Context) error {
	q := s.q
	now := q.now()
	var stmts []string
	add := func(sql string, _ []any) { stmts = append(stmts, sql) }
	switch s.o.Form {
	case Lease:
		if s.slotted || s.o.Limits.Rate > 0 {
			n := 0
			if s.slotted {
				n = s.o.Limits.Concurrency
			}
			if err := q.ensureSlots(ctx, n, s.o.Limits.Rate > 0, s.o.Lease, false); err != nil {
				return fmt.Errorf("inbox: %s: make the table of Limits: %w", q.name, err)
			}
		}
		if q.dialect == Postgres && s.o.Limits.Rate > 0 {
			add(q.rateReserveSQL(s.o.Limits.Per), nil)
		}
		if s.o.Limits.PerPartition > 0 {
			if err := q.ensureSlots(ctx, 0, false, s.o.Lease, false); err != nil {
				return fmt.Errorf("inbox: %s: make the table of Limits: %w", q.name, err)
			}
			if q.dialect == SQLite {
				kept, ka, got, ga := q.sqliteKeyTakeSQL(nil, nil, 0, now, now, now, 1, 1, 1)
				add(kept, ka)
				add(got, ga)
			} else {
				add(q.keyTakeSQL(nil, nil, 0.5, 1, 1, 0, now, now, now, 1, 1, 1))
			}
			add(q.keyWalkSQL(nil, 0.5, 1, 1, now))
			add(q.keyDropSQL(now, 1))
			add(q.keyDropKeysSQL([]string{"k"}, now, 1))
		}
		if s.slotted {
			if q.dialect == SQLite {
				kept, ka, got, ga := q.sqliteSlotSQL(nil, 0, now, now, now, 1, 1, false)
				add(kept, ka)
				add(got, ga)
			} else {
				add(q.slotSyncSQL(nil, 0, now, now, now, 1, 1, false))
			}
			add(q.slotFreeSQL(nil, 0, now))
		}
		if q.dialect == SQLite && s.o.Limits.PerPartition > 0 {
			add(q.sqliteKeyedClaimSQL(s.claimLimits(), []string{""}, []int{1}, true, now, now, 1))
		}
		if q.dialect == SQLite {
			add(q.leaseClaimSQL(s.claimLimits(), now, now, 1))
			if s.o.Limits.Rate > 0 {
				add(q.rateBumpSQL("?1", "?2", s.o.Limits.Per), nil)
			}
		} else {
			var kc *keyClaim
			if s.o.Limits.PerPartition > 0 {
				kc = &keyClaim{}
			}
			add(q.pgAckClaimSQL(s.claimLimits(), nil, nil, now, now, 1, kc))
			if kc != nil {
				take := &keyTakeReq{until: now, deadline: now, now: now, w: 1, enough: 1, k: 1, n: 1, per: 1}
				add(q.pgAckClaimSQL(s.claimLimits(), nil, nil, now, now, 1, &keyClaim{take: take}))
			}
			add(q.pgAckClaimSQL(s.claimLimits(), nil, nil, now, now, 0, nil))
		}
		add(q.settleSQL(skExtend, 0, fence{lease: &now}, now, 0, "", now))
		for _, k := range []settleKind{skAck, skRetry, skDead, skRelease, skSnooze} {
			add(q.settleSQL(k, 0, fence{lease: &now}, now, time.Second, "", now))
		}
		if q.c.CancelledAt != "" {
			add(q.cancelledSQL([]int64{0}))
		}
	case RowLock, AdvisoryLock:
		if s.o.Form == RowLock {
			add(q.rowClaimSQL(now, s.o.Lease, s.batch))
			add(q.rowHoldSQL(0, now))
			add(q.rowFreeSQL(0, now, now))
		} else {
			add(q.candidatesSQL(now, 1))
			add(q.takeSQL(0, now))
		}
		for _, k := range []settleKind{skAck, skRetry, skDead, skRelease, skSnooze, skCancel} {
			add(q.settleSQL(k, 0, fence{attempt: 1, byAttempt: true, live: true}, now, time.Second, "", now))
		}
		if q.c.CancelledAt != "" {
			stmts = append(stmts, q.heldCheckSQL())
		}
	}
	if q.dialect == SQLite {
		// Without a busy timeout, two writers would meet "database is locked".
		var ms int64
		if err := q.sqldb.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
			return fmt.Errorf("inbox: %s: read busy_timeout: %w", q.name, err)
		}
		if ms == 0 {
			return &ConfigError{Field: "db", Reason: "SQLite busy_timeout is 0: open the database with OpenSQLite or set _pragma=busy_timeout(ms)"}
		}
	}
	if err := q.checkGroupColumns(ctx); err != nil {
		return err
	}
	for _, st := range stmts {
		if err := q.prepare(ctx, st); err != nil {
			return &StatementError{Table: q.name, Statement: st, Err: err}
		}
	}
	return q.checkColumns(ctx)
}

// prepare asks the database to prepare a statement without running it.
func (q *Queue[T]) prepare(ctx context.Context, sql string) error {
	if q.dialect == SQLite {
		conn, err := q.sqldb.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		// A connection reads the schema again only when a statement runs, so a
		// prepare alone checks against the schema it cached, from before a table
		// was dropped: read the schema tables first.
		schemas := []string{"main"}
		if i := strings.LastIndex(q.name, "."); i >= 0 {
			schemas = append(schemas, q.name[:i])
		}
		for _, sc := range schemas {
			var n int64
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM "`+sc+`".sqlite_master`).Scan(&n); err != nil {
				return err
			}
		}
		st, err := conn.PrepareContext(ctx, sql)
		if err != nil {
			return err
		}
		return st.Close()
	}
	c, err := q.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	_, err = c.Conn().PgConn().Prepare(ctx, "", sql, nil)
	return err
}

// run decodes the payload and calls the handler. A decode error, or a panic of the
// codec, is a *DecodeError (the job is dead-lettered); a panic of the handler is a
// *PanicError (a failed attempt).
//
// Every attempt is timed for Timings.
func (s *Subscription[T]) run(ctx context.Context, id int64, attempt int, payload []byte, m jobMeta) error {
	start := time.Now()
	v, err := s.decode(id, payload)
	if err == nil {
		err = s.call(ctx, Job[T]{ID: id, Attempt: attempt, Payload: v}, m)
	}
	s.timed(ctx, start, attempt, m, err)
	return err
}

func (s *Subscription[T]) decode(id int64, payload []byte) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DecodeError{ID: id, Err: &PanicError{Value: r, Stack: debug.Stack()}}
		}
	}()
	v, err = s.q.codec.Decode(payload)
	if err != nil {
		return v, &DecodeError{ID: id, Err: err}
	}
	return v, nil
}

func (s *Subscription[T]) call(ctx context.Context, j Job[T], m jobMeta) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	if s.q.hooks.Handle != nil {
		return s.hookHandle(ctx, j, m)
	}
	return s.h(ctx, j)
}

// observe reports a settled attempt to Observe and the log.
func (s *Subscription[T]) observe(r Result) {
	log := s.q.log
	switch {
	case r.SettleErr == nil && r.Outcome >= Acked && r.Outcome <= lastOutcome:
		s.q.outcomes[r.Outcome].Add(1)
	case errors.Is(r.SettleErr, ErrLeaseLost):
		s.q.outcomes[0].Add(1)
	}
	switch {
	case r.SettleErr != nil && errors.Is(r.SettleErr, ErrLeaseLost):
		log.Warn("inbox: lease lost; the newer claim's result stands", "table", s.q.name, "id", r.ID, "outcome", r.Outcome.String())
	case r.SettleErr != nil:
		log.Error("inbox: settlement failed", "table", s.q.name, "id", r.ID, "outcome", r.Outcome.String(), "err", r.SettleErr)
	case r.Outcome == Dropped:
		log.Warn("inbox: job dropped", "table", s.q.name, "id", r.ID, "err", r.Err)
	case r.Outcome == DeadLettered:
		log.Warn("inbox: job dead-lettered", "table", s.q.name, "id", r.ID, "attempt", r.Attempt, "err", r.Err)
	}
	if s.o.Observe != nil {
		s.o.Observe(r)
	}
}

// pause waits d, or less if the subscription is abandoned; it reports false then.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
