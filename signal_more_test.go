package gotp_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/gotp/gotp"
)

// A panicking MonitorFunc callback is logged, and the exit goes on: the
// other callbacks run, after a panic in the first one (the one a process
// keeps inline) and whatever the order of the others, one of which panics
// too; and a Down is delivered.
func TestMonitorFuncPanicIsContained(t *testing.T) {
	n := newNode(t)
	pid, _ := n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err })
	n.MonitorFunc(pid, func(gotp.Down) { panic("watcher bug") })
	after := make(chan gotp.Down, 3)
	n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
	n.MonitorFunc(pid, func(gotp.Down) { panic("another watcher bug") })
	n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
	_, ref, msgs := monitorer(t, n, pid)
	n.Exit(pid, errors.New("bye")) // would crash the test binary without the recover
	for range 2 {
		if d := recv(t, after); d.PID != pid {
			t.Fatalf("a later watcher got %+v", d)
		}
	}
	if d, ok := recv(t, msgs).(gotp.Down); !ok || d.Ref != ref || d.Reason.Error() != "bye" {
		t.Fatalf("the monitoring process got %+v", d)
	}
}

func TestWrappedKillIsUntrappable(t *testing.T) {
	n := newNode(t)
	downs := make(chan gotp.Down, 1)
	pid, _ := n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err }, gotp.TrapExit(true))
	n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
	n.Exit(pid, fmt.Errorf("operator: %w", gotp.ErrKill))
	if d := <-downs; d.Reason != gotp.ErrKilled {
		t.Fatalf("reason %v, want killed", d.Reason)
	}
}

// A MonitorFunc callback that calls runtime.Goexit (as t.FailNow does)
// ends the goroutine running the exit, but not the exit: the other
// callbacks run, a linked process gets the exit signal, a Down is
// delivered and the process's Done is closed. Whichever callback Goexits,
// the first (kept inline) or a later one.
func TestMonitorFuncGoexitFinishesTheExit(t *testing.T) {
	for _, first := range []bool{true, false} {
		n := newNode(t)
		procc := make(chan *gotp.Process, 1)
		pid, _ := n.Spawn(func(p *gotp.Process) error {
			procc <- p
			_, err := p.Receive(p.Context())
			return err
		})
		proc := recv(t, procc)
		goexit := func(gotp.Down) { runtime.Goexit() }
		after := make(chan gotp.Down, 1)
		if first {
			n.MonitorFunc(pid, goexit)
			n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
		} else {
			n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
			n.MonitorFunc(pid, goexit)
		}
		_, ref, msgs := monitorer(t, n, pid)
		_, linkedMsgs := sink(t, n, gotp.TrapExit(true), gotp.LinkTo(pid))
		go n.Exit(pid, errors.New("bye")) // this goroutine ends in the callback
		if d := recv(t, after); d.PID != pid {
			t.Fatalf("first=%v: the other callback got %+v", first, d)
		}
		if d, ok := recv(t, msgs).(gotp.Down); !ok || d.Ref != ref {
			t.Fatalf("first=%v: the monitoring process got %+v", first, d)
		}
		if e, ok := recv(t, linkedMsgs).(gotp.Exit); !ok || e.From != pid {
			t.Fatalf("first=%v: the linked process got %+v", first, e)
		}
		recv(t, proc.Done())
	}
}
