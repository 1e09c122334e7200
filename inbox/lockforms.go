package inbox

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// closeTimeout bounds the rollback or close of a lock form's connection after its job.
const closeTimeout = time.Second

// lockWorker is one worker of the RowLock or AdvisoryLock form: it holds its own
// claim, on its own connection, while its handler runs. It returns when Stop is
// called (after its job in work, if any) or when s.ctx ends.
func (s *Subscription[T]) lockWorker() {
	r := newRetrier(&s.q.health, s.q.log, "table", s.q.name, "form", s.o.Form.String())
	defer r.done()
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	var nextSweep time.Time // sweepCancelled
	for {
		select {
		case <-s.stopClaim:
			return
		case <-s.ctx.Done():
			return
		case s.conns <- struct{}{}:
		}
		woken := s.w.wait()
		var found bool
		var err error
		switch {
		case s.bh != nil:
			found, err = s.rowBatchOnce()
		case s.o.Form == RowLock:
			found, err = s.rowLockOnce()
		default:
			found, err = s.advisoryOnce()
		}
		<-s.conns
		if s.claimCtx.Err() != nil {
			return // stopped (or ended) while claiming, or after a job
		}
		if err != nil {
			if !r.failed(s.claimCtx, "claim", err) {
				return
			}
			continue
		}
		r.ok()
		s.sweepCancelled(&nextSweep)
		if found {
			continue // the claim came back full: claim again at once
		}
		poll.Reset(s.o.PollInterval)
		select {
		case <-poll.C:
		case <-woken:
		case <-s.stopClaim:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// releaseHeld ends a lock form's use of a pooled connection: it goes back to the
// pool only if *healthy says it holds no lock and no open transaction; otherwise it
// is closed (bounded by closeTimeout), since a connection that may still hold a lock
// must not be handed to another claim.
func releaseHeld(conn *pgxpool.Conn, healthy *bool) {
	if !*healthy {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = conn.Conn().Close(ctx)
		cancel()
	}
	conn.Release()
}

// rowLockOnce claims one row, handles it and settles it in a transaction that holds
// the row's lock while the handler runs. The claim commits first, on its own: it
// counts the attempt and writes a lock deadline Lease from now, so that a holder that
// vanishes (its process killed, its connection lost) leaves a row in work that is
// claimed again once the deadline passes, its attempt counted; a row claimed more
// than MaxAttempts times is dead-lettered by that claim. found is false when no row
// was claimable; err is a failure of the claim (what happens after it is reported
// through observe).
func (s *Subscription[T]) rowLockOnce() (found bool, err error) {
	q := s.q
	q.groupCensus(s.claimCtx, s.o.Limits) // before the claim's connection: the census takes one of its own
	conn, err := q.pool.Acquire(s.claimCtx)
	if err != nil {
		return false, err
	}
	healthy := false
	defer releaseHeld(conn, &healthy)
	now := q.now()
	sql, args := q.rowClaimSQL(now, s.o.Lease, 1)
	var (
		id       int64
		a        int64
		payload  []byte
		deadline time.Time
		ms       metaScan
	)
	claimed := false
	if err := q.pgClaimQuery(s.claimCtx, conn, sql, args, func(r pgx.Rows) error {
		if !r.Next() {
			return nil
		}
		claimed = true
		return r.Scan(q.metaDest(&ms, &id, &a, &payload, &deadline)...)
	}); err != nil {
		return false, err
	}
	if !claimed {
		healthy = true
		return false, nil
	}
	attempt, m := int(a), ms.meta()
	if xerr := s.exhausted(id, attempt); xerr != nil {
		healthy = s.settleExhausted(pgQ{conn}, id, attempt, xerr)
		return true, nil
	}
	tx, err := conn.Begin(s.claimCtx)
	if err == nil {
		sql, args = q.rowHoldSQL(id, deadline)
		var one int
		err = tx.QueryRow(s.claimCtx, sql, args...).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			// Written since the claim: only Cancel does that.
			_ = tx.Rollback(s.ctx)
			r := Result{ID: id, Attempt: attempt, Outcome: Cancelled, Err: ErrJobCancelled}
			if !q.isCancelledRow(s.ctx, pgQ{conn}, id) {
				r.SettleErr = s.lostSettle(id, Released, nil)
			}
			s.observe(r)
			healthy = !conn.Conn().IsClosed()
			return true, nil
		}
	}
	if err != nil {
		// Stopped, or the connection failed, between the claim and the lock: hand
		// the row back, its attempt uncounted, or leave it to its deadline.
		if tx != nil {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = tx.Rollback(ctx)
			cancel()
		}
		s.handBack(id, attempt, deadline)
		return true, nil
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = tx.Rollback(ctx)
		cancel()
	}()
	lost, cancelled, herr := s.runHeld(conn.Conn().PgConn(), id, attempt, payload, m)
	if s.ctx.Err() != nil {
		s.unsettled(id)
		return true, nil // rolled back: the row stays in work until its deadline, as in a crash
	}
	d := decide(herr, attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
	switch {
	case cancelled:
		d = decision{out: Cancelled, err: ErrJobCancelled}
	case herr != nil && context.Cause(s.workCtx) == errRelease:
		d = decision{out: Released, err: herr} // ready at once, the attempt uncounted
	}
	r := Result{ID: id, Attempt: attempt, Outcome: d.out, Err: d.err}
	if lost != nil {
		r.SettleErr = s.lostSettle(id, d.out, lost.Err)
		s.observe(r)
		s.freeLost(id, deadline)
		return true, nil
	}
	sql, args = q.settleSQL(kindOf(d.out), id, s.attemptFence(attempt), q.now(), d.delay, errText(d.err), time.Time{})
	tag, err := tx.Exec(s.ctx, sql, args...)
	if err == nil && tag.RowsAffected() == 0 {
		r.SettleErr = s.lostSettle(id, d.out, nil)
	} else {
		if err == nil {
			err = tx.Commit(s.ctx)
			committed = err == nil
		}
		if err != nil {
			r.SettleErr = s.settleErr(conn.Conn().PgConn(), id, d.out, err)
		}
	}
	s.observe(r)
	healthy = committed || !conn.Conn().IsClosed()
	return true, nil
}

// settleExhausted dead-letters a row its claim found exhausted (an *ExhaustedError),
// on db, fenced by the attempt the claim wrote, and reports it. It reports whether the
// connection is still fit for the pool.
func (s *Subscription[T]) settleExhausted(db querier, id int64, attempt int, xerr error) bool {
	q := s.q
	sql, args := q.settleSQL(skDead, id, s.attemptFence(attempt), q.now(), 0, xerr.Error(), time.Time{})
	r := Result{ID: id, Attempt: attempt, Outcome: DeadLettered, Err: xerr}
	n, err := db.exec(s.ctx, sql, args...)
	switch {
	case err != nil:
		r.SettleErr = err
		if isConnErr(err) || s.ctx.Err() != nil {
			r.SettleErr = s.lostSettle(id, DeadLettered, err)
		}
	case n == 0:
		r.SettleErr = s.lostSettle(id, DeadLettered, nil)
	}
	s.observe(r)
	return err == nil
}

// handBack releases a row-lock claim that committed but could not take the row's
// lock (Stop was called, or the connection failed, in between): ready at once, its
// attempt uncounted, through another connection. If that fails too the row waits
// for its deadline.
func (s *Subscription[T]) handBack(id int64, attempt int, deadline time.Time) {
	q := s.q
	ctx, cancel := context.WithTimeout(s.ctx, closeTimeout)
	defer cancel()
	f := s.attemptFence(attempt)
	sql, args := q.settleSQL(skRelease, id, f, q.now(), 0, "", time.Time{})
	sql += " AND " + col(q.c.LockedUntil) + " = " + q.p(len(args)+1)
	args = append(args, deadline)
	if _, err := q.pool.Exec(ctx, sql, args...); err != nil {
		q.log.Warn("inbox: a claimed row could not be handed back; it is claimed again when its lock deadline passes",
			"table", q.name, "id", id, "deadline", deadline, "err", err)
		return
	}
	s.observe(Result{ID: id, Attempt: attempt, Outcome: Released})
}

// freeLost makes a row whose lock was lost with its connection claimable at once,
// through another connection, once its handler has returned; its attempt stays
// counted. A session the server still keeps holds the lock (the write skips it), and
// the row is then claimed again when its deadline passes.
func (s *Subscription[T]) freeLost(id int64, deadline time.Time) {
	q := s.q
	ctx, cancel := context.WithTimeout(s.ctx, closeTimeout)
	defer cancel()
	sql, args := q.rowFreeSQL(id, deadline, q.now())
	_, err := q.pool.Exec(ctx, sql, args...)
	for try := 0; try < 3 && isConnErr(err) && ctx.Err() == nil; try++ {
		// A loss that ended one connection often ended the pool's others.
		_, err = q.pool.Exec(ctx, sql, args...)
	}
	if err != nil {
		q.log.Warn("inbox: a row whose lock was lost could not be freed; it is claimed again when its lock deadline passes",
			"table", q.name, "id", id, "deadline", deadline, "err", err)
	}
}

// take counts the attempt on a held row and reads it.
func (s *Subscription[T]) take(ctx context.Context, db querier, id int64, now time.Time) (attempt int, payload []byte, m jobMeta, ok bool, err error) {
	sql, args := s.q.takeSQL(id, now)
	r, err := db.query(ctx, sql, args...)
	if err != nil {
		return 0, nil, m, false, err
	}
	defer r.Close()
	if !r.Next() {
		return 0, nil, m, false, r.Err()
	}
	var a int64
	var ms metaScan
	if err := r.Scan(s.q.metaDest(&ms, &a, &payload)...); err != nil {
		return 0, nil, m, false, err
	}
	return int(a), payload, ms.meta(), true, r.Err()
}

// lockKey is the advisory lock's first key: the table's name, hashed.
func (q *Queue[T]) lockKey() int32 {
	h := fnv.New32a()
	h.Write([]byte(q.name))
	return int32(h.Sum32())
}

// advisoryOnce picks a claimable row whose advisory lock it can take, counts the
// attempt, handles it and settles it on the same connection, then unlocks. found is
// false when no row was claimable; err is a failure of the claim.
func (s *Subscription[T]) advisoryOnce() (found bool, err error) {
	q := s.q
	q.groupCensus(s.claimCtx, s.o.Limits) // before the claim's connection: the census takes one of its own
	conn, err := q.pool.Acquire(s.claimCtx)
	if err != nil {
		return false, err
	}
	healthy := false
	defer releaseHeld(conn, &healthy)
	now := q.now()
	sql, args := q.candidatesSQL(now, 2*s.o.Workers)
	var ids []int64
	if err := q.pgClaimQuery(s.claimCtx, conn, sql, args, func(r pgx.Rows) (err error) {
		ids, err = pgx.CollectRows(r, pgx.RowTo[int64])
		return err
	}); err != nil {
		return false, err
	}
	key := q.lockKey()
	for _, id := range ids {
		var got bool
		if err := conn.QueryRow(s.claimCtx, "SELECT pg_try_advisory_lock($1, $2)", key, int32(id)).Scan(&got); err != nil {
			return false, err
		}
		if !got {
			continue
		}
		attempt, payload, m, ok, err := s.take(s.claimCtx, pgQ{conn}, id, now)
		if err != nil {
			return false, err
		}
		if xerr := s.exhausted(id, attempt); ok && xerr != nil {
			if !s.settleExhausted(pgQ{conn}, id, attempt, xerr) {
				return true, nil // the connection is lost: closed with its lock
			}
		} else if ok && !s.handleAdvisory(conn, id, attempt, payload, m) {
			return true, nil // the connection is lost, or the subscription ended: closed unsettled
		}
		var unlocked bool
		if err := conn.QueryRow(s.ctx, "SELECT pg_advisory_unlock($1, $2)", key, int32(id)).Scan(&unlocked); err != nil {
			return ok, nil // the connection is closed, and the lock with it
		}
		if ok {
			healthy = true
			return true, nil
		}
	}
	healthy = true
	return false, nil
}

// handleAdvisory runs and settles a job whose advisory lock conn holds. It reports
// whether conn is still fit to unlock and go back to the pool.
func (s *Subscription[T]) handleAdvisory(conn *pgxpool.Conn, id int64, attempt int, payload []byte, m jobMeta) bool {
	q := s.q
	lost, cancelled, herr := s.runHeld(conn.Conn().PgConn(), id, attempt, payload, m)
	if s.ctx.Err() != nil {
		s.unsettled(id)
		return false // the connection is closed unsettled, as in a crash
	}
	d := decide(herr, attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
	switch {
	case cancelled:
		d = decision{out: Cancelled, err: ErrJobCancelled}
	case herr != nil && context.Cause(s.workCtx) == errRelease:
		d = decision{out: Released, err: herr}
	}
	r := Result{ID: id, Attempt: attempt, Outcome: d.out, Err: d.err}
	if lost != nil {
		r.SettleErr = s.lostSettle(id, d.out, lost.Err)
		s.observe(r)
		return false
	}
	// Fenced twice: only this session holds the row's lock while it lives, and the
	// row must still carry the attempt this claim wrote. Never through another
	// connection: without the lock the row may be another worker's.
	sql, args := q.settleSQL(kindOf(d.out), id, s.attemptFence(attempt), q.now(), d.delay, errText(d.err), time.Time{})
	tag, err := conn.Exec(s.ctx, sql, args...)
	switch {
	case err != nil:
		r.SettleErr = s.settleErr(conn.Conn().PgConn(), id, d.out, err)
	case tag.RowsAffected() == 0 && q.isCancelledRow(s.ctx, pgQ{conn}, id):
		// Cancelled by another instance after the last heartbeat: the row says so.
		r.Outcome, r.Err = Cancelled, ErrJobCancelled
		if q.holdsCancel() {
			// A group's job cancelled in work is left for its holder to settle.
			sql, args := q.settleSQL(skCancel, id, s.attemptFence(attempt), q.now(), 0, "", time.Time{})
			if _, err = conn.Exec(s.ctx, sql, args...); err != nil {
				r.SettleErr = s.settleErr(conn.Conn().PgConn(), id, Cancelled, err)
			}
		}
	case tag.RowsAffected() == 0:
		r.SettleErr = s.lostSettle(id, d.out, nil)
	}
	s.observe(r)
	return err == nil || !conn.Conn().IsClosed()
}

// runHeld runs the handler of a job whose lock connection pc holds, watching pc: if
// the connection is lost meanwhile, the handler's context is cancelled at once with a
// *LeaseLostError (Op "lock") as its cause, which runHeld also returns. cancelled
// reports a handler cancelled by Queue.Cancel (here or, through the watcher's
// heartbeat, in another instance).
func (s *Subscription[T]) runHeld(pc *pgconn.PgConn, id int64, attempt int, payload []byte, m jobMeta) (lost *LeaseLostError, cancelled bool, herr error) {
	hctx, cancel := context.WithCancelCause(s.workCtx)
	defer cancel(nil)
	s.q.runs.add(id, cancel)
	defer s.q.runs.remove(id)
	var check func(context.Context) (bool, error)
	if s.q.c.CancelledAt != "" {
		sql := s.q.heldCheckSQL()
		args := [][]byte{[]byte(strconv.FormatInt(id, 10)), []byte(strconv.FormatInt(s.q.cancelKey(id), 10))}
		check = func(ctx context.Context) (bool, error) {
			r := pc.ExecParams(ctx, sql, args, nil, nil, nil).Read()
			if r.Err != nil {
				return false, r.Err
			}
			return len(r.Rows) == 1 && len(r.Rows[0]) == 1 && string(r.Rows[0][0]) == "t", nil
		}
	}
	w := watchConn(pc, func(err error) {
		le := &LeaseLostError{Table: s.q.name, ID: id, Op: "lock", Err: err}
		lost = le // read after w.stop, which waits for this goroutine
		cancel(le)
		if context.Cause(hctx) == le {
			s.claimLost(id, le)
		}
	}, check, func() { cancel(ErrJobCancelled) })
	herr = s.run(hctx, id, attempt, payload, m)
	w.stop()
	return lost, wasCancelled(hctx), herr
}

// attemptFence is the fence of a lock form's settlement: the attempt its claim wrote,
// on a table that counts attempts.
func (s *Subscription[T]) attemptFence(attempt int) fence {
	return fence{attempt: attempt, byAttempt: s.q.c.Attempts != "", live: true}
}

// lostSettle is the settlement error of a lock form's job whose lock was lost: the
// write was not made (or, if the connection failed during COMMIT, may have been).
func (s *Subscription[T]) lostSettle(id int64, out Outcome, cause error) error {
	return &LeaseLostError{Table: s.q.name, ID: id, Op: kindOf(out).String(), Err: cause}
}

// settleErr classifies the failure of a lock form's settlement on its held connection:
// a lost connection loses the lock with it (*LeaseLostError); any other error is the
// database refusing the write, and is returned as it is.
func (s *Subscription[T]) settleErr(pc *pgconn.PgConn, id int64, out Outcome, err error) error {
	if pc.IsClosed() || isConnErr(err) || s.ctx.Err() != nil {
		return s.lostSettle(id, out, err)
	}
	return err
}

// unsettled logs a lock form's job that the subscription left unsettled when it was
// abandoned or halted.
func (s *Subscription[T]) unsettled(id int64) {
	s.q.log.Warn("inbox: subscription ended with a job unsettled; its lock goes with its connection",
		"table", s.q.name, "id", id, "form", s.o.Form.String(), "cause", context.Cause(s.ctx))
}

// claimLost records that job id's claim was lost while its handler ran, which was then
// cancelled.
func (s *Subscription[T]) claimLost(id int64, err *LeaseLostError) {
	s.q.health.locksLost.Add(1)
	s.q.health.noteErr(err)
	s.q.log.Warn("inbox: claim lost while its handler ran; handler cancelled (the job runs again unless its settlement still finds the row unclaimed)",
		"table", s.q.name, "id", id, "form", s.o.Form.String(), "err", err)
}
