package server_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// TestDedicated runs the kv server on its own goroutine: calls, casts,
// infos, a failing Init, a parent's exit and Stop behave as in handler
// mode.
func TestDedicated(t *testing.T) {
	n := gotptest.NewNode(t)
	s := newKV()
	pid, err := server.Start(gotptest.Context(t), n, s, server.Dedicated())
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := n.ProcessInfo(pid); in.Handler {
		t.Fatal("a dedicated server holds a goroutine of its own: it is not reported as goroutine-less")
	}
	if got, err := server.Call[string](gotptest.Context(t), n, pid, put{"a", 1}); err != nil || got != "ok" {
		t.Fatalf("put = %q, %v", got, err)
	}
	server.Cast(n, pid, put{"b", 2})
	if got, err := server.Call[int](gotptest.Context(t), n, pid, get{"b"}); err != nil || got != 2 {
		t.Fatalf("get b = %d, %v", got, err)
	}
	n.Send(pid, "hello")
	if got := <-s.infos; got != "hello" {
		t.Fatalf("info = %v", got)
	}
	if err := server.Stop(gotptest.Context(t), n, pid, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-s.terminate; r != nil {
		t.Fatalf("Terminate reason %v", r)
	}

	bad := newKV()
	bad.initErr = errors.New("no")
	if _, err := server.Start(gotptest.Context(t), n, bad, server.Dedicated(), server.Named("bad")); err == nil || err.Error() != "no" {
		t.Fatalf("failing Init: %v", err)
	}
	if _, ok := n.Whereis("bad"); ok {
		t.Fatal("a server whose Init failed must be gone when Start returns")
	}

	// An exit signal from the parent stops a trapping dedicated server.
	trap := newKV()
	trap.trap = true
	parent, _ := n.Spawn(func(p *gotp.Process) error {
		_, err := p.Receive(p.Context())
		return err
	})
	child, err := server.Start(gotptest.Context(t), n, trap, server.Dedicated(), server.LinkTo(parent))
	if err != nil {
		t.Fatal(err)
	}
	n.Exit(parent, errors.New("parent died"))
	if r := <-trap.terminate; r == nil || r.Error() != "parent died" {
		t.Fatalf("Terminate after the parent's exit: %v", r)
	}
	if n.IsAlive(child) {
		// Terminate runs before the exit: wait for it.
		done := make(chan struct{})
		n.MonitorFunc(child, func(gotp.Down) { close(done) })
		<-done
	}
}
