package gotp

import (
	"errors"
	"fmt"
)

// Exit reasons. A process ends with a reason: nil is normal, anything else
// is an error value. These sentinels carry Erlang's special reasons; test
// for them with errors.Is, so that a wrapped reason such as
// fmt.Errorf("%w: draining", ErrShutdown) counts too.
var (
	// ErrShutdown asks a process to stop, and is the reason of a process
	// stopped by its supervisor or by Node.Stop. Like normal, it is not an
	// abnormal exit: transient children are not restarted after it.
	ErrShutdown = errors.New("shutdown")

	// ErrKill, sent with Exit, kills the target even if it traps exits.
	// The target then exits with ErrKilled.
	ErrKill = errors.New("kill")

	// ErrKilled is the reason of a process killed by ErrKill. Linked
	// processes receive it as an ordinary (trappable) exit signal.
	ErrKilled = errors.New("killed")

	// ErrNoProc is the reason reported for a process that did not exist
	// when it was monitored or linked, and the error of calling one.
	ErrNoProc = errors.New("noproc")

	// ErrNoConnection is the reason reported by monitors and links of a
	// process whose node was lost.
	ErrNoConnection = errors.New("noconnection")

	// ErrGoexit is the reason of a process whose goroutine called
	// runtime.Goexit (directly, or through testing.T.FailNow) in its
	// function or handler. The goroutine ends whatever gotp does; the
	// process ends with it, as after a panic: an abnormal exit.
	ErrGoexit = errors.New("gotp: runtime.Goexit called in the process")

	// ErrMailboxOverflow is the reason of a process killed because a
	// message found its mailbox full under a limit with OverflowKill (see
	// Process.SetMailboxLimit). It is abnormal, as Erlang's kill by
	// max_heap_size: links and monitors see it, supervisors restart.
	ErrMailboxOverflow = errors.New("mailbox_overflow")

	// ErrNodeStopped is returned by operations on a stopped Node.
	ErrNodeStopped = errors.New("gotp: node stopped")

	// ErrNotProcess is returned by operations that only a live process may
	// perform, when asked of a Process handle that has exited or of a
	// handler-mode process (for example Receive).
	ErrNotProcess = errors.New("gotp: not allowed for this process")
)

// IsNormal reports whether reason is a normal exit: nil or ErrShutdown
// (wrapped or not). A transient child is restarted only after an exit that
// is not normal; supervisors do not log normal exits as failures.
func IsNormal(reason error) bool {
	return reason == nil || errors.Is(reason, ErrShutdown)
}

// PanicError is the exit reason of a process whose code panicked. Value is
// the value passed to panic, Stack the goroutine's stack at the panic.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns the panic value, without the stack.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error, so that
// errors.Is(reason, io.EOF) sees through panic(io.EOF).
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// AlreadyRegisteredError is returned when a name is taken. Owner is the
// process that holds it.
type AlreadyRegisteredError struct {
	Name  string
	Owner PID
}

// Error names the name and its holder.
func (e *AlreadyRegisteredError) Error() string {
	return fmt.Sprintf("gotp: name %q already registered to %v", e.Name, e.Owner)
}

// Down is the message a monitoring process receives when the monitored
// process exits (or was already gone: Reason is then ErrNoProc).
type Down struct {
	Ref    Ref
	PID    PID
	Reason error
}

// Exit is the message a process that traps exits receives instead of dying
// when an exit signal reaches it: from a linked process that ended (Reason
// is that process's reason; nil for normal), or from Exit. From is the zero
// PID when the signal came from the Node itself (Node.Exit, Node.Stop).
type Exit struct {
	From   PID
	Reason error
}
