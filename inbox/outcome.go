package inbox

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Outcome is how a job's attempt was settled.
type Outcome uint8

const (
	// Acked: done; the row was deleted (or marked processed).
	Acked Outcome = iota + 1
	// Retried: the row was made claimable again, now or after a delay.
	Retried
	// Dropped: done without success; the row was removed like an ack, and logged.
	Dropped
	// DeadLettered: kept with its last error and never claimed again until requeued.
	DeadLettered
	// Released: handed back unfinished at shutdown, its attempt not counted.
	Released
	// Snoozed: the handler returned Snooze; the row runs again after the delay, its
	// attempt not counted.
	Snoozed
	// Cancelled: Queue.Cancel cancelled the job while it was in work; the row is kept,
	// cancelled, and never claimed again until requeued. Never counted a success.
	Cancelled
)

// lastOutcome is the highest Outcome.
const lastOutcome = Cancelled

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Retried:
		return "retried"
	case Dropped:
		return "dropped"
	case DeadLettered:
		return "dead"
	case Released:
		return "released"
	case Snoozed:
		return "snoozed"
	case Cancelled:
		return "cancelled"
	}
	return "unknown"
}

// Result is reported to SubscribeOptions.Observe once for every settled attempt.
type Result struct {
	ID      int64
	Attempt int
	Outcome Outcome
	// Err is what the handler returned (or its *PanicError, or a *DecodeError).
	Err error
	// SettleErr is non-nil when the settlement was not written: a *LeaseLostError
	// means a newer claim owns the row and its result stands.
	SettleErr error
}

type retryOutcome struct {
	after time.Duration
	cause error
}

func (e *retryOutcome) Error() string {
	if e.cause != nil {
		return "inbox: retry: " + e.cause.Error()
	}
	return "inbox: retry"
}
func (e *retryOutcome) Unwrap() error { return e.cause }

type snoozeOutcome struct{ after time.Duration }

func (e *snoozeOutcome) Error() string { return "inbox: snooze " + e.after.String() }

type dropOutcome struct{ reason error }

func (e *dropOutcome) Error() string { return "inbox: drop: " + errText(e.reason) }
func (e *dropOutcome) Unwrap() error { return e.reason }

type deadOutcome struct{ reason error }

func (e *deadOutcome) Error() string { return "inbox: dead letter: " + errText(e.reason) }
func (e *deadOutcome) Unwrap() error { return e.reason }

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Retry is a handler result asking for the job to run again after the given delay
// (0: at once). The attempt counts: once MaxAttempts is reached the job is
// dead-lettered instead.
func Retry(after time.Duration) error { return &retryOutcome{after: max(after, 0)} }

// Snooze is a handler result asking for the job to run again after d (0: at once)
// without counting this attempt: the row's attempts go back to what they were
// before its claim, its last error is left as it was, and MaxAttempts is not
// reached by snoozing. Unlike Retry, a snoozed job can run any number of times.
func Snooze(d time.Duration) error { return &snoozeOutcome{after: max(d, 0)} }

// Drop is a handler result: the job is done without success. The row is removed like
// an ack and the reason is logged at warning level.
func Drop(reason error) error { return &dropOutcome{reason: reason} }

// DeadLetter is a handler result: the job is kept with reason as its last error and
// never claimed again until requeued.
func DeadLetter(reason error) error { return &deadOutcome{reason: reason} }

// DefaultBackoff is the retry delay after a failed attempt (1-based): 1 s doubled per
// attempt, capped at 1 h, with ±20% jitter.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := time.Hour
	if attempt <= 12 {
		d = min(time.Second<<(attempt-1), time.Hour)
	}
	j := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * j)
}

// decision is how a worker settles one attempt.
type decision struct {
	out   Outcome
	delay time.Duration
	err   error // the handler's error, recorded as last error
}

// decide turns a handler's result into a settlement.
func decide(err error, attempt, maxAttempts int, countAttempts bool, backoff func(int) time.Duration) decision {
	if err == nil {
		return decision{out: Acked}
	}
	exhausted := countAttempts && maxAttempts > 0 && attempt >= maxAttempts
	var r *retryOutcome
	var dr *dropOutcome
	var dd *deadOutcome
	var de *DecodeError
	var sn *snoozeOutcome
	switch {
	case errors.As(err, &sn):
		return decision{out: Snoozed, delay: sn.after}
	case errors.As(err, &dd), errors.As(err, &de):
		return decision{out: DeadLettered, err: err}
	case errors.As(err, &dr):
		return decision{out: Dropped, err: err}
	case exhausted:
		return decision{out: DeadLettered, err: err}
	case errors.As(err, &r):
		return decision{out: Retried, delay: r.after, err: err}
	default:
		return decision{out: Retried, delay: backoff(max(attempt, 1)), err: err}
	}
}
