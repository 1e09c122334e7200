package supervisor

import (
	"errors"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Errors of the management functions, as OTP's supervisor returns them.
var (
	// ErrRunning: the child is running (RestartChild, DeleteChild).
	ErrRunning = errors.New("supervisor: child is running")
	// ErrRestarting: the child is being restarted after a failed restart
	// (RestartChild, DeleteChild).
	ErrRestarting = errors.New("supervisor: child is restarting")
	// ErrNotFound: no child has that id (or, for a dynamic supervisor, that
	// PID).
	ErrNotFound = errors.New("supervisor: child not found")
	// ErrAlreadyPresent: StartChild with the id of a child spec that is
	// kept but not running.
	ErrAlreadyPresent = errors.New("supervisor: child spec already present")
	// ErrAlreadyStarted matches *AlreadyStartedError with errors.Is. It is
	// server.ErrAlreadyStarted, so one test covers both.
	ErrAlreadyStarted = server.ErrAlreadyStarted
	// ErrMaxIntensity is the exit reason of a supervisor that gave up:
	// more restarts than its intensity within its period. It wraps
	// gotp.ErrShutdown, as OTP's supervisor exits with shutdown, so a parent
	// restarts it only if it is Permanent.
	ErrMaxIntensity = fmt.Errorf("%w: reached max restart intensity", gotp.ErrShutdown)
	// ErrAutoShutdown is the exit reason of a supervisor that shut itself
	// down because its significant children ended (Spec.AutoShutdown). It
	// wraps gotp.ErrShutdown, as OTP's supervisor exits with shutdown.
	ErrAutoShutdown = fmt.Errorf("%w: significant children ended (auto shutdown)", gotp.ErrShutdown)
	// ErrDynamic: an operation on child ids asked of a dynamic supervisor.
	ErrDynamic = errors.New("supervisor: not supported by a dynamic supervisor")
	// ErrNotDynamic: a dynamic-child operation asked of a static supervisor.
	ErrNotDynamic = errors.New("supervisor: not a dynamic supervisor")
	// ErrMaxChildren: a dynamic supervisor already runs MaxChildren
	// children.
	ErrMaxChildren = errors.New("supervisor: max children reached")
	// ErrNotSupervisor: the destination is not a supervisor of this
	// package (Inspect, Tree).
	ErrNotSupervisor = errors.New("supervisor: not a supervisor")
)

// AlreadyStartedError is StartChild's error when a child with the id is
// running (OTP's already_started); PID is that child.
type AlreadyStartedError struct {
	ID  string
	PID gotp.PID
}

// Error names the child and its PID.
func (e *AlreadyStartedError) Error() string {
	return fmt.Sprintf("supervisor: child %q already started as %v", e.ID, e.PID)
}

// Is makes errors.Is(err, ErrAlreadyStarted) true.
func (e *AlreadyStartedError) Is(target error) bool { return target == ErrAlreadyStarted }

// ChildStartError is the error of a child that failed to start: Start's
// when one of the declared children fails (the ones already started have
// been stopped in reverse order), StartChild's and RestartChild's. Err is
// the start function's error; errors.Is and errors.As see through to it.
type ChildStartError struct {
	ID  string // empty for a dynamic child
	Err error
}

// Error names the child and the start error.
func (e *ChildStartError) Error() string {
	return fmt.Sprintf("supervisor: child %q failed to start: %v", e.ID, e.Err)
}

// Unwrap returns the start function's error.
func (e *ChildStartError) Unwrap() error { return e.Err }

// SpecError reports an invalid Spec, ChildSpec or DynamicSpec: an empty or
// duplicate id, a nil start function, an unknown enum value, a negative
// period or shutdown.
type SpecError struct {
	ID     string
	Reason string
}

// Error says what is wrong with which child.
func (e *SpecError) Error() string {
	if e.ID == "" {
		return "supervisor: bad spec: " + e.Reason
	}
	return fmt.Sprintf("supervisor: bad spec for child %q: %s", e.ID, e.Reason)
}

// ArgTypeError is StartDynamicChild's error when the argument's type is not
// the one of the supervisor's DynamicSpec.
type ArgTypeError struct {
	Got  any
	Want string
}

// Error names both types.
func (e *ArgTypeError) Error() string {
	return fmt.Sprintf("supervisor: dynamic child argument %T, want %s", e.Got, e.Want)
}
