package inbox

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// leased is one row claimed by the lease form. Only the lease loop reads or writes
// fence and extendAt; the worker reads the rest.
type leased struct {
	id       int64
	attempt  int
	payload  []byte
	meta     jobMeta
	fence    time.Time   // the lock deadline the claim (or last extension) wrote
	unsure   []time.Time // deadlines extensions may have written: their outcome is unknown
	extendAt time.Time
	ctx      context.Context
	cancel   context.CancelCauseFunc
	runs     *runRegistry
	// exp is the expiry group that cancels ctx when the lease is about to expire
	// unextended; nil once the job is finished.
	exp atomic.Pointer[expiry]
}

// fenced is the fence of a settlement or extension of j.
func (j *leased) fenced() fence { return fence{lease: &j.fence, unsure: j.unsure} }

// finish ends the job's context and leaves its expiry group: its handler has
// returned, or will not run.
func (j *leased) finish() {
	j.cancel(nil)
	j.runs.remove(j.id)
	if g := j.exp.Swap(nil); g != nil {
		g.leave()
	}
}

// expiry is one timer for the jobs whose leases end at the same deadline: the rows
// one claim took, or the leases one pass of extendDue extended. When it fires
// (a tenth of a lease before that deadline) it cancels the handler of every job still in
// the group, with a *LeaseLostError (Op "expired") as the cause, so that a lease that
// cannot be extended (the database is unreachable or locked) stops its handler
// before another instance may claim the row. A job leaves its group when it finishes
// or its lease is extended; the timer stops when the last one has left. One timer per
// claim, not per job: a claim of many rows costs one.
type expiry struct {
	t    *time.Timer
	jobs []*leased // fixed at creation; a job belongs while its exp points here
	left atomic.Int32
}

func (g *expiry) leave() {
	if g.left.Add(-1) == 0 {
		g.t.Stop()
	}
}

// expire starts an expiry group for jobs, whose leases end at fence. A job already
// finished (exp nil, unless fresh) is not taken in. fresh jobs (just claimed) have no
// group yet.
func (s *Subscription[T]) expire(jobs []*leased, fence time.Time, fresh bool) {
	if len(jobs) == 0 {
		return
	}
	g := &expiry{jobs: jobs}
	g.left.Store(int32(len(jobs)))
	g.t = time.AfterFunc(s.untilExpiry(fence), func() {
		for _, j := range g.jobs {
			if j.exp.Load() != g {
				continue
			}
			lost := &LeaseLostError{Table: s.q.name, ID: j.id, Op: "expired"}
			j.cancel(lost)
			if context.Cause(j.ctx) == lost {
				s.claimLost(j.id, lost)
			}
		}
	})
	for _, j := range jobs {
		if fresh {
			j.exp.Store(g)
			continue
		}
		old := j.exp.Load()
		if old != nil && j.exp.CompareAndSwap(old, g) {
			old.leave()
			continue
		}
		g.leave() // finished meanwhile: not in this group
	}
}

// arm gives a claimed job its context; expire gives it its expiry group.
func (s *Subscription[T]) arm(j *leased) {
	j.ctx, j.cancel = context.WithCancelCause(s.workCtx)
	j.runs = &s.q.runs
	j.runs.add(j.id, j.cancel)
}

// untilExpiry is how long from now a handler may run on a lease that ends at fence.
func (s *Subscription[T]) untilExpiry(fence time.Time) time.Duration {
	return time.Until(fence) - s.o.Lease/10
}

// ackResult is the outcome of a background ack cycle.
type ackResult struct {
	batch []settlement
	lost  map[int64]bool
	ok    bool
}

// settlement is a worker's verdict on one attempt, for the loop to write.
type settlement struct {
	j   *leased
	d   decision
	dur time.Duration // how long the handler ran (0: it did not)
	// written and lost record a Postgres settlement already written by an earlier
	// try of a cycle that then failed, so that a retry does not write it twice.
	written, lost bool
	// failed is the error of a settlement the database refused for good: it is not
	// tried again, and the row is left to its lease.
	failed error
}

// settleFailure is a cycle's failure in the statement of its i-th settlement.
type settleFailure struct {
	i   int
	err error
}

func (e *settleFailure) Error() string { return e.err.Error() }
func (e *settleFailure) Unwrap() error { return e.err }

// pending reports whether a batch has settlements still to write.
// A cancelled job's settlement is written only where cancelled jobs keep their
// lease (writeCancels: Queue.holdsCancel); elsewhere Cancel wrote the row.
func pending(batch []settlement, writeCancels bool) bool {
	for _, st := range batch {
		if !st.written && st.failed == nil && (st.d.out != Cancelled || writeCancels) {
			return true
		}
	}
	return false
}

