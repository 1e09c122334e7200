package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// PeriodicJob is one kind of job published on a schedule.
type PeriodicJob[T any] struct {
	// Kind names the schedule in the ticks table: unique per table, at most 200
	// bytes. Instances that share a table share their kinds' ticks.
	Kind string
	// Schedule is a five-field cron schedule (see Cron).
	Schedule string
	// Job makes the job for a tick (the time it was due, in PeriodicOptions.Location).
	Job func(tick time.Time) T
	// Opts are the publish options of each job (Priority, Group, Partition;
	// RunAt and Unique are refused: the tick is the run time, and the tick is
	// what is unique).
	Opts *PublishOpts
}

// PeriodicOptions configure a Periodic. The zero value is valid.
type PeriodicOptions struct {
	// Location is where the schedules' wall times are read. Defaults to UTC.
	Location *time.Location
	// TicksTable is the table of the last tick inserted per kind. Defaults to the
	// queue's table with the suffix _periodic, which Migrate makes from schema
	// version 3; a table of your own needs kind TEXT PRIMARY KEY and last_tick (an
	// INTEGER of Unix microseconds on SQLite, TIMESTAMPTZ on Postgres).
	TicksTable string
}

// Periodic publishes jobs on their schedules, each tick's job exactly once across
// every instance running a Periodic with the same kind on the same table: the
// instance that advances the kind's last tick in the ticks table (a compare and
// set) inserts the job in the same transaction; the others find the tick taken.
//
// Missed ticks are coalesced: when the latest tick due is later than the kind's
// last tick plus one (every instance was down, or stopped, across several ticks),
// one job is inserted, for the latest tick due, and the ticks before it are
// skipped. A kind seen for the first time starts at the next tick. So a schedule
// never floods the queue after downtime, and never runs a tick twice.
//
// Ticks are read on each instance's clock. On Postgres a tick more than a minute
// ahead of the database's clock is refused (logged at WARN), so that an instance
// whose clock jumped ahead cannot take a tick of the future and make the others
// skip the ticks before it. On SQLite every instance shares the host's clock: a
// jump ahead and back there takes the tick of the future once, and the ticks
// before it are skipped. A Job that panics fails its tick (a *PanicError,
// logged), which is tried again.
//
// A Periodic owns one goroutine between Start and Stop. Safe for concurrent use.
type Periodic[T any] struct {
	q     *Queue[T]
	jobs  []PeriodicJob[T]
	crons []Cron
	loc   *time.Location
	ticks string // quoted

	mu      sync.Mutex
	started bool
	stop    chan struct{}
	done    chan struct{}
}

// maxKindLen bounds PeriodicJob.Kind.
const maxKindLen = 200

// Periodic makes a Periodic of jobs on the queue. It parses every schedule: one
// that does not parse or never fires is a *CronError; a missing Job, an empty,
// repeated or overlong Kind (or one with a control character or invalid UTF-8),
// or Opts with RunAt or Unique, or with a Group or Partition the queue has no
// column for or cannot store, is a *ConfigError.
func (q *Queue[T]) Periodic(jobs []PeriodicJob[T], o PeriodicOptions) (*Periodic[T], error) {
	p := &Periodic[T]{q: q, jobs: jobs, loc: o.Location, stop: make(chan struct{}), done: make(chan struct{})}
	if p.loc == nil {
		p.loc = time.UTC
	}
	ticks := o.TicksTable
	if ticks == "" {
		ticks = q.name + "_periodic"
	}
	if !isIdent(ticks) {
		return nil, &ConfigError{Field: "TicksTable", Reason: fmt.Sprintf("%q is not a plain SQL identifier", ticks)}
	}
	p.ticks = quoteIdent(ticks)
	seen := map[string]bool{}
	for _, j := range jobs {
		switch {
		case j.Kind == "" || len(j.Kind) > maxKindLen:
			return nil, &ConfigError{Field: "PeriodicJob.Kind", Reason: fmt.Sprintf("%q: empty or longer than %d bytes", j.Kind, maxKindLen)}
		case checkKey("PeriodicJob.Kind", j.Kind) != nil:
			return nil, checkKey("PeriodicJob.Kind", j.Kind)
		case seen[j.Kind]:
			return nil, &ConfigError{Field: "PeriodicJob.Kind", Reason: fmt.Sprintf("%q given twice", j.Kind)}
		case j.Job == nil:
			return nil, &ConfigError{Field: "PeriodicJob.Job", Reason: "nil for kind " + j.Kind}
		case j.Opts != nil && (!j.Opts.RunAt.IsZero() || j.Opts.Unique != nil):
			return nil, &ConfigError{Field: "PeriodicJob.Opts", Reason: "RunAt and Unique are the tick's"}
		case j.Opts != nil && j.Opts.Group != "" && q.c.Group == "":
			return nil, &ConfigError{Field: "PeriodicJob.Opts.Group", Reason: "the queue's Columns name no Group column"}
		case j.Opts != nil && j.Opts.Partition != "" && q.c.Partition == "":
			return nil, &ConfigError{Field: "PeriodicJob.Opts.Partition", Reason: "the queue's Columns name no Partition column"}
		}
		if j.Opts != nil {
			if err := checkKey("PeriodicJob.Opts.Group", j.Opts.Group); err != nil {
				return nil, err
			}
			if err := checkKey("PeriodicJob.Opts.Partition", j.Opts.Partition); err != nil {
				return nil, err
			}
		}
		seen[j.Kind] = true
		c, err := ParseCron(j.Schedule)
		if err != nil {
			return nil, err
		}
		p.crons = append(p.crons, c)
	}
	return p, nil
}

