package inbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// leased is one row claimed by the lease form. Only the lease loop reads or writes
// fence and extendAt; the worker reads the rest.
type leased struct {
	id       int64
	attempt  int
	payload  []byte
	fence    time.Time // the lock deadline the claim (or last extension) wrote
	extendAt time.Time
	ctx      context.Context
	cancel   context.CancelCauseFunc
}

// ackResult is the outcome of a background ack cycle.
type ackResult struct {
	batch []settlement
	lost  map[int64]bool
	ok    bool
}

// settlement is a worker's verdict on one attempt, for the loop to write.
type settlement struct {
	j *leased
	d decision
	// written and lost record a Postgres settlement already written by an earlier
	// try of a cycle that then failed, so that a retry does not write it twice.
	written, lost bool
}

// lane is one claimer of the lease form with its workers: the loop claims for them,
// dispatches on jobs and writes the settlements they send on settleCh. SQLite has one
// lane (one writer); Postgres has Claimers lanes, whose claims run concurrently.
type lane struct {
	n        int // workers
	max      int // rows leased at once: workers plus prefetch
	jobs     chan *leased
	settleCh chan settlement
}

// leaseWorker handles jobs that its lane's loop dispatches until the loop closes l.jobs.
func (s *Subscription[T]) leaseWorker(l *lane) {
	for j := range l.jobs {
		if context.Cause(s.workCtx) == errAbandon {
			j.cancel(nil)
			continue // abandoned: a dispatched job is not started, nor settled
		}
		select {
		case <-s.stopClaim:
			// Stopping: a prefetched job not yet started goes back at once.
			j.cancel(nil)
			l.settleCh <- settlement{j: j, d: decision{out: Released}}
			continue
		default:
		}
		err := s.run(j.ctx, j.id, j.attempt, j.payload)
		j.cancel(nil)
		d := decide(err, j.attempt, s.o.MaxAttempts, s.q.c.Attempts != "", s.o.Backoff)
		switch context.Cause(s.workCtx) {
		case errAbandon:
			continue // as in a crash: nothing is written; the lease expires
		case errRelease:
			if err != nil {
				d = decision{out: Released, err: err}
			}
		}
		l.settleCh <- settlement{j: j, d: d} // never blocks: capacity l.max
	}
}

