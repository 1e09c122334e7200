package pg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gotp/gotp"
)

// Errors of the package. Test for them with errors.Is; the typed errors
// below match their sentinel too (errors.Is(err, ErrDenied) is true for a
// *DeniedError).
var (
	// ErrReleased is returned by every operation of an Instance after
	// Release, or after the instance's process has exited.
	ErrReleased = errors.New("pg: instance released")

	// ErrScopeClosed is returned by every operation once the scope's
	// process has exited (stopped, killed, or its node stopped). Its groups
	// and subscriptions are gone; a restarted scope is a new Scope.
	ErrScopeClosed = errors.New("pg: scope closed")

	// ErrNoScope is returned by Lookup and Open when no scope runs under
	// the id on the node.
	ErrNoScope = errors.New("pg: no such scope")

	// ErrDenied matches *DeniedError: the scope's Policy refused an
	// operation.
	ErrDenied = errors.New("pg: permission denied")

	// ErrNotJoined matches *NotJoinedError: a leave of groups the process
	// is not a member of.
	ErrNotJoined = errors.New("pg: not joined")

	// ErrInvalid is returned (wrapped, with the detail) for a missing or
	// empty argument: an empty group name, no groups at all, an empty
	// scope id, a nil process.
	ErrInvalid = errors.New("pg: invalid argument")
)

// DeniedError is returned when the scope's Policy refuses an operation.
// Nothing has changed when it is returned. It matches ErrDenied.
type DeniedError struct {
	Permission Permission // the permission asked for, for example PermJoin
	Resource   string     // the group name, or the scope id for scope-wide permissions
	PID        gotp.PID   // the process the operation acted for
}

// Error names the permission, the resource and the process.
func (e *DeniedError) Error() string {
	return fmt.Sprintf("pg: permission denied: %s on %q for %v", e.Permission, e.Resource, e.PID)
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// NotJoinedError is returned by Leave when the process was a member of none
// of the groups it named (a batch leave is best effort: it fails only when
// it left nothing). It matches ErrNotJoined.
type NotJoinedError struct {
	Groups []string // the groups named by the Leave
}

// Error names the groups.
func (e *NotJoinedError) Error() string {
	return "pg: not joined: " + strings.Join(quoteAll(e.Groups), ", ")
}

// Is makes errors.Is(err, ErrNotJoined) true.
func (e *NotJoinedError) Is(target error) bool { return target == ErrNotJoined }

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func invalid(what string) error { return fmt.Errorf("%w: %s", ErrInvalid, what) }
