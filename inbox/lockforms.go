package inbox

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockWorker is one worker of the RowLock or AdvisoryLock form: it holds its own
// claim, on its own connection, while its handler runs.
func (s *Subscription[T]) lockWorker(ctx context.Context) {
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-s.stopClaim:
			return
		case <-ctx.Done():
			return
		case s.conns <- struct{}{}:
		}
		woken := s.w.wait()
		var found bool
		var err error
		if s.o.Form == RowLock {
			found, err = s.rowLockOnce(ctx)
		} else {
			found, err = s.advisoryOnce(ctx)
		}
		<-s.conns
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.q.log.Error("inbox: claim failed; retrying", "table", s.q.name, "form", s.o.Form.String(), "err", err)
			if !pause(ctx, min(s.o.PollInterval, 100*time.Millisecond)) {
				return
			}
			continue
		}
		if found {
			continue // the claim came back full: claim again at once
		}
		poll.Reset(s.o.PollInterval)
		select {
		case <-poll.C:
		case <-woken:
		case <-s.stopClaim:
			return
		case <-ctx.Done():
			return
		}
	}
}

// rowLockOnce claims one row with FOR UPDATE SKIP LOCKED, handles it and settles it in
// the same transaction. found is false when no row was claimable.
func (s *Subscription[T]) rowLockOnce(ctx context.Context) (found bool, err error) {
	q := s.q
	tx, err := q.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	now := q.now()
	sql, args := q.lockClaimSQL(now)
	var id int64
	if err := tx.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
		if err == pgx.ErrNoRows {
			return false, nil
		}
		return false, err
	}
	attempt, payload, ok, err := s.take(ctx, pgQ{tx}, id, now)
	if err != nil || !ok {
		return ok, err
	}
	hctx, cancel := context.WithCancelCause(s.workCtx)
	herr := s.run(hctx, id, attempt, payload)
	cancel(nil)
	d := decide(herr, attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
	switch context.Cause(s.workCtx) {
	case errAbandon:
		return true, nil // the deferred rollback hands the row back, as a crash would
	case errRelease:
		if herr != nil {
			s.observe(Result{ID: id, Attempt: attempt, Outcome: Released, Err: herr})
			return true, nil // rollback: the row is free at once, the attempt uncounted
		}
	}
	r := Result{ID: id, Attempt: attempt, Outcome: d.out, Err: d.err}
	sql, args = q.settleSQL(kindOf(d.out), id, nil, q.now(), d.delay, errText(d.err), time.Time{})
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		r.SettleErr = err
	} else if err := tx.Commit(ctx); err != nil {
		r.SettleErr = err
	}
	s.observe(r)
	return true, nil
}

// take counts the attempt on a held row and reads it.
func (s *Subscription[T]) take(ctx context.Context, db querier, id int64, now time.Time) (attempt int, payload []byte, ok bool, err error) {
	sql, args := s.q.takeSQL(id, now)
	r, err := db.query(ctx, sql, args...)
	if err != nil {
		return 0, nil, false, err
	}
	defer r.Close()
	if !r.Next() {
		return 0, nil, false, r.Err()
	}
	var a int64
	if err := r.Scan(&a, &payload); err != nil {
		return 0, nil, false, err
	}
	return int(a), payload, true, r.Err()
}

// lockKey is the advisory lock's first key: the table's name, hashed.
func (q *Queue[T]) lockKey() int32 {
	h := fnv.New32a()
	h.Write([]byte(q.name))
	return int32(h.Sum32())
}

// advisoryOnce picks a claimable row whose advisory lock it can take, counts the
// attempt, handles it and settles it on the same connection, then unlocks.
func (s *Subscription[T]) advisoryOnce(ctx context.Context) (found bool, err error) {
	q := s.q
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	healthy := false
	defer func() {
		if !healthy {
			// A connection that may still hold a lock must not go back to the pool.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	now := q.now()
	sql, args := q.candidatesSQL(now, 2*s.o.Workers)
	r, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	ids, err := pgx.CollectRows(r, pgx.RowTo[int64])
	if err != nil {
		return false, err
	}
	key := q.lockKey()
	for _, id := range ids {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", key, int32(id)).Scan(&got); err != nil {
			return false, err
		}
		if !got {
			continue
		}
		attempt, payload, ok, err := s.take(ctx, pgQ{conn}, id, now)
		if err != nil {
			return false, err
		}
		if ok {
			s.handleAdvisory(ctx, conn, id, attempt, payload)
		}
		if ctx.Err() != nil {
			return true, nil
		}
		var unlocked bool
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1, $2)", key, int32(id)).Scan(&unlocked); err != nil {
			return false, err
		}
		if ok {
			healthy = true
			return true, nil
		}
	}
	healthy = true
	return false, nil
}

func (s *Subscription[T]) handleAdvisory(ctx context.Context, conn *pgxpool.Conn, id int64, attempt int, payload []byte) {
	q := s.q
	hctx, cancel := context.WithCancelCause(s.workCtx)
	herr := s.run(hctx, id, attempt, payload)
	cancel(nil)
	d := decide(herr, attempt, s.o.MaxAttempts, q.c.Attempts != "", s.o.Backoff)
	switch context.Cause(s.workCtx) {
	case errAbandon:
		return // the connection is closed unsettled, as in a crash
	case errRelease:
		if herr != nil {
			d = decision{out: Released, err: herr}
		}
	}
	r := Result{ID: id, Attempt: attempt, Outcome: d.out, Err: d.err}
	sql, args := q.settleSQL(kindOf(d.out), id, nil, q.now(), d.delay, errText(d.err), time.Time{})
	_, err := conn.Exec(ctx, sql, args...)
	if err != nil && isConnErr(err) {
		// The connection (and with it the lock) is gone; write through the pool.
		err = s.retrying(ctx, func() error {
			_, err := q.db().exec(ctx, sql, args...)
			return err
		})
	}
	r.SettleErr = err
	s.observe(r)
}
