package gotp_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gotp/gotp"
)

// waitLong bounds every wait for something that should happen promptly. It
// is generous: a wait that runs out is a failure, not a slow machine.
const waitLong = 10 * time.Second

var errBoom = errors.New("boom")

// newNode returns a node that is stopped when the test ends.
func newNode(t testing.TB) *gotp.Node {
	t.Helper()
	n := gotp.NewNode(gotp.Options{Name: "test@host.example", Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return n
}

// watch returns a channel that receives the exit reason of pid, through a
// MonitorFunc. MonitorFunc callbacks may run before the exit signals of the
// process's links are sent: to wait for those too, use exitDone.
func watch(n *gotp.Node, pid gotp.PID) <-chan error {
	ch := make(chan error, 1)
	n.MonitorFunc(pid, func(d gotp.Down) { ch <- d.Reason })
	return ch
}

// exitDone returns a channel that receives the exit reason of pid once its
// exit is complete: its links signalled (and, recursively, the exits those
// caused) and its Down messages delivered. It learns this from a Down
// message, which is delivered last, received by a handler-mode process that
// ends after forwarding it.
func exitDone(t testing.TB, n *gotp.Node, pid gotp.PID) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	_, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if d, ok := msg.(gotp.Down); ok && d.PID == pid {
			ch <- d.Reason
			return true, nil
		}
		return false, nil
	}), func(p *gotp.Process) error { p.Monitor(pid); return nil })
	if err != nil {
		t.Fatalf("exitDone: %v", err)
	}
	return ch
}

// recv waits for a value on ch, failing the test after waitLong.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLong):
		t.Fatalf("timed out after %v waiting for a %T", waitLong, *new(T))
	}
	panic("unreachable")
}

// sink spawns a process that forwards every message it receives to the
// returned channel, until it is killed. If it traps exits, it ends after
// forwarding an exit signal with ErrShutdown from outside any process (as
// Node.Stop sends).
func sink(t testing.TB, n *gotp.Node, opts ...gotp.SpawnOption) (gotp.PID, <-chan any) {
	t.Helper()
	ch := make(chan any, 1<<14)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		for {
			msg, err := p.Receive(context.Background())
			if err != nil {
				return nil
			}
			ch <- msg
			if msg == (gotp.Exit{Reason: gotp.ErrShutdown}) {
				return gotp.ErrShutdown
			}
		}
	}, opts...)
	if err != nil {
		t.Fatalf("Spawn sink: %v", err)
	}
	return pid, ch
}

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

// eventually polls cond until it holds or waitLong passes. It is used only
// where there is no signal to wait on (a goroutine that has yet to park).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// status returns the status of pid, or StatusExited if it is gone.
func status(n *gotp.Node, pid gotp.PID) gotp.Status {
	in, ok := n.ProcessInfo(pid)
	if !ok {
		return gotp.StatusExited
	}
	return in.Status
}
