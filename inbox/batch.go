package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
)

// BatchHandler handles up to n claimed jobs at once (Queue.SubscribeBatch), in claim
// order. Return nil to ack every job; BatchErrors to give each job its own result
// (nil, Retry, Snooze, Drop, DeadLetter or a failure, as a Handler returns); any
// other error, or a panic (a *PanicError), is a failed attempt of every job of the
// batch, retried after Backoff and dead-lettered at MaxAttempts.
//
// The handler takes one context for the batch. ctx is cancelled when the claim of
// any job of the batch is lost, when Stop's deadline passes or Start's context
// ends, or when Queue.Cancel cancels one of its jobs (the cause is then
// ErrJobCancelled). A cancelled job is settled as Cancelled whatever the handler
// returns for it; every other job of the batch settles by its own result: nil acks
// it and a verdict does what it says, as without the cancel, while a result that
// is the context's end (an error matching context.Canceled or ErrJobCancelled,
// for the job or for the whole batch) releases the job: it is handed back at
// once, its attempt not counted, and claimed again. So a handler that stops at
// the cancel returns nil for the jobs it finished and ctx.Err() for the rest
// (or ctx.Err() alone), and no job but the cancelled one is counted a failure.
// Jobs whose payload does not decode are dead-lettered with a
// *DecodeError and not passed to the handler. Config.Hooks.Handle wraps each call,
// once for the batch (see Hooks).
type BatchHandler[T any] func(ctx context.Context, jobs []Job[T]) error

// BatchErrors, returned by a BatchHandler, holds one result per job of the batch,
// in the order of the jobs it was given; a nil entry acks its job. BatchErrors of
// another length than the batch fail every job with a *BatchFailedError.
type BatchErrors []error

// Error counts the entries that are not nil.
func (e BatchErrors) Error() string {
	n := 0
	for _, err := range e {
		if err != nil {
			n++
		}
	}
	return fmt.Sprintf("inbox: %d of %d jobs of the batch did not succeed", n, len(e))
}

// BatchFailedError is the last error of every job of a batch that failed as a
// whole: in the RowLock form, one job's failure rolled back the transaction holding
// the batch, so every job is retried (its attempt counted, after Backoff) or
// dead-lettered at MaxAttempts; in either form, a handler that returned BatchErrors
// of the wrong length. Err is the failure; ID the job that failed (0 when the
// handler failed as a whole). Errors.As finds Err's type through it (a
// *PanicError, say).
type BatchFailedError struct {
	Table string
	ID    int64
	Jobs  int
	Err   error
}

// Error describes the failure.
func (e *BatchFailedError) Error() string {
	if e.ID == 0 {
		return fmt.Sprintf("inbox: %s batch of %d jobs failed: %v", e.Table, e.Jobs, e.Err)
	}
	return fmt.Sprintf("inbox: %s batch of %d jobs rolled back: job %d failed: %v", e.Table, e.Jobs, e.ID, e.Err)
}

// Unwrap returns the failure.
func (e *BatchFailedError) Unwrap() error { return e.Err }

// SubscribeBatch makes a subscription whose handler takes up to n jobs per call, as
// RustStream's batch(n). Each worker (SubscribeOptions.Workers) claims up to n rows
// and hands them to h together; every other option means what it does for
// Subscribe (Prefetch counts rows beyond Workers × n: by default 4 × Workers while
// handlers are fast).
//
// In the Lease form (SQLite and Postgres) each job settles on its own, as h's
// result for it says, written with the subscription's next claim as single jobs
// are. In the RowLock form (Postgres) the batch's rows are held in one transaction
// while h runs and their settlements commit together in it; if h fails (an error
// that is not BatchErrors, a panic, or a BatchErrors entry that is a failure rather
// than nil, Retry, Snooze, Drop or DeadLetter), the transaction is rolled back and
// every job of the batch is retried with a *BatchFailedError (attempts counted) or
// dead-lettered past MaxAttempts. The AdvisoryLock form is refused (a *FormError).
//
// Errors: a *ConfigError for a nil h or an n outside 1 to MaxBatch, and whatever
// Subscribe returns.
func (q *Queue[T]) SubscribeBatch(h BatchHandler[T], n int, o SubscribeOptions) (*Subscription[T], error) {
	if h == nil {
		return nil, &ConfigError{Field: "handler", Reason: "nil"}
	}
	if n < 1 || n > MaxBatch {
		return nil, &ConfigError{Field: "n", Reason: fmt.Sprintf("%d: a batch holds 1 to MaxBatch (%d) jobs", n, MaxBatch)}
	}
	if o.Form == AdvisoryLock {
		return nil, &FormError{Form: o.Form, Dialect: q.dialect, Reason: "batches are claimed in the lease and row lock forms"}
	}
	return q.subscribe(nil, h, n, o)
}

// MaxBatch bounds the n of SubscribeBatch: a subscription holds room for
// Workers × n claimed rows (and, in the row lock form, n row locks in one
// transaction per worker).
const MaxBatch = 10000

// batchJob is one claimed row of a batch.
type batchJob struct {
	id       int64
	attempt  int
	payload  []byte
	meta     jobMeta
	deadline time.Time // RowLock: the lock deadline its claim wrote
}