// lane is one claimer of the lease form with its workers: the loop claims for them,
// dispatches on jobs and writes the settlements they send on settleCh. SQLite has one
// lane (one writer); Postgres has Claimers lanes, whose claims run concurrently.
type lane struct {
	n        int // workers
	work     int // rows in work at once: workers, times the batch size of a batch subscription
	max      int // rows leased at once: work plus prefetch
	jobs     chan *leased
	chunks   chan []*leased // a batch subscription's batches, instead of jobs
	settleCh chan settlement
	slots    *laneSlots // the slots of Limits.Concurrency its handlers run in (slots.go); nil without
	rate     rateBudget // its reserve of starts of Limits.Rate (Postgres; groups.go)
	keys     *keySlots  // the places of Limits.PerPartition it holds (keyslots.go); nil without
	// With PerPartition: whether the last claim that looked for rows without a
	// key found some, and when to look again if not (pgKeyedPick).
	keyless   bool
	keylessAt time.Time
	kc        keyClaim // what the lane's next claim may take of each key (keys)
	sawAcks   bool     // the lane's last cycle acked before its claim, in a statement of its own (pgCycle)
	heldShown int64    // the places of slots and keys counted in Health.LimitHeld

	nextCancelCheck time.Time // when checkCancels next looks for cancelled jobs
	nextSweep       time.Time // when sweepCancelled next runs
	tail            int64     // the priority of the last row dispatched (dispatch)

	// The loop's average of its handlers' durations (adaptive prefetch).
	avg     time.Duration
	samples int
}

// limit is how many rows the lane may have leased at once: workers plus prefetch,
// or, with the default prefetch, workers alone until 8 handlers have run and while
// their average duration is PrefetchBelow or more.
func (s *Subscription[T]) limit(l *lane) int {
	if !s.adaptive || (l.samples >= 8 && l.avg < PrefetchBelow) {
		return l.max
	}
	return l.work
}

// note adds the durations of a batch's handlers to the lane's average.
func (l *lane) note(batch []settlement) {
	for _, st := range batch {
		if st.dur <= 0 {
			continue
		}
		if l.samples == 0 {
			l.avg = st.dur
		} else {
			l.avg += (st.dur - l.avg) / 8
		}
		l.samples++
	}
}

// giveBack settles a dispatched job that was not started: released at once, or
// recorded as cancelled when its context was (a cancelled job is settled already).
// It never blocks: settleCh has capacity for every job the lane holds.
func (l *lane) giveBack(j *leased) {
	j.finish()
	d := decision{out: Released}
	if wasCancelled(j.ctx) {
		d = decision{out: Cancelled, err: ErrJobCancelled}
	}
	l.settleCh <- settlement{j: j, d: d}
}

// leaseWorker handles jobs that its lane's loop dispatches until the loop closes l.jobs.
func (s *Subscription[T]) leaseWorker(l *lane) {
	for j := range l.jobs {
		if s.ctx.Err() != nil {
			// Abandoned or halted: a dispatched job is neither started nor settled; its
			// lease expires, as in a crash.
			j.finish()
			continue
		}
		stopping := false
		select {
		case <-s.stopClaim:
			stopping = true
		default:
		}
		if stopping || j.ctx.Err() != nil {
			// Stopping, or its lease expired while it waited (prefetched).
			l.giveBack(j)
			continue
		}
		keyed := l.keys != nil && j.meta.keyed
		if keyed && !l.keys.enter(j, s.stopClaim) {
			// No place of its key before its lease ran out, or stopping.
			if s.ctx.Err() != nil {
				j.finish()
			} else {
				l.giveBack(j)
			}
			continue
		}
		if l.slots != nil && !l.slots.gate.enter(j, s.stopClaim) {
			if keyed {
				l.keys.leave(j)
			}
			// No slot before its lease ran out, or stopping: as above.
			if s.ctx.Err() != nil {
				j.finish()
			} else {
				l.giveBack(j)
			}
			continue
		}
		began := time.Now()
		err := s.run(j.ctx, j.id, j.attempt, j.payload, j.meta)
		dur := max(time.Since(began), 1)
		if l.slots != nil {
			l.slots.gate.leave(j)
		}
		if keyed {
			l.keys.leave(j)
		}
		j.finish()
		if s.ctx.Err() != nil {
			continue // as in a crash: nothing is written; the lease expires
		}
		d := decide(err, j.attempt, s.o.MaxAttempts, s.q.c.Attempts != "", s.o.Backoff)
		switch {
		case wasCancelled(j.ctx):
			// Settled as Cancelled whatever the handler returned: Cancel wrote the
			// row already (lock deadline and all), or, for a group's job that kept
			// its lease (holdsCancel), the cycle writes it.
			d = decision{out: Cancelled, err: ErrJobCancelled}
		case err != nil && context.Cause(s.workCtx) == errRelease:
			d = decision{out: Released, err: err}
		}
		l.settleCh <- settlement{j: j, d: d, dur: dur} // never blocks: capacity l.max
	}
}

