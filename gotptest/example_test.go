package gotptest_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// counter is the gen_server of the package doc's example.
type counter struct {
	server.Defaults
	total int
}

func (c *counter) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	c.total += req.(int)
	return c.total, nil
}

// TestCounter is the package doc's example, word for word.
func TestCounter(t *testing.T) {
	n := gotptest.NewNode(t) // stopped when the test ends
	pid, err := server.Start(gotptest.Context(t), n, &counter{})
	if err != nil {
		t.Fatal(err)
	}
	exited := gotptest.Watch(t, n, pid)

	got, err := server.Call[int](gotptest.Context(t), n, pid, 5)
	if err != nil || got != 5 {
		t.Fatalf("Call = %v, %v; want 5, nil", got, err)
	}
	n.Exit(pid, gotp.ErrKill)
	if reason := gotptest.Recv(t, exited); !errors.Is(reason, gotp.ErrKilled) {
		t.Fatalf("exit reason %v, want killed", reason)
	}
}

// A test can play a process with a Sink: here it monitors a server and
// sees it stop.
func TestSinkAsAProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, err := server.Start(gotptest.Context(t), n, &counter{})
	gotptest.Must(t, err)

	me := gotptest.NewSink(t, n)
	me.Do(t, func(p *gotp.Process) { p.Monitor(pid) })
	gotptest.Must(t, server.Stop(gotptest.Context(t), n, pid, nil))

	down := me.Next(t).(gotp.Down)
	if down.PID != pid || down.Reason != nil {
		t.Fatalf("Down = %+v, want a normal exit of %v", down, pid)
	}
}
