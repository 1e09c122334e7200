package inbox

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// rowBatchOnce is rowLockOnce for a batch: it claims up to s.batch rows in one
// statement that commits their attempts and lock deadlines, locks them in one
// transaction, runs the batch handler, and commits every settlement together in
// that transaction, or, if the handler failed, rolls it back and retries every job
// with a *BatchFailedError in another.
func (s *Subscription[T]) rowBatchOnce() (found bool, err error) {
	q := s.q
	q.groupCensus(s.claimCtx, s.o.Limits) // before the claim's connection: the census takes one of its own
	conn, err := q.pool.Acquire(s.claimCtx)
	if err != nil {
		return false, err
	}
	healthy := false
	defer releaseHeld(conn, &healthy)
	now := q.now()
	sql, args := q.rowClaimSQL(now, s.o.Lease, s.batch)
	var claimed []batchJob
	var scanErr error
	if err := q.pgClaimQuery(s.claimCtx, conn, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var j batchJob
			var a int64
			var ms metaScan
			if scanErr = rows.Scan(q.metaDest(&ms, &j.id, &a, &j.payload, &j.deadline)...); scanErr != nil {
				return scanErr
			}
			j.attempt, j.meta = int(a), ms.meta()
			claimed = append(claimed, j)
		}
		return nil
	}); err != nil {
		if scanErr != nil {
			return true, err // committed: the rows are claimed again past their deadline
		}
		return false, err
	}
	if len(claimed) == 0 {
		healthy = true
		return false, nil
	}
	var jobs []batchJob
	for i, j := range claimed {
		xerr := s.exhausted(j.id, j.attempt)
		if xerr == nil {
			jobs = append(jobs, j)
			continue
		}
		if !s.settleExhausted(pgQ{conn}, j.id, j.attempt, xerr) {
			s.handBackAll(append(jobs, claimed[i+1:]...))
			return true, nil
		}
	}
	if len(jobs) == 0 {
		healthy = true
		return true, nil
	}
	tx, err := conn.Begin(s.claimCtx)
	var held []batchJob
	if err == nil {
		for _, j := range jobs {
			sql, args := q.rowHoldSQL(j.id, j.deadline)
			var one int
			e := tx.QueryRow(s.claimCtx, sql, args...).Scan(&one)
			if errors.Is(e, pgx.ErrNoRows) {
				// Written since the claim: only Cancel does that.
				r := Result{ID: j.id, Attempt: j.attempt, Outcome: Cancelled, Err: ErrJobCancelled}
				if !q.isCancelledRow(s.claimCtx, pgQ{conn}, j.id) {
					r.SettleErr = s.lostSettle(j.id, Released, nil)
				}
				s.observe(r)
				continue
			}
			if e != nil {
				err = e
				break
			}
			held = append(held, j)
		}
	}
	if err != nil {
		// Stopped, or the connection failed, between the claim and the locks.
		if tx != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = tx.Rollback(ctx)
			cancel()
		}
		s.handBackAll(jobs)
		return true, nil
	}
	rolledBack := false
	rollback := func() {
		if !rolledBack {
			rolledBack = true
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = tx.Rollback(ctx)
			cancel()
		}
	}
	defer rollback()
	if len(held) == 0 {
		healthy = true
		return true, nil
	}
	pc := conn.Conn().PgConn()
	lost, cancelled, errs, began := s.runHeldBatch(pc, held)
	if s.ctx.Err() != nil {
		for _, j := range held {
			s.unsettled(j.id)
		}
		return true, nil // rolled back: the rows stay in work until their deadline, as in a crash
	}
	ds := make([]decision, len(held))
	fail := -1
	byCancel := slices.Contains(cancelled, true)
	for i, j := range held {
		ds[i] = decide(errs[i], j.attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
		switch {
		case cancelled[i]:
			ds[i] = decision{out: Cancelled, err: ErrJobCancelled}
		case errs[i] != nil && context.Cause(s.workCtx) == errRelease:
			ds[i] = decision{out: Released, err: errs[i]}
		case byCancel && endedByCancel(errs[i]):
			// Stopped by another job's cancel: released, not a failure that
			// rolls the batch back.
			ds[i] = decision{out: Released, err: errs[i]}
		case !isVerdict(errs[i]) && fail < 0:
			fail = i
		}
	}
	defer func() { s.timeBatch(began, held, ds) }() // by the decisions the batch commits
	if lost != nil {
		for i, j := range held {
			s.observe(Result{ID: j.id, Attempt: j.attempt, Outcome: ds[i].out, Err: ds[i].err, SettleErr: s.lostSettle(j.id, ds[i].out, lost.Err)})
			s.freeLost(j.id, j.deadline)
		}
		return true, nil
	}
	var committed bool
	var rs []Result
	if fail < 0 {
		rs, committed = s.settleBatch(tx, pc, held, ds)
		rolledBack = rolledBack || committed
	} else {
		// One failure rolls the batch back: every job is a failed attempt.
		rollback()
		bf := &BatchFailedError{Table: q.name, ID: held[fail].id, Jobs: len(held), Err: errs[fail]}
		for i, j := range held {
			if ds[i].out != Cancelled && ds[i].out != Released {
				ds[i] = decide(bf, j.attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
			}
		}
		tx2, err := conn.Begin(s.ctx)
		if err != nil {
			rs = make([]Result, len(held))
			for i, j := range held {
				rs[i] = Result{ID: j.id, Attempt: j.attempt, Outcome: ds[i].out, Err: ds[i].err, SettleErr: s.settleErr(pc, j.id, ds[i].out, err)}
			}
		} else {
			rs, committed = s.settleBatch(tx2, pc, held, ds)
			if !committed {
				ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				_ = tx2.Rollback(ctx)
				cancel()
			}
		}
	}
	for _, r := range rs {
		s.observe(r)
	}
	healthy = committed || !pc.IsClosed()
	return true, nil
}

// settleBatch writes the settlement of every held job in tx, each fenced by the
// attempt its claim wrote, and commits them together. A row its fence no longer
// matches is reported lost; a statement or commit that fails fails them all.
func (s *Subscription[T]) settleBatch(tx pgx.Tx, pc *pgconn.PgConn, held []batchJob, ds []decision) ([]Result, bool) {
	q := s.q
	rs := make([]Result, len(held))
	var err error
	for i, j := range held {
		rs[i] = Result{ID: j.id, Attempt: j.attempt, Outcome: ds[i].out, Err: ds[i].err}
		if err != nil {
			continue
		}
		sql, args := q.settleSQL(kindOf(ds[i].out), j.id, s.attemptFence(j.attempt), q.now(), ds[i].delay, errText(ds[i].err), time.Time{})
		var tag pgconn.CommandTag
		tag, err = tx.Exec(s.ctx, sql, args...)
		if err == nil && tag.RowsAffected() == 0 {
			rs[i].SettleErr = s.lostSettle(j.id, ds[i].out, nil)
		}
	}
	if err == nil {
		err = tx.Commit(s.ctx)
	}
	if err != nil {
		for i, j := range held {
			if rs[i].SettleErr == nil {
				rs[i].SettleErr = s.settleErr(pc, j.id, ds[i].out, err)
			}
		}
		return rs, false
	}
	return rs, true
}

// runHeldBatch is runHeld for a batch: the handler's context ends when the held
// connection is lost (a *LeaseLostError, also returned) or when any of the jobs is
// cancelled (cancelled[i] reports which).
func (s *Subscription[T]) runHeldBatch(pc *pgconn.PgConn, jobs []batchJob) (lost *LeaseLostError, cancelled []bool, errs []error, began time.Time) {
	hctx, cancel := context.WithCancelCause(s.workCtx)
	defer cancel(nil)
	var mu sync.Mutex
	marked := make([]bool, len(jobs))
	mark := func(i int) {
		mu.Lock()
		marked[i] = true
		mu.Unlock()
		cancel(ErrJobCancelled)
	}
	for i, j := range jobs {
		s.q.runs.add(j.id, func(cause error) {
			if cause == ErrJobCancelled {
				mark(i)
				return
			}
			cancel(cause)
		})
		defer s.q.runs.remove(j.id)
	}
	var check func(context.Context) (bool, error)
	hit := -1
	if s.q.c.CancelledAt != "" {
		sql := s.q.heldCheckSQL()
		check = func(ctx context.Context) (bool, error) {
			for i, j := range jobs {
				args := [][]byte{[]byte(strconv.FormatInt(j.id, 10)), []byte(strconv.FormatInt(s.q.cancelKey(j.id), 10))}
				r := pc.ExecParams(ctx, sql, args, nil, nil, nil).Read()
				if r.Err != nil {
					return false, r.Err
				}
				if len(r.Rows) == 1 && len(r.Rows[0]) == 1 && string(r.Rows[0][0]) == "t" {
					hit = i // read by the cancelled callback, on the same goroutine
					return true, nil
				}
			}
			return false, nil
		}
	}
	w := watchConn(pc, func(err error) {
		le := &LeaseLostError{Table: s.q.name, ID: jobs[0].id, Op: "lock", Err: err}
		lost = le // read after w.stop, which waits for this goroutine
		cancel(le)
		if context.Cause(hctx) == le {
			for _, j := range jobs {
				s.claimLost(j.id, le)
			}
		}
	}, check, func() {
		if hit >= 0 {
			mark(hit)
		}
	})
	errs, began = s.runBatch(hctx, jobs)
	w.stop()
	mu.Lock()
	defer mu.Unlock()
	return lost, marked, errs, began
}

// handBackAll hands back every row of a batch claim that could not be held.
func (s *Subscription[T]) handBackAll(jobs []batchJob) {
	for _, j := range jobs {
		s.handBack(j.id, j.attempt, j.deadline)
	}
}
