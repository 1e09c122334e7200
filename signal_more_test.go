package gotp_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// A panicking MonitorFunc callback is logged, and the exit goes on: the
// other callbacks run, after a panic in the first one (the one a process
// keeps inline) and whatever the order of the others, one of which panics
// too; and a Down is delivered.
func TestMonitorFuncPanicIsContained(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, _ := n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err })
	n.MonitorFunc(pid, func(gotp.Down) { panic("watcher bug") })
	after := make(chan gotp.Down, 3)
	n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
	n.MonitorFunc(pid, func(gotp.Down) { panic("another watcher bug") })
	n.MonitorFunc(pid, func(d gotp.Down) { after <- d })
	_, ref, msgs := monitorer(t, n, pid)
	n.Exit(pid, errors.New("bye")) // would crash the test binary without the recover
	for range 2 {
		if d := gotptest.Recv(t, after); d.PID != pid {
			t.Fatalf("a later watcher got %+v", d)
		}
	}
	if d, ok := gotptest.Recv(t, msgs).(gotp.Down); !ok || d.Ref != ref || d.Reason.Error() != "bye" {
		t.Fatalf("the monitoring process got %+v", d)
	}
}

func TestWrappedKillIsUntrappable(t *testing.T) {
	n := gotptest.NewNode(t)
	downs := make(chan gotp.Down, 1)
	pid, _ := n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err }, gotp.TrapExit(true))
	n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
	n.Exit(pid, fmt.Errorf("operator: %w", gotp.ErrKill))
	if d := <-downs; d.Reason != gotp.ErrKilled {
		t.Fatalf("reason %v, want killed", d.Reason)
	}
}

// A MonitorFunc callback that calls runtime.Goexit (as t.FailNow does) or
// panics ends, at most, the goroutine running the exit, never the exit:
// every other callback runs once, a linked process gets one exit signal, a
// monitoring process one Down, and the process's Done is closed. The first
// callback (the one a process keeps inline) and the later ones (in no
// fixed order) each return, panic or Goexit.
func TestMonitorFuncGoexitFinishesTheExit(t *testing.T) {
	kinds := []string{"return", "panic", "goexit"}
	for _, first := range kinds {
		for _, later := range kinds {
			t.Run(first+"/"+later, func(t *testing.T) { exitWithCallbacks(t, first, later) })
		}
	}
}

// exitWithCallbacks ends a process watched by a first callback of kind
// first, then by three returning callbacks and two of kind later, and
// checks that the exit finished once (see TestMonitorFuncGoexitFinishesTheExit).
func exitWithCallbacks(t *testing.T, first, later string) {
	n := gotptest.NewNode(t)
	procc := make(chan *gotp.Process, 1)
	pid, _ := n.Spawn(func(p *gotp.Process) error {
		procc <- p
		_, err := p.Receive(p.Context())
		return err
	})
	proc := gotptest.Recv(t, procc)
	returned := make(chan gotp.Down, 8)
	callback := func(kind string) func(gotp.Down) {
		return func(d gotp.Down) {
			switch kind {
			case "panic":
				panic("watcher bug")
			case "panicnil": // recover reports it as nil under GODEBUG=panicnil=1
				panic(nil)
			case "goexit":
				runtime.Goexit()
			default:
				returned <- d
			}
		}
	}
	n.MonitorFunc(pid, callback(first))
	for _, kind := range []string{"return", later, "return", later, "return"} {
		n.MonitorFunc(pid, callback(kind))
	}
	watcher, ref, msgs := monitorer(t, n, pid)
	linkedSink := gotptest.NewSink(t, n, gotp.TrapExit(true), gotp.LinkTo(pid))
	linked, linkedMsgs := linkedSink.PID(), linkedSink.C()
	done := proc.Done()               // made now, so that the exit closes it (twice would panic)
	go n.Exit(pid, errors.New("bye")) // this goroutine may end in a callback
	want := 3
	if first == "return" {
		want++
	}
	if later == "return" {
		want += 2
	}
	for range want {
		if d := gotptest.Recv(t, returned); d.PID != pid {
			t.Fatalf("a callback got %+v", d)
		}
	}
	if d, ok := gotptest.Recv(t, msgs).(gotp.Down); !ok || d.Ref != ref {
		t.Fatalf("the monitoring process got %+v", d)
	}
	if e, ok := gotptest.Recv(t, linkedMsgs).(gotp.Exit); !ok || e.From != pid {
		t.Fatalf("the linked process got %+v", e)
	}
	gotptest.Recv(t, done)
	// Nothing was sent twice: a local send is in the mailbox when it
	// returns, so a second Down or exit signal, sent before Done closed,
	// would come before these.
	n.Send(watcher, "probe")
	n.Send(linked, "probe")
	if m := gotptest.Recv(t, msgs); m != "probe" {
		t.Fatalf("a second message to the monitoring process: %+v", m)
	}
	if m := gotptest.Recv(t, linkedMsgs); m != "probe" {
		t.Fatalf("a second message to the linked process: %+v", m)
	}
	select {
	case d := <-returned:
		t.Fatalf("a callback ran twice: %+v", d)
	default:
	}
}

// Under GODEBUG=panicnil=1, recover reports a panic(nil) as nil, as if
// the callback had called runtime.Goexit; the exit must still finish
// once. The check runs in a child test process with that setting.
func TestMonitorFuncPanicNilFinishesTheExit(t *testing.T) {
	if os.Getenv("GOTP_PANICNIL_CHILD") == "1" {
		exitWithCallbacks(t, "panicnil", "return")
		exitWithCallbacks(t, "return", "panicnil")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMonitorFuncPanicNilFinishesTheExit$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOTP_PANICNIL_CHILD=1", "GODEBUG=panicnil=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