// leaseLoop is the lease form's single owner of claims, settlements and extensions.
// It claims while claims come back full, waits PollInterval (or a wake) after a short
// one, and writes each cycle's settlements together with the next claim. It returns
// when stopped with nothing in flight, or when s.ctx ends.
func (s *Subscription[T]) leaseLoop(l *lane) {
	ctx := s.ctx
	n := s.limit(l)
	inflight := make(map[int64]*leased, n)
	if l.slots != nil {
		defer s.freeSlots(l)
	}
	if l.keys != nil {
		defer s.freeKeys(l)
	}
	if l.slots != nil || l.keys != nil {
		defer func() { s.q.health.limitHeld.Add(-l.heldShown) }()
	}
	defer func() {
		if len(inflight) > 0 {
			ids := make([]int64, 0, len(inflight))
			for id := range inflight {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			s.q.log.Warn("inbox: subscription ended with jobs unsettled; each is claimed again when its lease expires",
				"table", s.q.name, "cause", context.Cause(ctx), "jobs", ids)
		}
	}()
	canClaim := true
	stopping, drained := false, false
	stopClaim := s.stopClaim
	released := s.workCtx.Done() // Stop's deadline passed (or the subscription ended)
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	ext := time.NewTimer(s.o.Lease / 3)
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
			if l.keys != nil {
				l.keys.written(st.j)
			}
			r := Result{ID: st.j.id, Attempt: st.j.attempt, Outcome: st.d.out, Err: st.d.err}
			switch {
			case st.failed != nil:
				r.SettleErr = st.failed
			case lost[st.j.id]:
				r.SettleErr = &LeaseLostError{Table: s.q.name, ID: st.j.id, Op: kindOf(st.d.out).String()}
			}
			s.observe(r)
		}
	}
	// exhausted holds the dead letters of rows the last claim found exhausted
	// (Subscription.exhausted): written by the next cycle, never run.
	var exhausted []settlement
	for {
		l.showHeld(&s.q.health)
		if stopping && len(inflight) == 0 {
			return
		}
		batch = append(batch[:0], exhausted...)
		exhausted = exhausted[:0]
		n = s.claimLimit(l)
		idle := stopping || !canClaim || len(inflight) >= n || (l.keys != nil && s.keysIdle(l))
		if len(batch) == 0 && idle && !l.slots.due(l, canClaim && !stopping) {
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
					return // abandoned or halted
				}
				settled(r.batch, r.lost)
				continue
			case <-stopClaim:
				stopping, stopClaim = true, nil
			case <-released:
				// Stop's deadline passed: settle what finished, release the rest as it
				// returns.
				stopping, released = true, nil
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
		if len(batch) > 0 && (s.o.Limits.bounds() || s.q.c.Group != "") {
			// A limited claim comes back short while the limit is reached, with
			// rows still ready: each settlement frees a place, so claim with it
			// (in the same statement) rather than wait for the poll. So does a
			// claim of a table with FIFO groups while the heads of groups with
			// jobs waiting are in work: the settlement of a head lets its
			// group's next job be claimed (no publish wakes the lane for it).
			canClaim = true
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
					j.finish()
					batch = append(batch, settlement{j: j, d: decision{out: Released}})
				case js := <-l.chunks:
					for _, j := range js {
						j.finish()
						batch = append(batch, settlement{j: j, d: decision{out: Released}})
					}
				default:
					break undispatch
				}
			}
		}
		l.note(batch)
		if l.keys != nil {
			// The places of the rows this cycle settles are free for its claim.
			for _, st := range batch {
				l.keys.settled(st.j)
			}
		}
		n = s.limit(l)
		s.checkCancels(l, inflight)
		s.sweepCancelled(&l.nextSweep)
		s.extendDue(inflight)
		if l.slots != nil {
			// Slots before the claim, which takes no more rows than they can run
			// soon (slots.go).
			s.syncSlots(l, s.slotNeed(l, len(inflight)-len(batch), canClaim && !stopping), len(inflight)-len(batch))
			n = s.claimLimit(l)
		}
		if l.keys != nil {
			// On Postgres a take of places rides with the claim, when there is one
			// (not with Rate, whose reserve may leave the claim nothing to take).
			ride := canClaim && !stopping && s.o.Limits.Rate == 0 && n > len(inflight)-len(batch)
			s.syncKeys(l, canClaim && !stopping, ride, inflight)
		}
		want := 0
		if canClaim && !stopping {
			want = n - (len(inflight) - len(batch))
		}
		if l.keys != nil && want > 0 {
			want = s.keyedWant(l, want)
		}
		if l.keys != nil && l.keys.pending != nil {
			s.takeAlone(l) // no claim for it to ride with (not expected: ride implies one)
		}
		if len(batch) == 0 && want == 0 {
			s.resetExt(l, ext, inflight)
			continue
		}
		if want == 0 && acking {
			// One background ack cycle at a time: let it finish first.
			var r ackResult
			select {
			case r = <-ackDone:
			case <-ctx.Done():
				return
			}
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
				_, lost, ok := s.cycle(nil, b, 0)
				ackDone <- ackResult{batch: b, lost: lost, ok: ok}
			})
			s.resetExt(l, ext, inflight)
			continue
		}
		if want > 0 {
			woken = s.w.wait() // before the claim: a publish during it wakes the next wait
		}
		rode := l.keys != nil && l.kc.take != nil
		l.sawAcks = false
		got, lost, ok := s.cycle(l, batch, want)
		if !ok {
			return // abandoned or halted
		}
		if rode {
			// A take that did not run (Stop dropped the claim) takes nothing; its
			// places to give back come free when their lease ends.
			l.kc.take = nil
			s.releaseUnplaced(l.keys, inflight) // as syncKeys does after a take
		}
		settled(batch, lost)
		for _, j := range got {
			s.arm(j)
		}
		if len(got) > 0 {
			s.expire(got, got[0].fence, true)
		}
		fresh := make([]*leased, 0, len(got)) // not got's array: the expiry group keeps it
		for _, j := range got {
			inflight[j.id] = j
			if err := s.exhausted(j.id, j.attempt); err != nil {
				j.finish()
				exhausted = append(exhausted, settlement{j: j, d: decision{out: DeadLettered, err: err}})
				continue
			}
			fresh = append(fresh, j)
		}
		s.dispatch(l, fresh)
		if l.keys != nil && want > 0 {
			// Full: the claim took all it asked for, or all its keys' numbers
			// allowed (a take that rode with it and came back short asked for
			// more than its places hold).
			full := len(got) >= want
			if rode {
				total := 0
				for _, n := range l.kc.ns {
					total += n
				}
				full = full || (!l.kc.keyless && len(got) >= total)
			}
			l.keys.claimed(l.kc.keys, l.kc.ns, got, full)
			if l.kc.keyless {
				found := false
				for _, j := range got {
					found = found || !j.meta.keyed
				}
				l.keyless, l.keylessAt = found, time.Now().Add(s.o.PollInterval)
			}
		}
		if want > 0 && len(got) < want && l.keys == nil && !s.claimBlind(l, batch) {
			canClaim = false
			poll.Reset(s.o.PollInterval)
		}
		// With places of PerPartition a short claim leaves canClaim: the places'
		// keys found dry are given back, and keysIdle holds the loop back until
		// more places may be asked for (the asks back off while they come back
		// short) or a look for rows without a key is due.
		if l.slots != nil && !canClaim {
			// The claim came back short: give back the slots the jobs held do not need.
			s.syncSlots(l, s.slotNeed(l, len(inflight), false), len(inflight))
		}
		s.resetExt(l, ext, inflight)
	}
}

