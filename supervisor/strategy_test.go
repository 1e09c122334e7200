package supervisor_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

type exitCase struct {
	name     string
	cause    func(n *gotp.Node, pid gotp.PID)
	check    func(reason error) bool
	abnormal bool
}

var exitCases = []exitCase{
	{"normal", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, exitWith{nil}) },
		func(r error) bool { return r == nil }, false},
	{"shutdown", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, exitWith{gotp.ErrShutdown}) },
		func(r error) bool { return errors.Is(r, gotp.ErrShutdown) }, false},
	{"shutdown-wrapped", func(n *gotp.Node, pid gotp.PID) {
		n.Send(pid, exitWith{fmt.Errorf("%w: draining", gotp.ErrShutdown)})
	}, func(r error) bool { return errors.Is(r, gotp.ErrShutdown) }, false},
	{"kill", func(n *gotp.Node, pid gotp.PID) { n.Exit(pid, gotp.ErrKill) },
		func(r error) bool { return errors.Is(r, gotp.ErrKilled) }, true},
	{"error", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, exitWith{errBoom}) },
		func(r error) bool { return errors.Is(r, errBoom) }, true},
	{"panic", func(n *gotp.Node, pid gotp.PID) { n.Send(pid, panicWith{"oops"}) },
		func(r error) bool { _, ok := errors.AsType[*gotp.PanicError](r); return ok }, true},
}

// TestStrategyRestartReason runs every strategy × restart type × exit
// reason on a supervisor of three workers a, b, c where b has the restart
// type under test and exits with the reason under test, and checks which
// children were restarted, which kept their process, what WhichChildren,
// CountChildren and Inspect say, and what was logged.
func TestStrategyRestartReason(t *testing.T) {
	for _, strategy := range []supervisor.Strategy{supervisor.OneForOne, supervisor.OneForAll, supervisor.RestForOne} {
		for _, restart := range []supervisor.Restart{supervisor.Permanent, supervisor.Transient, supervisor.Temporary} {
			for _, ec := range exitCases {
				t.Run(fmt.Sprintf("%v/%v/%s", strategy, restart, ec.name), func(t *testing.T) {
					testStrategyCase(t, strategy, restart, ec)
				})
			}
		}
	}
}

func testStrategyCase(t *testing.T, strategy supervisor.Strategy, restart supervisor.Restart, ec exitCase) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(logs.Logger()))
	b := supervisor.Func("b", worker)
	b.Restart = restart
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
		Strategy:  strategy,
		Intensity: 10,
		Children:  []supervisor.ChildSpec{supervisor.Func("a", worker), b, supervisor.Func("c", worker)},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := pids(mustWhich(t, n, sup))
	down := gotptest.Watch(t, n, before["b"])
	ec.cause(n, before["b"])
	if r := gotptest.Recv(t, down); !ec.check(r) {
		t.Fatalf("b exited with %v, not the %s reason", r, ec.name)
	}
	// b's exit signal reached the supervisor before the Down: the call
	// below is handled after it.
	which := mustWhich(t, n, sup)
	after := pids(which)
	restarted := restart == supervisor.Permanent || (restart == supervisor.Transient && ec.abnormal)

	counts, err := supervisor.CountChildren(gotptest.Context(t), n, sup)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := supervisor.Inspect(n, sup)

	if !restarted {
		if after["a"] != before["a"] || after["c"] != before["c"] {
			t.Fatalf("siblings changed although b was not restarted: %v -> %v", before, after)
		}
		if restart == supervisor.Temporary {
			if got := ids(which); !slices.Equal(got, []string{"a", "c"}) {
				t.Fatalf("a temporary child must be removed: children %v", got)
			}
			if counts != (supervisor.Counts{Specs: 2, Active: 2, Workers: 2}) {
				t.Fatalf("counts %+v", counts)
			}
		} else {
			if which[1].State != supervisor.ChildNotRunning || !which[1].PID.IsZero() {
				t.Fatalf("a transient child after a normal exit must be kept not running: %+v", which[1])
			}
			if counts != (supervisor.Counts{Specs: 3, Active: 2, Workers: 3}) {
				t.Fatalf("counts %+v", counts)
			}
		}
		if info.Restarts != 0 {
			t.Fatalf("Inspect counts %d restarts, want 0", info.Restarts)
		}
		if len(logs.Find("supervisor: child restarted")) != 0 {
			t.Fatal("a restart was logged")
		}
	} else {
		if after["b"] == before["b"] || after["b"].IsZero() || !n.IsAlive(after["b"]) {
			t.Fatalf("b not restarted: %v -> %v", before["b"], after["b"])
		}
		wantNewA := strategy == supervisor.OneForAll
		wantNewC := strategy != supervisor.OneForOne
		if (after["a"] != before["a"]) != wantNewA {
			t.Fatalf("%v: a %v -> %v, want restarted=%v", strategy, before["a"], after["a"], wantNewA)
		}
		if (after["c"] != before["c"]) != wantNewC {
			t.Fatalf("%v: c %v -> %v, want restarted=%v", strategy, before["c"], after["c"], wantNewC)
		}
		for _, id := range []string{"a", "c"} {
			if after[id] != before[id] && n.IsAlive(before[id]) {
				t.Fatalf("the old %s %v still runs", id, before[id])
			}
		}
		if counts != (supervisor.Counts{Specs: 3, Active: 3, Workers: 3}) {
			t.Fatalf("counts %+v", counts)
		}
		if info.Restarts != 1 || info.Children[1].Restarts != 1 {
			t.Fatalf("Inspect: %d restarts, b restarted %d times; want 1, 1", info.Restarts, info.Children[1].Restarts)
		}
		recs := logs.Find("supervisor: child restarted")
		if !slices.ContainsFunc(recs, func(r gotptest.Record) bool { return r.Attrs["child"] == "b" && r.Attrs["pid"] == after["b"] }) {
			t.Fatalf("restart of b not logged: %+v", recs)
		}
	}
	term := logs.Find("supervisor: child terminated")
	wantLogged := restart == supervisor.Permanent || ec.abnormal
	if wantLogged != (len(term) == 1) {
		t.Fatalf("child terminated logged %d times, want logged=%v", len(term), wantLogged)
	}
	if wantLogged {
		if term[0].Attrs["child"] != "b" || term[0].Attrs["pid"] != before["b"] || term[0].Attrs["supervisor"] == nil {
			t.Fatalf("log attrs %+v", term[0].Attrs)
		}
	}
	if !n.IsAlive(sup) {
		t.Fatal("supervisor died")
	}
}

