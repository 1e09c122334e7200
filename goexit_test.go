package gotp_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// A function process whose goroutine calls runtime.Goexit (as t.FailNow
// does) exits with ErrGoexit, an abnormal reason: its links are signalled,
// its monitors told, its name freed.
func TestGoexitEndsFunctionProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	survivor := waiter(t, n)
	trapperSink := gotptest.NewSink(t, n, gotp.TrapExit(true))
	trapper, msgs := trapperSink.PID(), trapperSink.C()
	release := make(chan struct{})
	pid, err := n.Spawn(func(p *gotp.Process) error {
		<-release
		runtime.Goexit()
		return nil
	}, gotp.LinkTo(trapper), gotp.Named("goexit"))
	if err != nil {
		t.Fatal(err)
	}
	exited := gotptest.Watch(t, n, pid)
	close(release)
	if r := gotptest.Recv(t, exited); !errors.Is(r, gotp.ErrGoexit) {
		t.Fatalf("reason %v, want ErrGoexit", r)
	}
	sig, ok := gotptest.Recv(t, msgs).(gotp.Exit)
	if !ok || sig.From != pid || !errors.Is(sig.Reason, gotp.ErrGoexit) {
		t.Fatalf("linked process got %#v, want an exit signal with ErrGoexit", sig)
	}
	if _, ok := n.Whereis("goexit"); ok {
		t.Error("the name is still held")
	}
	if !n.IsAlive(survivor) {
		t.Error("an unrelated process died")
	}
}

// A handler that calls runtime.Goexit ends its process with ErrGoexit, and
// the node still stops (no goroutine or count is left behind).
func TestGoexitEndsHandlerProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "goexit" {
			runtime.Goexit()
		}
		return false, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := gotptest.Watch(t, n, pid)
	n.Send(pid, "hello")
	n.Send(pid, "goexit")
	if r := gotptest.Recv(t, done); !errors.Is(r, gotp.ErrGoexit) {
		t.Fatalf("reason %v, want ErrGoexit", r)
	}
}

// In a Batch, a handler that calls runtime.Goexit ends its process and
// the worker goroutine running it; every other process woken by the batch
// is still handled, and the node still stops.
func TestGoexitInBatchHandler(t *testing.T) {
	n := gotptest.NewNode(t)
	const procs = 200
	var handled sync.WaitGroup
	handled.Add(procs - 1)
	var pids []gotp.PID
	for i := range procs {
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
			if i == 40 {
				runtime.Goexit()
			}
			handled.Done()
			return false, nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	down := gotptest.Watch(t, n, pids[40])
	n.Batch(func(b *gotp.Batch) {
		for _, pid := range pids {
			b.Send(pid, "wake")
		}
	})
	if r := gotptest.Recv(t, down); !errors.Is(r, gotp.ErrGoexit) {
		t.Fatalf("reason %v, want ErrGoexit", r)
	}
	all := make(chan struct{})
	go func() { handled.Wait(); close(all) }()
	gotptest.Recv(t, all)
}
