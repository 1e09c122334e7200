package gotptest

import (
	"context"
	"reflect"
	"time"

	"github.com/gotp/gotp"
)

// Recv returns the next value from ch, failing t if none comes within
// [Timeout]. A closed channel gives its zero value at once, so Recv also
// waits for a channel to be closed (a Done channel, for example).
func Recv[T any](t TB, ch <-chan T) T {
	t.Helper()
	return RecvWithin(t, Timeout, ch)
}

// RecvWithin is Recv with its own bound d.
func RecvWithin[T any](t TB, d time.Duration, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gotptest: no %v received within %v", reflect.TypeFor[T](), d)
	}
	panic("unreachable: Fatalf returned")
}

// NoRecv fails t if ch has a value ready (or is closed). It does not wait:
// it checks what has arrived so far.
func NoRecv[T any](t TB, ch <-chan T) {
	t.Helper()
	select {
	case v, ok := <-ch:
		if ok {
			t.Fatalf("gotptest: unexpected %#v received", v)
		}
		t.Fatalf("gotptest: channel unexpectedly closed")
	default:
	}
}

// Eventually polls cond, every millisecond at first and then less often,
// until it returns true, and fails t with what (the condition, in words)
// if it has not within [Timeout]. Use it only for conditions that no
// message or channel announces.
func Eventually(t TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Timeout, what, cond)
}

// EventuallyWithin is Eventually with its own bound d.
func EventuallyWithin(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gotptest: timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// Watch returns a channel that receives pid's exit reason (nil for a
// normal exit), or gotp.ErrNoProc if pid is not alive when Watch is called.
// The reason arrives once the exit is complete: every link of pid has had
// its exit signal and every monitor of pid its Down, so whatever the exit
// caused in other processes has begun.
//
// Watch monitors pid from a process of its own on n, which traps exits so
// that it outlives a Node.Stop long enough to report pid's exit. Nothing
// arrives if pid outlives [Timeout] after the node began to stop.
func Watch(t TB, n *gotp.Node, pid gotp.PID) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	ready := make(chan struct{})
	_, err := n.Spawn(func(p *gotp.Process) error {
		ref := p.Monitor(pid)
		close(ready)
		ctx, stopping := p.Context(), false
		for {
			msg, err := p.ReceiveFunc(ctx, func(m any) bool {
				switch m := m.(type) {
				case gotp.Down:
					return m.Ref == ref
				case gotp.Exit:
					return true
				}
				return false
			})
			if err != nil {
				return nil // killed, or the node gave up waiting
			}
			switch m := msg.(type) {
			case gotp.Down:
				ch <- m.Reason
				return nil
			case gotp.Exit:
				// Node.Stop signals pid before this younger process: wait a
				// while for its Down, then go.
				if m.From.IsZero() && !stopping {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, Timeout)
					defer cancel()
					stopping = true
				}
			}
		}
	}, gotp.TrapExit(true), gotp.Behaviour("gotptest.Watch"))
	if err != nil {
		t.Fatalf("gotptest: Watch %v: %v", pid, err)
	}
	<-ready
	return ch
}
