package gotp_test

import (
	"errors"
	"fmt"
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
