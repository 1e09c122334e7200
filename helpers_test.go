package gotp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gotp/gotp"
)

var errBoom = errors.New("boom")

// blocker spawns a process that waits until release is closed (not in
// Receive) and then ends with nil.
func blocker(t testing.TB, n *gotp.Node, release <-chan struct{}, opts ...gotp.SpawnOption) gotp.PID {
	t.Helper()
	pid, err := n.Spawn(func(p *gotp.Process) error {
		<-release
		return nil
	}, opts...)
	if err != nil {
		t.Fatalf("Spawn blocker: %v", err)
	}
	return pid
}

// waiter spawns a process that waits in Receive and ends with the reason
// it is given as a message (an error, or nil for any other message).
func waiter(t testing.TB, n *gotp.Node, opts ...gotp.SpawnOption) gotp.PID {
	t.Helper()
	pid, err := n.Spawn(func(p *gotp.Process) error {
		msg, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		if e, ok := msg.(error); ok {
			return e
		}
		return nil
	}, opts...)
	if err != nil {
		t.Fatalf("Spawn waiter: %v", err)
	}
	return pid
}

// run spawns a process that runs fn and sends its result (or the panic it
// would otherwise crash with) to the returned channel.
func run[T any](t testing.TB, n *gotp.Node, fn func(p *gotp.Process) T, opts ...gotp.SpawnOption) (gotp.PID, <-chan T) {
	t.Helper()
	ch := make(chan T, 1)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		ch <- fn(p)
		return nil
	}, opts...)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	return pid, ch
}

// status returns the status of pid, or StatusExited if it is gone.
func status(n *gotp.Node, pid gotp.PID) gotp.Status {
	in, ok := n.ProcessInfo(pid)
	if !ok {
		return gotp.StatusExited
	}
	return in.Status
}