// Start checks the tables and starts the Periodic's goroutine, which publishes
// each kind's due tick at once and then sleeps until the next tick of any kind.
// The check asks the database to prepare the statements of a tick, as
// Subscription.Start does: a ticks table or job table that is missing, or lacks
// a column they use, is a *StatementError, and nothing is started (run Migrate,
// or make TicksTable, then Start again). A tick whose transaction fails later
// (the database is unreachable) is tried again every second until the next tick
// is due, logged at WARN. A second Start after one that started returns
// ErrStopped. ctx bounds the check, and the goroutine's life as Stop does.
func (p *Periodic[T]) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return ErrStopped
	}
	if err := p.check(ctx); err != nil {
		return err
	}
	p.started = true
	go p.loop(ctx)
	return nil
}

// check prepares the statements of a tick (the ticks table's two and the
// publish), so that a missing table or column fails Start rather than every tick.
func (p *Periodic[T]) check(ctx context.Context) error {
	q := p.q
	for _, st := range []struct{ table, sql string }{
		{p.ticks, p.insertTickSQL()},
		{p.ticks, p.advanceTickSQL()},
		{q.name, q.publishSQL()},
	} {
		if err := q.prepare(ctx, st.sql); err != nil {
			return &StatementError{Table: st.table, Statement: st.sql, Err: err}
		}
	}
	return nil
}

// insertTickSQL records a kind's first tick: $1 kind, $2 tick.
func (p *Periodic[T]) insertTickSQL() string {
	q := p.q
	return "INSERT INTO " + p.ticks + " (kind, last_tick) VALUES (" + q.p(1) + ", " + q.p(2) + ") ON CONFLICT (kind) DO NOTHING"
}

// advanceTickSQL advances a kind's last tick to a later one: $1 kind, $2 tick.
func (p *Periodic[T]) advanceTickSQL() string {
	q := p.q
	return "UPDATE " + p.ticks + " SET last_tick = " + q.p(2) + " WHERE kind = " + q.p(1) + " AND last_tick < " + q.p(2)
}

// Stop ends the goroutine and waits for it, or for ctx (whose error it returns);
// a tick's transaction in flight is cancelled. Stop before Start, or twice,
// returns nil.
func (p *Periodic[T]) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started {
		p.started = true
		close(p.done)
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Periodic[T]) loop(ctx context.Context) {
	defer close(p.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		wait := time.Hour
		if _, err := p.runDue(ctx, now); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.q.log.Warn("inbox: periodic tick failed; trying again", "table", p.q.name, "err", err)
			wait = time.Second
		}
		for _, c := range p.crons {
			if n := c.Next(now.In(p.loc)); !n.IsZero() {
				wait = min(wait, time.Until(n))
			}
		}
		t.Reset(max(wait, 0))
	}
}