// cancelledInstead (holdsCancel) settles as Cancelled the job of st, whose own
// settlement found no row under its lease: on a table with FIFO groups a job
// cancelled in work keeps its lease, and its holder's settlements other than a
// cancel pass it by (settleSQL), so an ack (or a retry, a dead letter...) racing
// Queue.Cancel of the job, its handler having returned before the cancel reached
// it, would leave the row in work until its lease ran out, and its group waiting
// that long. Cancel said the job is settled as Cancelled whatever its handler
// returns: it is, at once, under the same lease. It returns the rows written (1:
// st's decision is now Cancelled; 0: the lease is lost, or the table keeps no
// such rows).
func (s *Subscription[T]) cancelledInstead(ctx context.Context, db querier, st *settlement, now time.Time) (int64, error) {
	q := s.q
	if !q.holdsCancel() {
		return 0, nil
	}
	sql, args := q.settleSQL(skCancel, st.j.id, st.j.fenced(), now, 0, "", now)
	n, err := db.exec(ctx, sql, args...)
	if err == nil && n == 1 {
		st.d = decision{out: Cancelled, err: ErrJobCancelled}
	}
	return n, err
}

// claimBlind reports whether a cycle's claim, on a table with FIFO groups, could
// not see groups that the cycle's own acks freed: on Postgres the acks and the
// claim are one statement, whose claim reads the rows as they were before the
// acks, with those heads still in work. A short claim then says nothing of those
// groups' next jobs, and the lane claims again at once (in a statement of its own:
// a short claim without acks waits for the poll, so this runs once a cycle).
//
// pgCycle acks in a statement of its own before a claim of a table with groups
// (l.sawAcks): that claim sees them.
func (s *Subscription[T]) claimBlind(l *lane, batch []settlement) bool {
	if s.q.c.Group == "" || s.q.dialect != Postgres || l.sawAcks {
		return false
	}
	for _, st := range batch {
		// Acks, and acks that became cancels after the claim (cancelledInstead).
		if (st.d.out == Acked || st.d.out == Cancelled) && st.failed == nil {
			return true
		}
	}
	return false
}

// showHeld brings Health.LimitHeld up to date with the places the lane holds.
func (l *lane) showHeld(h *health) {
	var n int64
	if l.slots != nil {
		n += int64(len(l.slots.names))
	}
	if l.keys != nil {
		n += int64(l.keys.count())
	}
	if d := n - l.heldShown; d != 0 {
		h.limitHeld.Add(d)
		l.heldShown = n
	}
}

// dispatch hands claimed rows to the lane's workers (in batches of s.batch for a
// batch subscription) in priority order, lower first, as the claim picked them.
// Rows dispatched earlier and not yet started (prefetched) wait in the lane's
// channel, in that order too; when a fresh row comes before the last of them, the
// channel is drained and refilled in order, so that a higher-priority job claimed
// after prefetched lower-priority ones starts before them (equal priorities keep
// the order they were claimed in). Sends never block: the channels hold every row
// the lane may have leased.
func (s *Subscription[T]) dispatch(l *lane, fresh []*leased) {
	if len(fresh) == 0 {
		return
	}
	defer s.dispatched.Add(int64(len(fresh))) // the new rows only, not those taken back
	if s.q.c.Priority != "" {
		byPrio := func(a, b *leased) int { return cmp.Compare(a.meta.prio, b.meta.prio) }
		if !slices.IsSortedFunc(fresh, byPrio) {
			slices.SortStableFunc(fresh, byPrio)
		}
		if fresh[0].meta.prio < l.tail && (len(l.jobs) > 0 || len(l.chunks) > 0) {
			fresh = append(l.undispatched(), fresh...)
			slices.SortStableFunc(fresh, byPrio)
		}
		l.tail = fresh[len(fresh)-1].meta.prio
	}
	if s.bh == nil {
		for _, j := range fresh {
			l.jobs <- j
		}
		return
	}
	for c := range slices.Chunk(fresh, s.batch) {
		l.chunks <- c
	}
}

// undispatched takes back the rows dispatched to the lane that no worker has taken
// yet, in the order they were dispatched.
func (l *lane) undispatched() []*leased {
	var out []*leased
	for {
		select {
		case j := <-l.jobs:
			out = append(out, j)
		case js := <-l.chunks:
			out = append(out, js...)
		default:
			return out
		}
	}
}