// leaseLoop is the lease form's single owner of claims, settlements and extensions.
// It claims while claims come back full, waits PollInterval (or a wake) after a short
// one, and writes each cycle's settlements together with the next claim.
func (s *Subscription[T]) leaseLoop(ctx context.Context, l *lane) {
	n := l.max
	inflight := make(map[int64]*leased, n)
	canClaim := true
	stopping, drained := false, false
	stopClaim := s.stopClaim
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	ext := time.NewTimer(s.o.Lease / 2)
	defer ext.Stop()
	var batch []settlement
	woken := s.w.wait()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	// On Postgres a cycle with acks to write and nothing to claim runs on its own
	// goroutine, so that a claim for a publish arriving meanwhile does not wait for
	// it; at most one such cycle is in flight.
	ackDone := make(chan ackResult, 1)
	acking := false
	var ackWG sync.WaitGroup
	defer ackWG.Wait()
	settled := func(batch []settlement, lost map[int64]bool) {
		for _, st := range batch {
			delete(inflight, st.j.id)
			r := Result{ID: st.j.id, Attempt: st.j.attempt, Outcome: st.d.out, Err: st.d.err}
			if lost[st.j.id] {
				r.SettleErr = &LeaseLostError{Table: s.q.name, ID: st.j.id, Op: kindOf(st.d.out).String()}
			}
			s.observe(r)
		}
	}
	for {
		if stopping && len(inflight) == 0 {
			return
		}
		batch = batch[:0]
		if stopping || !canClaim || len(inflight) >= n {
			select {
			case st := <-l.settleCh:
				batch = append(batch, st)
			case <-woken:
				canClaim, woken = true, nil // taken again before the next claim
			case <-poll.C:
				canClaim = true
			case <-ext.C:
			case r := <-ackDone:
				acking = false
				if !r.ok {
					return // abandoned
				}
				settled(r.batch, r.lost)
				continue
			case <-stopClaim:
				stopping, stopClaim = true, nil
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
	drain:
		for {
			select {
			case st := <-l.settleCh:
				batch = append(batch, st)
			case <-woken:
				// A publish arrived with a settlement: claim in the same statement.
				canClaim, woken = true, nil
			case <-stopClaim:
				stopping, stopClaim = true, nil
			default:
				break drain
			}
		}
		if len(batch) > 0 && len(batch) < len(inflight) && !stopping {
			// Let workers that are finishing join this cycle's batch: one statement
			// then settles (and refills) many jobs. Bounded, so slow handlers cost at
			// most this much extra time before their ack.
			linger.Reset(lingerFor)
		wait:
			for len(batch) < len(inflight) {
				select {
				case st := <-l.settleCh:
					batch = append(batch, st)
				case <-linger.C:
					break wait
				}
			}
			linger.Stop()
		}
		if stopping && !drained {
			// Prefetched jobs no worker has started go back at once.
			drained = true
		undispatch:
			for {
				select {
				case j := <-l.jobs:
					j.cancel(nil)
					batch = append(batch, settlement{j: j, d: decision{out: Released}})
				default:
					break undispatch
				}
			}
		}
		if context.Cause(s.workCtx) == errRelease {
			// Stop's deadline passed: settle what finished, release the rest as it returns.
			stopping = true
		}
		s.extendDue(ctx, inflight)
		want := 0
		if canClaim && !stopping {
			want = n - (len(inflight) - len(batch))
		}
		if len(batch) == 0 && want == 0 {
			s.resetExt(ext, inflight)
			continue
		}
		if want == 0 && acking {
			// One background ack cycle at a time: let it finish first.
			r := <-ackDone
			acking = false
			if !r.ok {
				return
			}
			settled(r.batch, r.lost)
		}
		if want == 0 && s.q.dialect == Postgres {
			b := slices.Clone(batch)
			acking = true
			ackWG.Go(func() {
				_, lost, ok := s.cycle(ctx, b, 0)
				ackDone <- ackResult{batch: b, lost: lost, ok: ok}
			})
			s.resetExt(ext, inflight)
			continue
		}
		if want > 0 {
			woken = s.w.wait() // before the claim: a publish during it wakes the next wait
		}
		got, lost, ok := s.cycle(ctx, batch, want)
		if !ok {
			return // abandoned
		}
		settled(batch, lost)
		for _, j := range got {
			j.ctx, j.cancel = context.WithCancelCause(s.workCtx)
			inflight[j.id] = j
			l.jobs <- j // never blocks: at most l.max in flight
		}
		if want > 0 && len(got) < want {
			canClaim = false
			poll.Reset(s.o.PollInterval)
		}
		s.resetExt(ext, inflight)
	}
}

// lingerFor is how long a cycle waits for more settlements before writing a partial
// batch.
const lingerFor = 200 * time.Microsecond

// resetExt arms the extension timer for the earliest extension due.
func (s *Subscription[T]) resetExt(t *time.Timer, inflight map[int64]*leased) {
	next := s.o.Lease / 2
	now := time.Now()
	for _, j := range inflight {
		next = min(next, max(j.extendAt.Sub(now), 0))
	}
	t.Reset(next)
}

// extendDue extends, fenced, every lease whose half-life has passed. A lease found lost
// cancels its handler with a *LeaseLostError cause; the handler's settlement will be
// refused by its fence too.
func (s *Subscription[T]) extendDue(ctx context.Context, inflight map[int64]*leased) {
	now := time.Now()
	for _, j := range inflight {
		if j.extendAt.After(now) || j.ctx.Err() != nil {
			continue
		}
		deadline := trunc(now.Add(s.o.Lease))
		sql, args := s.q.settleSQL(skExtend, j.id, &j.fence, now, 0, "", deadline)
		var n int64
		err := s.retrying(ctx, func() (err error) {
			n, err = s.q.db().exec(ctx, sql, args...)
			return err
		})
		if err != nil {
			// Try again a little later, not in a tight loop; the lease has half its
			// length left.
			j.extendAt = now.Add(s.o.Lease / 10)
			continue
		}
		if n == 0 {
			j.cancel(&LeaseLostError{Table: s.q.name, ID: j.id, Op: "extend"})
			continue
		}
		j.fence = deadline
		j.extendAt = now.Add(s.o.Lease / 2)
	}
}

// retrying runs f until it succeeds, retrying connection failures with a growing
// pause; it gives up (returning the error) on other errors or when ctx ends.
func (s *Subscription[T]) retrying(ctx context.Context, f func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := f()
		if err == nil || ctx.Err() != nil {
			return err
		}
		s.q.log.Error("inbox: statement failed; retrying", "table", s.q.name, "err", err)
		if !isConnErr(err) && !isBusy(err) {
			return err
		}
		if !pause(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, s.o.PollInterval, time.Second)
	}
}

// isBusy reports a SQLite lock that outlasted the busy timeout.
func isBusy(err error) bool {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		c := e.Code() & 0xff
		return c == 5 || c == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return false
}

// cycle writes a batch of settlements and claims up to want rows, retrying lost
// connections. It reports the rows claimed, the settlements whose lease was lost, and
// false if the subscription was abandoned meanwhile.
func (s *Subscription[T]) cycle(ctx context.Context, batch []settlement, want int) (got []*leased, lost map[int64]bool, ok bool) {
	q := s.q
	for {
		got, lost = nil, map[int64]bool{}
		now := q.now()
		deadline := trunc(now.Add(s.o.Lease))
		var err error
		if q.dialect == SQLite {
			err = q.sqliteTx(ctx, func(db querier) error {
				clear(lost)
				got = got[:0]
				for _, st := range batch {
					sql, args := q.settleSQL(kindOf(st.d.out), st.j.id, &st.j.fence, now, st.d.delay, errText(st.d.err), now)
					n, err := db.exec(ctx, sql, args...)
					if err != nil {
						return err
					}
					if n == 0 {
						lost[st.j.id] = true
					}
				}
				if want > 0 {
					sql, args := q.leaseClaimSQL(deadline, now, want)
					var err error
					got, err = s.scanClaim(ctx, db, sql, args)
					return err
				}
				return nil
			})
		} else {
			err = s.pgCycle(ctx, batch, want, now, deadline, &got, lost)
		}
		if err == nil {
			for _, j := range got {
				j.fence = deadline
				j.extendAt = now.Add(s.o.Lease / 2)
			}
			return got, lost, true
		}
		if ctx.Err() != nil {
			return nil, nil, false
		}
		q.log.Error("inbox: claim cycle failed; retrying", "table", q.name, "err", err)
		if !pause(ctx, min(s.o.PollInterval, 100*time.Millisecond)) {
			return nil, nil, false
		}
	}
}

func (s *Subscription[T]) scanClaim(ctx context.Context, db querier, sql string, args []any) ([]*leased, error) {
	r, err := db.query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*leased
	for r.Next() {
		j := &leased{}
		var a int64
		if err := r.Scan(&j.id, &a, &j.payload); err != nil {
			return nil, err
		}
		j.attempt = int(a)
		out = append(out, j)
	}
	return out, r.Err()
}

// pgCycle is one Postgres cycle: settlements other than acks one statement each, then
// the acks and the claim together in one statement.
func (s *Subscription[T]) pgCycle(ctx context.Context, batch []settlement, want int, now, deadline time.Time, got *[]*leased, lost map[int64]bool) error {
	q := s.q
	var ids []int64
	var fences []time.Time
	for i := range batch {
		st := &batch[i]
		if st.written {
			continue
		}
		if st.d.out == Acked {
			ids = append(ids, st.j.id)
			fences = append(fences, trunc(st.j.fence))
			continue
		}
		sql, args := q.settleSQL(kindOf(st.d.out), st.j.id, &st.j.fence, now, st.d.delay, errText(st.d.err), now)
		n, err := q.db().exec(ctx, sql, args...)
		if err != nil {
			return err
		}
		st.written, st.lost = true, n == 0
	}
	for _, st := range batch {
		if st.lost {
			lost[st.j.id] = true
		}
	}
	if len(ids) == 0 && want == 0 {
		return nil
	}
	if ids == nil {
		ids, fences = []int64{}, []time.Time{}
	}
	sql, args := q.pgAckClaimSQL(ids, fences, deadline, now, want)
	var out []*leased
	acked := make(map[int64]bool, len(ids))
	read := func(r pgx.Rows) error {
		defer r.Close()
		for r.Next() {
			var isAck bool
			j := &leased{}
			var a int64
			if err := r.Scan(&isAck, &j.id, &a, &j.payload); err != nil {
				return err
			}
			if isAck {
				acked[j.id] = true
				continue
			}
			j.attempt = int(a)
			out = append(out, j)
		}
		return r.Err()
	}
	if !s.o.AsyncCommit {
		r, err := q.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		if err := read(r); err != nil {
			return err
		}
	} else {
		// One round trip: the cycle's transaction commits without waiting for its
		// WAL flush. An aborted batch leaves the connection in a failed transaction,
		// which the pool closes instead of reusing.
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SET LOCAL synchronous_commit = off")
		b.Queue(sql, args...)
		b.Queue("COMMIT")
		br := q.pool.SendBatch(ctx, b)
		err := func() error {
			for range 2 {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			r, err := br.Query()
			if err != nil {
				return err
			}
			if err := read(r); err != nil {
				return err
			}
			_, err = br.Exec()
			return err
		}()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	for _, id := range ids {
		if !acked[id] {
			lost[id] = true
		}
	}
	*got = out
	return nil
}