// lastTick returns the latest tick of c at or before now, or zero if none in the
// last ten years.
func lastTick(c Cron, now time.Time) time.Time {
	// Step back until a tick is found, then forward to the last one not after now.
	for back := time.Minute; back <= 10*366*24*time.Hour; back *= 2 {
		t := c.Next(now.Add(-back))
		if !t.IsZero() && !t.After(now) {
			for {
				n := c.Next(t)
				if n.IsZero() || n.After(now) {
					return t
				}
				t = n
			}
		}
	}
	return time.Time{}
}

// runDue publishes, for every kind whose latest tick due at now is later than its
// last tick, the job of that tick. It reports how many it published.
func (p *Periodic[T]) runDue(ctx context.Context, now time.Time) (int, error) {
	n := 0
	var errs []error
	for i, j := range p.jobs {
		tick := lastTick(p.crons[i], now.In(p.loc))
		if tick.IsZero() {
			continue
		}
		ok, err := p.claimTick(ctx, j, tick)
		if err != nil {
			errs = append(errs, fmt.Errorf("kind %s, tick %s: %w", j.Kind, tick.Format(time.RFC3339), err))
			continue
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// claimTick advances kind's last tick to tick and publishes its job, in one
// transaction; it reports false if another instance (or an earlier call) has.
func (p *Periodic[T]) claimTick(ctx context.Context, j PeriodicJob[T], tick time.Time) (bool, error) {
	q := p.q
	opts := PublishOpts{RunAt: tick}
	if j.Opts != nil {
		opts.Priority, opts.Group, opts.Partition = j.Opts.Priority, j.Opts.Group, j.Opts.Partition
	}
	body := func(db querier) (won bool, err error) {
		// A Job (or codec) that panics fails the tick, which is tried again: the
		// transaction rolls back, so the tick is not lost.
		defer func() {
			if r := recover(); r != nil {
				won, err = false, &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		if q.dialect == Postgres {
			if err := p.checkClock(ctx, db, tick); err != nil {
				return false, err
			}
		}
		first, err := db.exec(ctx, p.insertTickSQL(), j.Kind, q.ts(tick))
		if err != nil {
			return false, err
		}
		if first == 1 {
			return false, nil // a new kind starts at the next tick
		}
		n, err := db.exec(ctx, p.advanceTickSQL(), j.Kind, q.ts(tick))
		if err != nil || n == 0 {
			return false, err
		}
		_, err = q.publish(ctx, db, j.Job(tick), &opts, "") // a tick has no caller to trace
		return err == nil, err
	}
	var won bool
	var err error
	if q.dialect == SQLite {
		err = q.sqliteTx(ctx, func(db querier) error {
			var e error
			won, e = body(db)
			return e
		})
	} else {
		err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
			var e error
			won, e = body(pgQ{tx})
			return e
		})
	}
	if err != nil {
		return false, err
	}
	if won {
		q.Wake()
	}
	return won, nil
}

// maxTickAhead is how far ahead of the database's clock (Postgres) a tick may be
// claimed. A tick is taken only past the kind's last one, so a tick of an
// instance whose clock ran ahead would make every other instance skip the ticks
// up to it; within a minute (cron's resolution) the job still runs at its
// tick, its RunAt.
const maxTickAhead = time.Minute

// checkClock (Postgres) refuses a tick more than maxTickAhead ahead of the
// database's clock.
func (p *Periodic[T]) checkClock(ctx context.Context, db querier, tick time.Time) error {
	r, err := db.query(ctx, "SELECT now()")
	if err != nil {
		return err
	}
	defer r.Close()
	var now time.Time
	if r.Next() {
		err = r.Scan(&now)
	}
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return err
	}
	if ahead := tick.Sub(now); ahead > maxTickAhead {
		return fmt.Errorf("this host's clock is ahead of the database's by more than %v (the tick is %v ahead): tick refused, so that it does not hold back the other instances", maxTickAhead, ahead.Round(time.Second))
	}
	return nil
}

// ticksDDL is the ticks table of a queue's default schema.
func ticksDDL(d Dialect, table string) string {
	ts := "INTEGER"
	if d == Postgres {
		ts = "TIMESTAMPTZ"
	}
	return `CREATE TABLE IF NOT EXISTS ` + quoteIdent(table+"_periodic") + ` (kind TEXT PRIMARY KEY, last_tick ` + ts + ` NOT NULL)`
}
