package supervisor_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// TestEscalationToParent: a child supervisor that reaches its intensity
// exits with a shutdown its parent sees; a Permanent child supervisor is
// restarted with fresh children, which counts against the parent's own
// intensity; beyond that the parent gives up too, and its watcher sees it.
func TestEscalationToParent(t *testing.T) {
	n := gotptest.NewNode(t)
	mid := supervisor.Spec{Intensity: 1, Children: []supervisor.ChildSpec{supervisor.Func("w", worker)}}
	root, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
		Intensity: 1,
		Children:  []supervisor.ChildSpec{supervisor.Func("a", worker), mid.ChildSpec("mid")},
	})
	if err != nil {
		t.Fatal(err)
	}
	rootDown := gotptest.Watch(t, n, root)
	a := pids(mustWhich(t, n, root))["a"]

	giveUp := func() gotp.PID {
		t.Helper()
		m := pids(mustWhich(t, n, root))["mid"]
		midDown := gotptest.Watch(t, n, m)
		killChild(t, n, m, "w") // restart 1 of 1: fine
		if !n.IsAlive(m) {
			t.Fatal("mid gave up too early")
		}
		w := pids(mustWhich(t, n, m))["w"]
		n.Exit(w, gotp.ErrKill) // one too many
		if r := gotptest.Recv(t, midDown); !errors.Is(r, supervisor.ErrMaxIntensity) || !errors.Is(r, gotp.ErrShutdown) {
			t.Fatalf("mid exited with %v", r)
		}
		if n.IsAlive(w) {
			t.Fatal("mid's worker outlived it")
		}
		return m
	}

	old := giveUp()
	which := mustWhich(t, n, root)
	m := pids(which)["mid"]
	if m == old || !n.IsAlive(m) || which[1].Restarts != 1 {
		t.Fatalf("root did not restart mid: %+v", which)
	}
	if pids(which)["a"] != a {
		t.Fatal("one_for_one root restarted a sibling")
	}
	tree, _ := supervisor.Tree(n, root)
	if sub := tree.Children[1].Sub; sub == nil || sub.PID != m || sub.Children[0].State != supervisor.ChildRunning || sub.Restarts != 0 {
		t.Fatalf("new mid subtree %+v", sub)
	}

	giveUp() // root's second restart within 5 s: root gives up
	if r := gotptest.Recv(t, rootDown); !errors.Is(r, supervisor.ErrMaxIntensity) {
		t.Fatalf("root exited with %v", r)
	}
	if n.IsAlive(a) {
		t.Fatal("root's worker outlived it")
	}
}

// TestTransientChildSupervisorNotRestarted: a Transient child supervisor
// that gives up exited with a shutdown, which is not abnormal.
func TestTransientChildSupervisorNotRestarted(t *testing.T) {
	n := gotptest.NewNode(t)
	mid := supervisor.Spec{Intensity: supervisor.NoRestarts, Children: []supervisor.ChildSpec{supervisor.Func("w", worker)}}
	cs := mid.ChildSpec("mid")
	cs.Restart = supervisor.Transient
	root, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{cs}})
	if err != nil {
		t.Fatal(err)
	}
	m := pids(mustWhich(t, n, root))["mid"]
	down := gotptest.Watch(t, n, m)
	n.Exit(pids(mustWhich(t, n, m))["w"], gotp.ErrKill)
	gotptest.Recv(t, down)
	w := mustWhich(t, n, root)
	if w[0].State != supervisor.ChildNotRunning {
		t.Fatalf("transient child supervisor after giving up: %+v", w[0])
	}
	k, _ := supervisor.CountChildren(gotptest.Context(t), n, root)
	if k != (supervisor.Counts{Specs: 1, Active: 0, Supervisors: 1}) {
		t.Fatalf("counts %+v", k)
	}
}