// exhausted reports, with an *ExhaustedError, a row claimed more than MaxAttempts
// times: no attempt settled it (a failed attempt at MaxAttempts is dead-lettered),
// so its handler's process crashed or lost the claim every time. Every form
// dead-letters it instead of running it again, which could crash the process again
// for ever.
func (s *Subscription[T]) exhausted(id int64, attempt int) error {
	if s.q.c.Attempts == "" || s.o.MaxAttempts <= 0 || attempt <= s.o.MaxAttempts {
		return nil
	}
	return &ExhaustedError{Table: s.q.name, ID: id, Attempts: attempt, MaxAttempts: s.o.MaxAttempts}
}

// lingerFor is how long a cycle waits for more settlements before writing a partial
// batch.
const lingerFor = 200 * time.Microsecond

// resetExt arms the extension timer for the earliest extension due.
func (s *Subscription[T]) resetExt(l *lane, t *time.Timer, inflight map[int64]*leased) {
	next := s.o.Lease / 3
	now := time.Now()
	for _, j := range inflight {
		next = min(next, max(j.extendAt.Sub(now), 0))
	}
	if len(inflight) > 0 && s.q.c.CancelledAt != "" {
		next = min(next, max(l.nextCancelCheck.Sub(now), time.Millisecond))
	}
	if l.slots != nil {
		next = l.slots.slotWait(now, next)
	}
	if l.keys != nil {
		next = l.keys.keyWait(now, next, true, l.n)
	}
	t.Reset(next)
}

// extendDue extends, fenced, every lease whose first third has passed. A lease found lost
// cancels its handler with a *LeaseLostError cause; the handler's settlement will be
// refused by its fence too. A failed extension is tried again a tenth of a lease
// later; the job's expiry timer stops its handler if none succeeds in time.
func (s *Subscription[T]) extendDue(inflight map[int64]*leased) {
	now := time.Now()
	deadline := trunc(now.Add(s.o.Lease))
	var extended []*leased
	defer func() { s.expire(extended, deadline, false) }()
	for _, j := range inflight {
		// A cancelled job of a group keeps its lease while its handler runs
		// (holdsCancel), so that its group stays held.
		if j.extendAt.After(now) || (j.ctx.Err() != nil && !(wasCancelled(j.ctx) && s.q.holdsCancel())) {
			continue
		}
		sql, args := s.q.settleSQL(skExtend, j.id, j.fenced(), now, 0, "", deadline)
		n, err := s.q.db().exec(s.ctx, sql, args...)
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			if s.q.dialect == Postgres && !pgconn.SafeToRetry(err) && !isPgError(err) {
				// The statement may have been applied (the connection failed after
				// sending it): the row may hold either deadline from now on.
				j.unsure = append(j.unsure, deadline)
			}
			s.q.health.noteErr(err)
			s.q.log.Warn("inbox: lease extension failed; trying again", "table", s.q.name, "id", j.id, "err", err)
			j.extendAt = now.Add(s.o.Lease / 10)
			continue
		}
		if n == 0 {
			if s.q.isCancelledRow(s.ctx, s.q.db(), j.id) {
				j.cancel(ErrJobCancelled)
				j.extendAt = now.Add(s.o.Lease / 3) // Cancel wrote the row: nothing to extend
				continue
			}
			lost := &LeaseLostError{Table: s.q.name, ID: j.id, Op: "extend"}
			j.cancel(lost)
			if context.Cause(j.ctx) == lost {
				s.claimLost(j.id, lost)
			}
			continue
		}
		j.fence, j.unsure = deadline, nil
		j.extendAt = now.Add(s.o.Lease / 3)
		extended = append(extended, j)
	}
}

// cycle writes a batch of settlements and claims up to want rows, retrying failures
// after a backoff until it succeeds or s.ctx ends (it then reports ok false). Once
// Stop has been called a retry claims nothing, so that only settlements hold Stop
// up. A settlement the database refuses for good (a permanent error in its own
// statement) is given up and marked failed; the others go on. It reports the rows
// claimed and the settlements whose lease was lost. l is the lane that claims (nil
// when want is 0).
func (s *Subscription[T]) cycle(l *lane, batch []settlement, want int) (got []*leased, lost map[int64]bool, ok bool) {
	q := s.q
	ctx := s.ctx
	r := newRetrier(&q.health, q.log, "table", q.name, "form", s.o.Form.String())
	defer r.done()
	split := false  // settle acks one statement each, to find the one that fails
	remade := false // TABLE_limits made again (once a call)
	for {
		got, lost = nil, map[int64]bool{}
		if want == 0 && !pending(batch, s.q.holdsCancel()) {
			for _, st := range batch {
				if st.lost {
					lost[st.j.id] = true
				}
			}
			return nil, lost, true
		}
		if want > 0 {
			q.groupCensus(s.claimCtx, s.o.Limits)
		}
		now := q.now()
		deadline := trunc(now.Add(s.o.Lease))
		var err error
		if q.dialect == SQLite {
			got, err = s.sqliteCycle(ctx, l, batch, want, now, deadline, lost)
		} else {
			err = s.pgCycle(ctx, l, batch, want, now, deadline, &got, lost, split)
		}
		if err == nil {
			r.ok()
			for _, j := range got {
				j.fence = deadline
				j.extendAt = now.Add(s.o.Lease / 3)
			}
			return got, lost, true
		}
		if ctx.Err() != nil {
			return nil, nil, false
		}
		if sf, isSettle := errors.AsType[*settleFailure](err); isSettle && permanent(sf.err) {
			st := &batch[sf.i]
			st.failed = sf.err
			q.health.noteErr(sf.err)
			q.log.Error("inbox: settlement refused by the database; the job is left to its lease",
				"table", q.name, "id", st.j.id, "outcome", st.d.out.String(), "err", sf.err)
			continue
		}
		if permanent(err) && q.dialect == Postgres && !split && pending(batch, s.q.holdsCancel()) {
			// Perhaps one ack's row is what the database refuses: settle them one
			// statement each, at once, to find it.
			split = true
			continue
		}
		if !remade && s.o.Limits.on() && s.remakeLimits(err) {
			remade = true
			continue // TABLE_limits was dropped (Rate counts in it): made again
		}
		// With nothing to settle, Stop cuts the pause short: the claim is dropped.
		pctx := ctx
		if !pending(batch, s.q.holdsCancel()) {
			pctx = s.claimCtx
		}
		if !r.failed(pctx, "claim cycle", err) && ctx.Err() != nil {
			return nil, nil, false
		}
		select {
		case <-s.stopClaim:
			want = 0
		default:
		}
	}
}

