package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// recoverAfterRetries lets the supervisor retry a failing start at least 3
// times (tries counts the starts), then lets starts succeed and waits until
// the supervisor's first child runs.
func recoverAfterRetries(t *testing.T, n *gotp.Node, sup gotp.PID, tries *atomic.Int64, failing *atomic.Bool) {
	t.Helper()
	for tries.Load() < 3 {
		mustWhich(t, n, sup) // let retries run
	}
	failing.Store(false)
	for mustWhich(t, n, sup)[0].State != supervisor.ChildRunning {
	}
}

func wantCounts(t *testing.T, n *gotp.Node, sup gotp.PID, want supervisor.Counts) {
	t.Helper()
	k, err := supervisor.CountChildren(gotptest.Context(t), n, sup)
	if err != nil || k != want {
		t.Fatalf("CountChildren = %+v, %v; want %+v", k, err, want)
	}
}

// TestManagement walks StartChild, TerminateChild, RestartChild and
// DeleteChild through OTP's answers, with which/count children after each.
func TestManagement(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	wantCounts(t, n, sup, supervisor.Counts{})

	w, err := supervisor.StartChild(ctx, n, sup, supervisor.Func("w", worker))
	if err != nil || !n.IsAlive(w) {
		t.Fatalf("StartChild = %v, %v", w, err)
	}
	sub := supervisor.Spec{}.ChildSpec("sub")
	s, err := supervisor.StartChild(ctx, n, sup, sub)
	if err != nil {
		t.Fatal(err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 2, Active: 2, Workers: 1, Supervisors: 1})
	if got := ids(mustWhich(t, n, sup)); !slices.Equal(got, []string{"w", "sub"}) {
		t.Fatalf("children %v", got)
	}

	_, err = supervisor.StartChild(ctx, n, sup, supervisor.Func("w", worker))
	if e, ok := errors.AsType[*supervisor.AlreadyStartedError](err); !ok || e.PID != w || e.ID != "w" || !errors.Is(err, supervisor.ErrAlreadyStarted) {
		t.Fatalf("StartChild of a running id: %v", err)
	}
	if _, err := supervisor.RestartChild(ctx, n, sup, "w"); !errors.Is(err, supervisor.ErrRunning) {
		t.Fatalf("RestartChild running: %v", err)
	}
	if err := supervisor.DeleteChild(ctx, n, sup, "w"); !errors.Is(err, supervisor.ErrRunning) {
		t.Fatalf("DeleteChild running: %v", err)
	}

	if err := supervisor.TerminateChild(ctx, n, sup, "w"); err != nil {
		t.Fatal(err)
	}
	if n.IsAlive(w) {
		t.Fatal("terminated child alive")
	}
	which := mustWhich(t, n, sup)
	if which[0].State != supervisor.ChildNotRunning || !which[0].PID.IsZero() {
		t.Fatalf("after terminate %+v", which[0])
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 2, Active: 1, Workers: 1, Supervisors: 1})
	if err := supervisor.TerminateChild(ctx, n, sup, "w"); err != nil {
		t.Fatalf("TerminateChild of a stopped child: %v", err)
	}
	if _, err := supervisor.StartChild(ctx, n, sup, supervisor.Func("w", worker)); !errors.Is(err, supervisor.ErrAlreadyPresent) {
		t.Fatalf("StartChild of a kept spec: %v", err)
	}

	w2, err := supervisor.RestartChild(ctx, n, sup, "w")
	if err != nil || w2 == w || !n.IsAlive(w2) {
		t.Fatalf("RestartChild = %v, %v", w2, err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 2, Active: 2, Workers: 1, Supervisors: 1})

	if err := supervisor.TerminateChild(ctx, n, sup, "sub"); err != nil {
		t.Fatal(err)
	}
	if n.IsAlive(s) {
		t.Fatal("terminated child supervisor alive")
	}
	if err := supervisor.DeleteChild(ctx, n, sup, "sub"); err != nil {
		t.Fatal(err)
	}
	if err := supervisor.DeleteChild(ctx, n, sup, "sub"); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("DeleteChild twice: %v", err)
	}
	for _, f := range []func() error{
		func() error { return supervisor.TerminateChild(ctx, n, sup, "nope") },
		func() error { _, err := supervisor.RestartChild(ctx, n, sup, "nope"); return err },
	} {
		if err := f(); !errors.Is(err, supervisor.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})

	// A temporary child's spec goes with it.
	tmp := supervisor.Func("tmp", worker)
	tmp.Restart = supervisor.Temporary
	if _, err := supervisor.StartChild(ctx, n, sup, tmp); err != nil {
		t.Fatal(err)
	}
	if err := supervisor.TerminateChild(ctx, n, sup, "tmp"); err != nil {
		t.Fatal(err)
	}
	if got := ids(mustWhich(t, n, sup)); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("children after terminating a temporary one: %v", got)
	}

	// A failed start keeps nothing.
	_, err = supervisor.StartChild(ctx, n, sup, supervisor.ChildSpec{ID: "f", Start: func(context.Context, *gotp.Process) (gotp.PID, error) {
		return gotp.PID{}, errBoom
	}})
	if se, ok := errors.AsType[*supervisor.ChildStartError](err); !ok || se.ID != "f" || !errors.Is(err, errBoom) {
		t.Fatalf("failing StartChild: %v", err)
	}
	if in, _ := supervisor.Inspect(n, sup); in.StartFailures != 1 {
		t.Fatalf("failed StartChild not counted: %d", in.StartFailures)
	}
	if _, err := supervisor.StartChild(ctx, n, sup, supervisor.ChildSpec{ID: "bad"}); !errors.As(err, new(*supervisor.SpecError)) {
		t.Fatalf("bad spec: %v", err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})

	// Dynamic-only calls on a static supervisor.
	if _, err := supervisor.StartDynamicChild(ctx, n, sup, 1); !errors.Is(err, supervisor.ErrNotDynamic) {
		t.Fatalf("StartDynamicChild on a static supervisor: %v", err)
	}
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, w2); !errors.Is(err, supervisor.ErrNotDynamic) {
		t.Fatalf("TerminateDynamicChild on a static supervisor: %v", err)
	}
	// Calls to something that is not running.
	if _, err := supervisor.WhichChildren(ctx, n, gotp.Name("nobody")); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("WhichChildren of nobody: %v", err)
	}
}

