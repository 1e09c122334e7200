package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func failing(id string, rec *recorder, err error) supervisor.ChildSpec {
	return supervisor.ChildSpec{ID: id, Start: func(context.Context, *gotp.Process) (gotp.PID, error) {
		rec.add("fail " + id)
		return gotp.PID{}, err
	}}
}

// TestStartFailureStopsStartedInReverse: children start in order; when one
// fails, the started ones stop in reverse order, later ones never start,
// and Start fails with that child's error.
func TestStartFailureStopsStartedInReverse(t *testing.T) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(logs.Logger()))
	rec := &recorder{}
	_, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		recChild("a", rec), recChild("b", rec), failing("c", rec, errBoom), recChild("d", rec),
	}})
	var se *supervisor.ChildStartError
	if !errors.As(err, &se) || se.ID != "c" || !errors.Is(err, errBoom) {
		t.Fatalf("Start error %v, want ChildStartError for c wrapping errBoom", err)
	}
	if got := rec.get(); !slices.Equal(got, []string{"start a", "start b", "fail c", "stop b", "stop a"}) {
		t.Fatalf("events %v", got)
	}
	if c := n.ProcessCount(); c != 0 {
		t.Fatalf("%d processes left after a failed start", c)
	}
	if l := logs.Find("supervisor: child failed to start"); len(l) != 1 || l[0].Attrs["child"] != "c" {
		t.Fatalf("start failure log %+v", l)
	}
}

type failInit struct {
	server.Defaults
	err error
}

func (f failInit) Init(context.Context, *gotp.Process) error { return f.err }

// TestStartFailureKinds: a panic, a server whose Init fails, and a server
// whose Init returns server.ErrIgnore (kept, not running).
func TestStartFailureKinds(t *testing.T) {
	n := gotptest.NewNode(t)
	_, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		{ID: "p", Start: func(context.Context, *gotp.Process) (gotp.PID, error) { panic("in start") }},
	}})
	if _, ok := errors.AsType[*gotp.PanicError](err); !ok {
		t.Fatalf("panicking start: %v", err)
	}
	_, err = supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		supervisor.Server("s", func() server.Behaviour { return failInit{err: errBoom} }),
	}})
	if !errors.Is(err, errBoom) {
		t.Fatalf("failing Init: %v", err)
	}
	_, err = supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		{ID: "z", Start: func(context.Context, *gotp.Process) (gotp.PID, error) { return gotp.PID{}, nil }},
	}})
	if err == nil {
		t.Fatal("a start returning the zero PID without an error must fail")
	}
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Children: []supervisor.ChildSpec{
		supervisor.Func("a", worker),
		supervisor.Server("i", func() server.Behaviour { return failInit{err: server.ErrIgnore} }),
		supervisor.Func("b", worker),
	}})
	if err != nil {
		t.Fatalf("ignore must not fail Start: %v", err)
	}
	w := mustWhich(t, n, sup)
	if w[1].ID != "i" || w[1].State != supervisor.ChildNotRunning || w[0].State != supervisor.ChildRunning || w[2].State != supervisor.ChildRunning {
		t.Fatalf("which %+v", w)
	}
	if pid, err := supervisor.RestartChild(gotptest.Context(t), n, sup, "i"); err != nil || !pid.IsZero() {
		t.Fatalf("RestartChild of an ignoring child = %v, %v; want zero PID, nil", pid, err)
	}
}