// sqliteCycle is one SQLite cycle: every settlement, then the claim, in one immediate
// transaction.
func (s *Subscription[T]) sqliteCycle(ctx context.Context, l *lane, batch []settlement, want int, now, deadline time.Time, lost map[int64]bool) (got []*leased, err error) {
	q := s.q
	// The statements inside the transaction run on a context that cannot be
	// cancelled: the transaction holds the write lock, so none of them waits for
	// another connection, and modernc's driver (and database/sql, for a query) starts
	// a goroutine per statement to watch a context that can. The transaction itself
	// (sqliteTx), whose start waits for the lock, still runs on ctx, so that Stop's
	// deadline interrupts the wait and rolls it back (database/sql watches that
	// context, once for the transaction and once for each query's rows).
	sctx := ctx
	ctx = context.WithoutCancel(ctx)
	err = q.sqliteTx(sctx, func(db querier) error {
		clear(lost)
		for i, st := range batch {
			if st.failed != nil || (st.d.out == Cancelled && !q.holdsCancel()) {
				continue // a cancelled job's row was written by Cancel
			}
			sql, args := q.settleSQL(kindOf(st.d.out), st.j.id, st.j.fenced(), now, st.d.delay, errText(st.d.err), now)
			n, err := db.exec(ctx, sql, args...)
			if err != nil {
				return &settleFailure{i: i, err: err}
			}
			if n == 0 && st.d.out != Cancelled {
				// Cancelled meanwhile? Then it is settled as that, and its group
				// moves on (the claim below sees it).
				var err error
				if n, err = s.cancelledInstead(ctx, db, &batch[i], now); err != nil {
					return &settleFailure{i: i, err: err}
				}
			}
			// A cancel that finds the row written already (by Cancel, outside a
			// group) is not lost.
			if n == 0 && st.d.out != Cancelled {
				lost[st.j.id] = true
			}
		}
		if want > 0 {
			var err error
			if l.keys != nil {
				// The rows of the keys whose places the lane holds (syncKeys).
				sql, args := q.sqliteKeyedClaimSQL(s.claimLimits(), l.kc.keys, l.kc.ns, l.kc.keyless, deadline, now, want)
				got, err = s.scanClaim(ctx, db, sql, args)
			} else {
				sql, args := q.leaseClaimSQL(s.claimLimits(), deadline, now, want)
				got, err = s.scanClaim(ctx, db, sql, args)
			}
			if err != nil {
				return err
			}
			return q.sqliteRateBump(ctx, db, s.o.Limits, now, len(got))
		}
		return nil
	})
	return got, err
}

// scanClaim reads the rows a SQLite claim returns. SQLite lets a column hold any
// type, so attempts and payload are read as whatever they hold and converted here
// (sqliteInt, sqliteBytes), as CAST would, without making the statement longer to
// parse. A row that still cannot be read is skipped and reported (badRow); the
// others proceed.
func (s *Subscription[T]) scanClaim(ctx context.Context, db querier, sql string, args []any) ([]*leased, error) {
	r, err := db.query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*leased
	for r.Next() {
		j := &leased{}
		var a, p any
		var err error
		if s.q.hasMeta() {
			var m metaScan
			err = r.Scan(s.q.metaDest(&m, &j.id, &a, &p)...)
			j.meta = m.meta()
		} else {
			err = r.Scan(&j.id, &a, &p)
		}
		if err != nil {
			s.badRow(err)
			continue
		}
		j.attempt = sqliteInt(a)
		j.payload = sqliteBytes(p)
		out = append(out, j)
	}
	return out, r.Err()
}

// badRow reports a claimed row that could not be read: it stays leased, and is
// claimed again when its lease expires.
func (s *Subscription[T]) badRow(err error) {
	s.q.health.badRows.Add(1)
	s.q.health.noteErr(err)
	s.q.log.Error("inbox: a claimed row cannot be read; skipped until its lease expires", "table", s.q.name, "err", err)
}