// TestRestarting: a child whose restart keeps failing shows as
// restarting, is retried (each try a restart against the intensity), and
// runs again once its start succeeds.
func TestRestarting(t *testing.T) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(logs.Logger()))
	ctx := gotptest.Context(t)
	var failing atomic.Bool
	var tries atomic.Int64
	spec := supervisor.ChildSpec{ID: "f", Start: func(_ context.Context, sup *gotp.Process) (gotp.PID, error) {
		if failing.Load() {
			tries.Add(1)
			return gotp.PID{}, errBoom
		}
		return sup.SpawnLink(worker)
	}}
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{Intensity: 1 << 30, Children: []supervisor.ChildSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	w := pids(mustWhich(t, n, sup))["f"]
	down := gotptest.Watch(t, n, w)
	n.Exit(w, gotp.ErrKill)
	gotptest.Recv(t, down)
	which := mustWhich(t, n, sup)
	if which[0].State != supervisor.ChildRestarting || !which[0].PID.IsZero() {
		t.Fatalf("which %+v", which[0])
	}
	if _, err := supervisor.RestartChild(ctx, n, sup, "f"); !errors.Is(err, supervisor.ErrRestarting) {
		t.Fatalf("RestartChild restarting: %v", err)
	}
	if err := supervisor.DeleteChild(ctx, n, sup, "f"); !errors.Is(err, supervisor.ErrRestarting) {
		t.Fatalf("DeleteChild restarting: %v", err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 0, Workers: 1})
	recoverAfterRetries(t, n, sup, &tries, &failing)
	in, _ := supervisor.Inspect(n, sup)
	if in.Restarts < 3 {
		t.Fatalf("retries not counted as restarts: %d", in.Restarts)
	}
	if f := int(tries.Load()); in.StartFailures != uint64(f) || in.Children[0].StartFailures != f {
		t.Fatalf("start failures counted %d (child %d), want %d", in.StartFailures, in.Children[0].StartFailures, f)
	}
	if len(logs.Find("supervisor: child failed to start")) < 3 {
		t.Fatal("failed restarts not logged")
	}
}

// TestRestartingGivesUp: a child whose restart always fails makes the
// supervisor give up once the retries exceed the intensity.
func TestRestartingGivesUp(t *testing.T) {
	n := gotptest.NewNode(t)
	var failing atomic.Bool
	spec := supervisor.ChildSpec{ID: "f", Start: func(_ context.Context, sup *gotp.Process) (gotp.PID, error) {
		if failing.Load() {
			return gotp.PID{}, errBoom
		}
		return sup.SpawnLink(worker)
	}}
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{Intensity: 5, Children: []supervisor.ChildSpec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	down := gotptest.Watch(t, n, sup)
	n.Exit(pids(mustWhich(t, n, sup))["f"], gotp.ErrKill)
	if r := gotptest.Recv(t, down); !errors.Is(r, supervisor.ErrMaxIntensity) {
		t.Fatalf("exit %v", r)
	}
}

// TestDynamicRestarting: a dynamic child whose restart fails is listed as
// restarting (named by its dead process's PID), counted as a worker but not
// as active, and retried
// with its argument until a start succeeds; each failure is counted and
// logged.
func TestDynamicRestarting(t *testing.T) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(logs.Logger()))
	ctx := gotptest.Context(t)
	var failing atomic.Bool
	var tries atomic.Int64
	var args []string
	var mu sync.Mutex
	sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[string]{
		Intensity: 1 << 30,
		Start: func(_ context.Context, sup *gotp.Process, arg string) (gotp.PID, error) {
			mu.Lock()
			args = append(args, arg)
			mu.Unlock()
			if failing.Load() {
				tries.Add(1)
				return gotp.PID{}, errBoom
			}
			return sup.SpawnLink(worker)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := supervisor.StartDynamicChild(ctx, n, sup, "carol")
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	down := gotptest.Watch(t, n, w)
	n.Exit(w, gotp.ErrKill)
	gotptest.Recv(t, down)
	which := mustWhich(t, n, sup)
	if len(which) != 1 || which[0].State != supervisor.ChildRestarting || which[0].PID != w {
		t.Fatalf("which %+v, want one restarting child", which)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 0, Workers: 1})
	recoverAfterRetries(t, n, sup, &tries, &failing)
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})
	mu.Lock()
	for _, a := range args {
		if a != "carol" {
			t.Fatalf("started with %q, want every retry with the child's argument", a)
		}
	}
	mu.Unlock()
	in, _ := supervisor.Inspect(n, sup)
	if f := uint64(tries.Load()); in.StartFailures != f {
		t.Fatalf("start failures counted %d, want %d", in.StartFailures, f)
	}
	if len(logs.Find("supervisor: child failed to start")) < 3 {
		t.Fatal("failed restarts not logged")
	}
}
