package gotp_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gotp/gotp"
)

func TestMonitorFuncPanicIsContained(t *testing.T) {
	n := newNode(t)
	pid, _ := n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err })
	n.MonitorFunc(pid, func(gotp.Down) { panic("watcher bug") })
	after := make(chan gotp.Down, 1)
	n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
	n.Exit(pid, errors.New("bye")) // would crash the test binary without the recover
	if d := <-after; d.PID != pid {
		t.Fatalf("second watcher got %+v", d)
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