// runBatch decodes the jobs and calls the batch handler once with those that
// decode; it returns each job's result, in order, and when it started (for
// timeBatch, once the settlements are decided).
func (s *Subscription[T]) runBatch(ctx context.Context, jobs []batchJob) (errs []error, start time.Time) {
	start = time.Now()
	errs = make([]error, len(jobs))
	in := make([]Job[T], 0, len(jobs))
	idx := make([]int, 0, len(jobs))
	var ms []jobMeta
	for i, j := range jobs {
		v, err := s.decode(j.id, j.payload)
		if err != nil {
			errs[i] = err
			continue
		}
		in = append(in, Job[T]{ID: j.id, Attempt: j.attempt, Payload: v})
		idx = append(idx, i)
		if s.q.hooks.Handle != nil {
			ms = append(ms, j.meta)
		}
	}
	if len(in) > 0 {
		err := s.callBatch(ctx, in, ms)
		var be BatchErrors
		if errors.As(err, &be) {
			if len(be) == len(in) {
				for k, i := range idx {
					errs[i] = be[k]
				}
				err = nil
			} else {
				err = &BatchFailedError{Table: s.q.name, Jobs: len(in), Err: fmt.Errorf("the handler returned %d results for %d jobs", len(be), len(in))}
			}
		}
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
	}
	return errs, start
}

// timeBatch times every attempt of a batch that started at start, by how each is
// settled.
func (s *Subscription[T]) timeBatch(start time.Time, jobs []batchJob, ds []decision) {
	for i, j := range jobs {
		s.timedAs(start, j.attempt, j.meta, ds[i].out)
	}
}

// endedByCancel reports whether a job's result is only the end of the batch
// handler's context, ended by Queue.Cancel of another job of the batch: that job
// is released, not failed.
func endedByCancel(err error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ErrJobCancelled))
}

// callBatch calls the batch handler (under Hooks.Handle, given the jobs' metas ms);
// a panic of either is a *PanicError.
func (s *Subscription[T]) callBatch(ctx context.Context, jobs []Job[T], ms []jobMeta) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	if s.q.hooks.Handle != nil {
		return s.hookHandleBatch(ctx, jobs, ms)
	}
	return s.bh(ctx, jobs)
}

// isVerdict reports whether a job's result says how to settle it (nil, Retry,
// Snooze, Drop, DeadLetter, or a payload that does not decode) rather than fail.
func isVerdict(err error) bool {
	var r *retryOutcome
	var sn *snoozeOutcome
	var dr *dropOutcome
	var dd *deadOutcome
	var de *DecodeError
	return err == nil || errors.As(err, &r) || errors.As(err, &sn) || errors.As(err, &dr) || errors.As(err, &dd) || errors.As(err, &de)
}

// leaseBatchWorker is a worker of a lease-form batch subscription: it runs the batches
// its lane's loop dispatches until the loop closes l.chunks, and sends each job's
// settlement on its own. With slots of Limits.Concurrency each job runs in a slot
// of its own: a batch runs as many of its jobs at once as the worker can take
// slots for, and the rest after them.
func (s *Subscription[T]) leaseBatchWorker(l *lane) {
	for js := range l.chunks {
		if s.ctx.Err() != nil {
			for _, j := range js {
				j.finish() // as in a crash: the leases expire
			}
			continue
		}
		run := js
		for len(run) > 0 {
			stopping := false
			select {
			case <-s.stopClaim:
				stopping = true
			default:
			}
			ready := run[:0:0]
			for _, j := range run {
				if stopping || j.ctx.Err() != nil {
					l.giveBack(j)
					continue
				}
				ready = append(ready, j)
			}
			if len(ready) == 0 {
				break
			}
			n := len(ready)
			if l.slots != nil {
				if n = l.slots.gate.enterUpTo(ready, s.stopClaim); n == 0 {
					// No slot before the first job's lease ran out, or stopping:
					// the loop above gives back what cannot run.
					if s.ctx.Err() != nil {
						for _, j := range ready {
							j.finish()
						}
						break
					}
					run = ready
					continue
				}
			}
			s.runLeasedBatch(l, ready[:n])
			run = ready[n:]
		}
	}
}

// runLeasedBatch runs the jobs run (their contexts live) as one batch and sends
// their settlements, giving back their slots of Concurrency, if any, as the
// handler returns.
func (s *Subscription[T]) runLeasedBatch(l *lane, run []*leased) {
	// One context for the handler, ended by any of its jobs' contexts.
	hctx, cancel := context.WithCancelCause(s.workCtx)
	jobs := make([]batchJob, len(run))
	stops := make([]func() bool, len(run))
	for i, j := range run {
		jobs[i] = batchJob{id: j.id, attempt: j.attempt, payload: j.payload, meta: j.meta}
		stops[i] = context.AfterFunc(j.ctx, func() { cancel(context.Cause(j.ctx)) })
	}
	errs, began := s.runBatch(hctx, jobs)
	dur := max(time.Since(began)/time.Duration(len(run)), 1)
	for i, j := range run {
		stops[i]()
		if l.slots != nil {
			l.slots.gate.leave(j)
		}
		j.finish()
	}
	cancel(nil)
	if s.ctx.Err() != nil {
		return // as in a crash: nothing is written; the leases expire
	}
	byCancel := slices.ContainsFunc(run, func(j *leased) bool { return wasCancelled(j.ctx) })
	ds := make([]decision, len(run))
	for i, j := range run {
		d := decide(errs[i], j.attempt, s.o.MaxAttempts, s.q.c.Attempts != "", s.o.Backoff)
		switch {
		case wasCancelled(j.ctx):
			d = decision{out: Cancelled, err: ErrJobCancelled}
		case errs[i] != nil && context.Cause(s.workCtx) == errRelease:
			d = decision{out: Released, err: errs[i]}
		case byCancel && endedByCancel(errs[i]):
			d = decision{out: Released, err: errs[i]}
		}
		ds[i] = d
	}
	s.timeBatch(began, jobs, ds)
	for i, j := range run {
		l.settleCh <- settlement{j: j, d: ds[i], dur: dur} // never blocks: capacity l.max
	}
}