func TestInvalidSpecs(t *testing.T) {
	n := gotptest.NewNode(t)
	w := supervisor.Func("w", worker)
	bad := []supervisor.Spec{
		{Children: []supervisor.ChildSpec{w, w}},
		{Children: []supervisor.ChildSpec{{ID: "", Start: w.Start}}},
		{Children: []supervisor.ChildSpec{{ID: "x"}}},
		{Children: []supervisor.ChildSpec{{ID: "x", Start: w.Start, Restart: 9}}},
		{Children: []supervisor.ChildSpec{{ID: "x", Start: w.Start, Type: 9}}},
		{Children: []supervisor.ChildSpec{{ID: "x", Start: w.Start, Shutdown: -5}}},
		{Strategy: 7},
		{Period: -1},
	}
	for i, spec := range bad {
		if _, err := supervisor.Start(gotptest.Context(t), n, spec); !errors.As(err, new(*supervisor.SpecError)) {
			t.Errorf("spec %d: got %v, want *SpecError", i, err)
		}
	}
	if _, err := supervisor.StartDynamic(gotptest.Context(t), n, supervisor.DynamicSpec[int]{}); !errors.As(err, new(*supervisor.SpecError)) {
		t.Errorf("dynamic without Start: %v", err)
	}
	if c := n.ProcessCount(); c != 0 {
		t.Fatalf("%d processes started by invalid specs", c)
	}
}

// TestNamedSupervisor: a supervisor can be named; a second start under
// the same name fails with already started naming the first.
func TestNamedSupervisor(t *testing.T) {
	n := gotptest.NewNode(t)
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{}, server.Named("root"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := supervisor.StartChild(gotptest.Context(t), n, gotp.Name("root"), supervisor.Func("w", worker)); err != nil {
		t.Fatal(err)
	}
	_, err = supervisor.Start(gotptest.Context(t), n, supervisor.Spec{}, server.Named("root"))
	if e, ok := errors.AsType[*server.AlreadyStartedError](err); !ok || e.PID != sup {
		t.Fatalf("second start: %v", err)
	}
	if in, ok := supervisor.Inspect(n, gotp.Name("root")); !ok || in.PID != sup || len(in.Children) != 1 {
		t.Fatalf("Inspect by name: %+v %v", in, ok)
	}
	if _, ok := supervisor.Inspect(n, pids(mustWhich(t, n, sup))["w"]); ok {
		t.Fatal("Inspect of a worker must report false")
	}
}

// mapVia is a minimal name service for TestViaNamedSupervisor.
type mapVia struct {
	mu    *sync.Mutex
	names map[string]gotp.PID
	name  string
}

func (v mapVia) Resolve(*gotp.Node) (gotp.PID, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	pid, ok := v.names[v.name]
	return pid, ok
}

func (v mapVia) RegisterName(n *gotp.Node, pid gotp.PID) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if owner, ok := v.names[v.name]; ok {
		return &gotp.AlreadyRegisteredError{Name: v.name, Owner: owner}
	}
	v.names[v.name] = pid
	n.MonitorFunc(pid, func(gotp.Down) {
		v.mu.Lock()
		if v.names[v.name] == pid {
			delete(v.names, v.name)
		}
		v.mu.Unlock()
	})
	return nil
}

func (v mapVia) UnregisterName(*gotp.Node) {
	v.mu.Lock()
	delete(v.names, v.name)
	v.mu.Unlock()
}

// TestViaNamedSupervisor: a supervisor named through a name service is
// reached through it, and a second start under the name fails naming the
// first.
func TestViaNamedSupervisor(t *testing.T) {
	n := gotptest.NewNode(t)
	via := mapVia{mu: &sync.Mutex{}, names: map[string]gotp.PID{}, name: "conns"}
	sup, err := supervisor.StartDynamic(gotptest.Context(t), n, supervisor.DynamicSpec[int]{
		Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) { return sup.SpawnLink(worker) },
	}, server.WithVia(via))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := supervisor.StartDynamicChild(gotptest.Context(t), n, via, 1); err != nil {
		t.Fatal(err)
	}
	k, err := supervisor.CountChildren(gotptest.Context(t), n, via)
	if err != nil || k.Active != 1 {
		t.Fatalf("CountChildren via: %+v, %v", k, err)
	}
	_, err = supervisor.Start(gotptest.Context(t), n, supervisor.Spec{}, server.WithVia(via))
	if e, ok := errors.AsType[*server.AlreadyStartedError](err); !ok || e.PID != sup {
		t.Fatalf("second start under the via name: %v", err)
	}
}
