package gotptest

import (
	"context"
	"reflect"
	"sync"
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
// that it outlives a Node.Stop long enough to see pid's exit. If that
// process is killed first (a Node.Stop whose deadline ran out), the reason
// still arrives, once pid has exited, from a Node.MonitorFunc: then only
// what MonitorFunc promises holds (the links may not have been signalled
// yet). Either way Watch's process is gone when the reason arrives, so it
// is not counted among the node's processes.
func Watch(t TB, n *gotp.Node, pid gotp.PID) <-chan error {
	t.Helper()
	w := &watch{ch: make(chan error, 1)}
	if pid.Node() == n.Name() {
		n.MonitorFunc(pid, w.exited)
	}
	ready := make(chan struct{})
	watcher, err := n.Spawn(func(p *gotp.Process) error {
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
				w.fromDown(m.Reason)
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
	n.MonitorFunc(watcher, func(gotp.Down) { w.watcherGone() })
	return w.ch
}

// watch is the state of one Watch. The reason is sent once the watcher
// process is gone, so that it is not among the node's processes by then:
// the reason of its Down, or, if it was killed without one, the reason
// a MonitorFunc learnt.
type watch struct {
	mu       sync.Mutex
	ch       chan error
	sent     bool
	down     error // from the watcher's Down
	haveDown bool
	mf       error // from MonitorFunc
	haveMF   bool
	gone     bool // the watcher process has exited
}

func (w *watch) fromDown(reason error) {
	w.mu.Lock()
	w.down, w.haveDown = reason, true
	w.mu.Unlock()
}

func (w *watch) exited(d gotp.Down) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mf, w.haveMF = d.Reason, true
	w.sendLocked()
}

func (w *watch) watcherGone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gone = true
	w.sendLocked()
}

func (w *watch) sendLocked() {
	switch {
	case w.sent || !w.gone:
	case w.haveDown:
		w.sent = true
		w.ch <- w.down
	case w.haveMF:
		w.sent = true
		w.ch <- w.mf
	}
}