// TestGroupRestartOrder checks that OneForAll and RestForOne stop the
// group in reverse start order and start it again in start order.
func TestGroupRestartOrder(t *testing.T) {
	cases := []struct {
		strategy supervisor.Strategy
		want     []string
	}{
		{supervisor.OneForOne, []string{"start b"}},
		{supervisor.OneForAll, []string{"stop d", "stop c", "stop a", "start a", "start b", "start c", "start d"}},
		{supervisor.RestForOne, []string{"stop d", "stop c", "start b", "start c", "start d"}},
	}
	for _, tc := range cases {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			n := gotptest.NewNode(t)
			rec := &recorder{}
			sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
				Strategy: tc.strategy,
				Children: []supervisor.ChildSpec{recChild("a", rec), recChild("b", rec), recChild("c", rec), recChild("d", rec)},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.get(); !slices.Equal(got, []string{"start a", "start b", "start c", "start d"}) {
				t.Fatalf("start order %v", got)
			}
			b := pids(mustWhich(t, n, sup))["b"]
			down := gotptest.Watch(t, n, b)
			n.Exit(b, gotp.ErrKill) // no Terminate for b
			gotptest.Recv(t, down)
			mustWhich(t, n, sup)
			if got := rec.get()[4:]; !slices.Equal(got, tc.want) {
				t.Fatalf("events after b died: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGroupRestartDropsTemporary: a temporary sibling stopped by a group
// restart is removed, not restarted; a transient sibling that had exited
// normally is started again with the group, as in OTP.
func TestGroupRestartDropsTemporary(t *testing.T) {
	for _, strategy := range []supervisor.Strategy{supervisor.OneForAll, supervisor.RestForOne} {
		t.Run(strategy.String(), func(t *testing.T) {
			n := gotptest.NewNode(t)
			tmp := supervisor.Func("tmp", worker)
			tmp.Restart = supervisor.Temporary
			tr := supervisor.Func("tr", worker)
			tr.Restart = supervisor.Transient
			sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
				Strategy: strategy, Intensity: 5,
				Children: []supervisor.ChildSpec{supervisor.Func("a", worker), tmp, tr},
			})
			if err != nil {
				t.Fatal(err)
			}
			before := pids(mustWhich(t, n, sup))
			down := gotptest.Watch(t, n, before["tr"])
			n.Send(before["tr"], exitWith{nil})
			gotptest.Recv(t, down)
			down = gotptest.Watch(t, n, before["a"])
			n.Exit(before["a"], gotp.ErrKill)
			gotptest.Recv(t, down)
			which := mustWhich(t, n, sup)
			if got := ids(which); !slices.Equal(got, []string{"a", "tr"}) {
				t.Fatalf("children %v, want [a tr]", got)
			}
			if n.IsAlive(before["tmp"]) {
				t.Fatal("temporary sibling still running")
			}
			if which[1].State != supervisor.ChildRunning {
				t.Fatalf("transient sibling %+v, want running again", which[1])
			}
		})
	}
}