// pgCycle is one Postgres cycle: settlements other than acks one statement each, then
// the acks and the claim together in one statement.
func (s *Subscription[T]) pgCycle(ctx context.Context, l *lane, batch []settlement, want int, now, deadline time.Time, got *[]*leased, lost map[int64]bool, split bool) error {
	q := s.q
	var ids []int64
	var fences []time.Time
	for i := range batch {
		st := &batch[i]
		if st.written || st.failed != nil || (st.d.out == Cancelled && !q.holdsCancel()) {
			continue // a cancelled job's row was written by Cancel
		}
		if st.d.out == Acked && !split {
			ids = append(ids, st.j.id)
			fences = append(fences, st.j.fence)
			for _, u := range st.j.unsure {
				ids = append(ids, st.j.id)
				fences = append(fences, u)
			}
			continue
		}
		sql, args := q.settleSQL(kindOf(st.d.out), st.j.id, st.j.fenced(), now, st.d.delay, errText(st.d.err), now)
		n, err := q.db().exec(ctx, sql, args...)
		if err != nil {
			return &settleFailure{i: i, err: err}
		}
		if n == 0 && st.d.out != Cancelled {
			if n, err = s.cancelledInstead(ctx, q.db(), st, now); err != nil {
				return &settleFailure{i: i, err: err}
			}
		}
		st.written, st.lost = true, n == 0 && st.d.out != Cancelled
	}
	for _, st := range batch {
		if st.lost {
			lost[st.j.id] = true
		}
	}
	var rb *rateBudget
	if want > 0 && s.o.Limits.Rate > 0 {
		rb = &l.rate
		var err error
		if want, err = s.rateTake(ctx, rb, now, want, l.work); err != nil {
			return err
		}
	}
	if len(ids) == 0 && want == 0 {
		return nil
	}
	if ids == nil {
		ids, fences = []int64{}, []time.Time{}
	}
	var kc *keyClaim
	var take *keyTakeReq
	if want > 0 && l.keys != nil {
		kc = &l.kc
		take = kc.take
	}
	if take != nil {
		defer func() {
			if kc.take == take {
				// Not sent (a statement before it failed): dropped, not sent later
				// with times gone stale. The places it was to give back come free
				// when their lease ends.
				kc.take = nil
			}
		}()
	}
	// On a table with FIFO groups the acks go first in a statement of their own,
	// in the claim's transaction: one statement's claim reads the rows as they
	// were before its own acks (claimBlind), with the groups they free still in
	// work, and a claim that cannot see them comes back short and reads the
	// whole claim index (with every group but a few in work, 60,000 rows: 85 ms,
	// a drain of 1,000-2,000 jobs/s).
	var ackSQL string
	var ackArgs []any
	claimIDs, claimFences := ids, fences
	if q.c.Group != "" && kc == nil && want > 0 && len(ids) > 0 {
		ackSQL, ackArgs = q.pgAckClaimSQL(s.claimLimits(), ids, fences, deadline, now, 0, nil)
		claimIDs, claimFences = []int64{}, []time.Time{}
		l.sawAcks = true
	}
	sql, args := q.pgAckClaimSQL(s.claimLimits(), claimIDs, claimFences, deadline, now, want, kc)
	var out []*leased
	acked := make(map[int64]bool, len(ids))
	read := func(r pgx.Rows) error {
		defer r.Close()
		for r.Next() {
			var kind int
			j := &leased{}
			var a int64
			var err error
			if q.hasMeta() {
				var m metaScan
				err = r.Scan(q.metaDest(&m, &kind, &j.id, &a, &j.payload)...)
				j.meta = m.meta()
			} else {
				err = r.Scan(&kind, &j.id, &a, &j.payload)
			}
			if err == nil && kind >= 2 {
				if take != nil {
					take.read(kind, j.meta.key, int(a))
				}
				continue
			}
			if err != nil {
				// pgx ends the result on a scan error; the statement has committed,
				// so this is no failure of the cycle: the rows read go on, those
				// not read stay leased until their lease expires, and unread acks
				// are reported lost. (Sent in a batch, with AsyncCommit, keys or
				// FIFO groups, pgx reports the error again with the COMMIT, and the
				// cycle fails: the rows read are then left to their lease too. A
				// row fails to scan only for a payload column of a type no codec
				// reads, where every row does.)
				s.badRow(err)
				return nil
			}
			if kind == 1 {
				acked[j.id] = true
				continue
			}
			j.attempt = int(a)
			out = append(out, j)
		}
		return r.Err()
	}
	keyLock := kc != nil
	if rb != nil {
		// Whether a failed claim took rows is unknown: its reserve lapses.
		defer func() {
			if *got == nil && want > 0 {
				rb.left = 0
			}
		}()
	}
	grouped := q.c.Group != ""
	if !s.o.AsyncCommit && !keyLock && !grouped {
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
		if s.o.AsyncCommit {
			b.Queue("SET LOCAL synchronous_commit = off")
		}
		if keyLock {
			// The claim's plan would be made afresh for each run: the planner
			// never finds its generic plan cheaper, as it guesses nothing of how
			// few keys and rows it takes. Planning it cost more than running it.
			b.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
			// Nor is it ever worth compiling (JIT): its generic plan's estimate
			// can cross jit_above_cost (a take riding with it: 103,694, the
			// guess of 1,000 rows for generate_series), and then every run
			// compiled 259 functions, 80-140 ms for a statement that runs in 3.
			b.Queue("SET LOCAL jit = off")
		} else if grouped {
			for _, set := range pgGroupClaimSettings(sql) {
				b.Queue(set)
			}
		}
		pre := b.Len()
		if ackSQL != "" {
			b.Queue(ackSQL, ackArgs...)
		}
		b.Queue(sql, args...)
		gives := 0
		if take != nil {
			// The places given back go after the take, as with keyTake.
			q.queueGive(b, take.back, take.tag, take.until, take.gone, take.now, take.n)
			gives = b.Len() - pre - 1
		}
		b.Queue("COMMIT")
		br := q.pool.SendBatch(ctx, b)
		err := func() error {
			if err := execN(br, pre); err != nil {
				return err
			}
			if ackSQL != "" {
				r, err := br.Query()
				if err != nil {
					return err
				}
				if err := read(r); err != nil {
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
			if err := execN(br, gives); err != nil {
				return err
			}
			_, err = br.Exec()
			return err
		}()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if take != nil {
			// The take is done with, whatever the outcome: a claim tried again
			// takes of the places held then.
			kc.take = nil
			s.took(l, take, err)
			if err != nil {
				kc.keys, kc.ns, _ = l.keys.free(s.keyPer(l))
			}
		}
		if err != nil {
			return err
		}
	}
	for i := range batch {
		// An ack that missed its row because the job was cancelled meanwhile is
		// settled as Cancelled (the claim above did not see its group freed:
		// claimBlind). The claim has committed: a failure here leaves the row to
		// its lease, as a lost ack would.
		st := &batch[i]
		if st.d.out != Acked || st.written || st.failed != nil || acked[st.j.id] || !q.holdsCancel() {
			continue
		}
		if n, err := s.cancelledInstead(ctx, q.db(), st, now); err == nil && n == 1 {
			acked[st.j.id] = true
			st.written = true
			if l != nil {
				l.sawAcks = false // its group was freed after the claim: claimBlind
			}
		}
	}
	for _, id := range ids {
		if !acked[id] {
			lost[id] = true
		}
	}
	if out == nil {
		out = []*leased{}
	}
	if rb != nil {
		rb.left -= len(out)
	}
	*got = out
	return nil
}

// keyClaim is what a claim with PerPartition may take: up to ns[i] rows
// of keys[i] (the lane's free places), and rows without a key if keyless.
type keyClaim struct {
	keys    []string
	ns      []int
	keyless bool
	take    *keyTakeReq // a take of places that rides with the claim (Postgres), or nil
}

// keylessDue reports whether the lane's next claim looks for rows without a key.
func (l *lane) keylessDue(now time.Time) bool { return l.keyless || !now.Before(l.keylessAt) }

// keyedWant sets the lane's next keyClaim and bounds want by it.
//
// With a take of places pending (keySlots.pending, Postgres), the take rides
// with the claim: the claim's keys are those of the places held after it, each
// up to keyPer rows a place (as with the k places taken) less the lane's rows of
// the key, which the statement works out (pgAckClaimSQL); want is bounded by as
// many as the places would hold if the take got all it asks for.
func (s *Subscription[T]) keyedWant(l *lane, want int) int {
	ks := l.keys
	if t := ks.pending; t != nil {
		ks.pending = nil
		t.per = s.keyPerOf(l, ks.count()+t.k)
		// keys and ns are those of the places held now: what the claim took of,
		// should it run without the take (Stop dropped it: cycle).
		keys, ns, total := ks.free(t.per)
		t.infKeys, t.infNs = t.infKeys[:0], t.infNs[:0]
		for k, n := range ks.inflight {
			if n > 0 {
				t.infKeys, t.infNs = append(t.infKeys, k), append(t.infNs, n)
			}
		}
		l.kc = keyClaim{keys: keys, ns: ns, keyless: l.keylessDue(time.Now()), take: t}
		if !l.kc.keyless {
			want = min(want, total+t.k*t.per)
		}
		return want
	}
	keys, ns, total := ks.free(s.keyPer(l))
	l.kc = keyClaim{keys: keys, ns: ns, keyless: l.keylessDue(time.Now())}
	if !l.kc.keyless {
		want = min(want, total)
	}
	return want
}

// keysIdle reports whether a lane with PerPartition places has nothing to claim
// (no free place, no look for rows without a key due), nothing to give back or
// delete (no places a refused give-back held due again, no key given back
// whose places are due for deletion: dropDue; on Postgres the
// settlements it waited for are written beside the loop, which wakes for them)
// and nothing to ask for (as many places as workers, or its last ask too
// recent).
func (s *Subscription[T]) keysIdle(l *lane) bool {
	now := time.Now()
	_, _, total := l.keys.free(s.keyPer(l))
	if total > 0 || l.keylessDue(now) || l.keys.dropDue() {
		return false
	}
	need := l.n
	if l.slots != nil {
		need = min(need, len(l.slots.names))
	}
	return l.keys.count() >= need || now.Before(l.keys.retryAt)
}

// keyPer is how many rows a lane may hold for each place of PerPartition it
// holds: as many as it may hold in all (its workers and prefetch, and with
// Concurrency no more than its slots allow: claimLimit) shared among its places,
// so that a lane holding fewer places than workers still holds its prefetch (the
// workers' gate keeps the handlers to the places), but no more than 4 times its
// rows per worker, so that a lane with few places does not hoard its keys' rows;
// one in a batch subscription, whose handlers run every row they hold.
func (s *Subscription[T]) keyPer(l *lane) int { return s.keyPerOf(l, l.keys.count()) }

// keyPerOf is keyPer for a lane holding places places.
func (s *Subscription[T]) keyPerOf(l *lane, places int) int {
	if s.bh != nil {
		return 1
	}
	n := s.claimLimit(l)
	return max(1, min(n/max(1, places), 4*n/l.n))
}
