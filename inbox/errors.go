package inbox

import (
	"errors"
	"fmt"
)

// ErrLeaseLost is matched (errors.Is) by every *LeaseLostError.
var ErrLeaseLost = errors.New("inbox: lease lost")

// ErrStopped is returned by Start on a Subscription that was already started or stopped
// (a Subscription runs once), or that Stop overtook while Start checked the table.
var ErrStopped = errors.New("inbox: subscription already started or stopped")

// LeaseLostError reports that a claim was lost: a settlement or lease extension found
// the row no longer under the claim that took it (the lease expired and the row was
// claimed again, or settled, by someone else), or the claim was lost while its
// handler ran. The write was not made, so the newer claim's result stands.
//
// In the row-lock and advisory-lock forms, Err is set when the connection holding the
// lock failed: the write was not made, or, if the connection failed during the row
// lock's COMMIT, its fate is unknown; either way the attempt is not reported as
// settled, and the job may run again.
type LeaseLostError struct {
	Table string
	ID    int64
	// Op is the fenced statement that found no row ("ack", "retry", "dead", "drop",
	// "extend" or "release"), or, as the cause of a handler's cancelled context, why
	// the claim was lost: "expired" (the lease ran out before it could be extended)
	// or "lock" (the connection holding the lock failed).
	Op string
	// Err is the connection's failure, if that is how the claim was lost.
	Err error
}

// Error describes the failure.
func (e *LeaseLostError) Error() string {
	msg := fmt.Sprintf("inbox: lease lost on %s job %d (%s)", e.Table, e.ID, e.Op)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the connection's failure, if any.
func (e *LeaseLostError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// ConfigError reports a Config or SubscribeOptions value the inbox refuses.
type ConfigError struct {
	Field  string
	Reason string
}

// Error describes the failure.
func (e *ConfigError) Error() string { return "inbox: " + e.Field + ": " + e.Reason }

// FormError reports a claim form, or a form and clock, that a database cannot do.
// It is returned by Subscribe, before any job is claimed.
type FormError struct {
	Form    Form
	Dialect Dialect
	Reason  string
}

// Error describes the failure.
func (e *FormError) Error() string {
	return fmt.Sprintf("inbox: %s form on %s: %s", e.Form, e.Dialect, e.Reason)
}

// StatementError reports a statement that the real table refused when a subscription
// checked it at start: most often a missing table or column.
type StatementError struct {
	Table     string
	Statement string
	Err       error
}

// Error describes the failure.
func (e *StatementError) Error() string {
	return fmt.Sprintf("inbox: table %s refuses statement %q: %v", e.Table, e.Statement, e.Err)
}

// Unwrap returns the underlying error.
func (e *StatementError) Unwrap() error { return e.Err }

// DecodeError reports a payload the codec could not decode. The job is dead-lettered
// with this error as its last error, and the worker goes on.
type DecodeError struct {
	ID  int64
	Err error
}

// Error describes the failure.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("inbox: job %d: cannot decode payload: %v", e.ID, e.Err)
}

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

// PanicError is the failure recorded for a handler that panicked. The job is retried
// like any failed attempt.
type PanicError struct {
	Value any
	Stack []byte
}

// Error describes the failure.
func (e *PanicError) Error() string { return fmt.Sprintf("inbox: handler panicked: %v", e.Value) }

// DialectError reports a call that needs another database, such as a pgx
// transaction given to a SQLite queue.
type DialectError struct {
	Want, Got Dialect
	Op        string
}

// Error describes the failure.
func (e *DialectError) Error() string {
	return fmt.Sprintf("inbox: %s needs a %s queue, got %s", e.Op, e.Want, e.Got)
}

// ColumnError reports a column of the job table whose definition would break claims:
// it allows rows that no claim could take or settle (a NULL id, a NULL lock deadline
// on a table without Columns.LockedUntilNullable), or values the inbox cannot read.
// Start and Spawn return it, before any job is claimed.
type ColumnError struct {
	Table  string
	Column string
	Reason string
}

// Error describes the failure.
func (e *ColumnError) Error() string {
	return fmt.Sprintf("inbox: table %s, column %s: %s", e.Table, e.Column, e.Reason)
}

// ExhaustedError is the last error of a job dead-lettered by the claim that found it
// exhausted: claimed more than MaxAttempts times, though no attempt settled it (its
// handler's process crashed, or its claim was lost, every time). The job is not run
// again; Queue.Requeue makes it ready. The claim that found it counted itself, so
// Attempts is MaxAttempts + 1 or more.
type ExhaustedError struct {
	Table       string
	ID          int64
	Attempts    int
	MaxAttempts int
}

// Error describes the failure.
func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("inbox: %s job %d exhausted its attempts without settling (claimed %d times, MaxAttempts %d): its handler's process crashed or lost its claim every time",
		e.Table, e.ID, e.Attempts, e.MaxAttempts)
}
