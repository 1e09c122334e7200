package supervisor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// These tests port cases of OTP's supervisor_SUITE (sup_start_map,
// sup_start_ignore_*, extra_return, count_children, the significant_*
// cases) and the simple_one_for_one rules of its terminate_child.

// ignoring is a start function that returns server.ErrIgnore.
func ignoring(context.Context, *gotp.Process) (gotp.PID, error) { return gotp.PID{}, server.ErrIgnore }

func funcChild(id string, restart supervisor.Restart) supervisor.ChildSpec {
	c := supervisor.Func(id, worker)
	c.Restart = restart
	return c
}

// sup_start_map: GetChildSpec returns a child's spec with its defaults
// filled in; WhichChild describes one child; both fail with ErrNotFound
// for an unknown id and with ErrDynamic on a dynamic supervisor.
func TestWhichChildAndGetChildSpec(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	brutal := supervisor.Func("child2", worker)
	brutal.Shutdown = supervisor.BrutalKill
	sub := supervisor.Spec{}.ChildSpec("child3")
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{
		supervisor.Func("child1", worker), brutal, sub,
		{ID: "ignored", Start: ignoring, Restart: supervisor.Transient},
	}})
	gotptest.Must(t, err)
	for id, want := range map[string]struct {
		shutdown time.Duration
		typ      supervisor.ChildType
	}{
		"child1": {supervisor.DefaultShutdown, supervisor.Worker},
		"child2": {supervisor.BrutalKill, supervisor.Worker},
		"child3": {supervisor.Infinity, supervisor.Supervisor},
	} {
		spec, err := supervisor.GetChildSpec(ctx, n, sup, id)
		if err != nil || spec.ID != id || spec.Restart != supervisor.Permanent || spec.Shutdown != want.shutdown || spec.Type != want.typ || spec.Start == nil {
			t.Fatalf("GetChildSpec(%s) = %+v, %v", id, spec, err)
		}
	}
	if _, err := supervisor.GetChildSpec(ctx, n, sup, "child4"); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("GetChildSpec of an unknown id: %v", err)
	}

	which := mustWhich(t, n, sup)
	for _, want := range which {
		got, err := supervisor.WhichChild(ctx, n, sup, want.ID)
		if err != nil || got != want {
			t.Fatalf("WhichChild(%s) = %+v, %v; WhichChildren says %+v", want.ID, got, err, want)
		}
	}
	if c, _ := supervisor.WhichChild(ctx, n, sup, "ignored"); c.State != supervisor.ChildNotRunning || !c.PID.IsZero() {
		t.Fatalf("WhichChild of an ignored child: %+v", c)
	}
	if _, err := supervisor.WhichChild(ctx, n, sup, "child4"); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("WhichChild of an unknown id: %v", err)
	}

	dyn, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
		Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) { return sup.SpawnLink(worker) },
	})
	gotptest.Must(t, err)
	if _, err := supervisor.WhichChild(ctx, n, dyn, "x"); !errors.Is(err, supervisor.ErrDynamic) {
		t.Fatalf("WhichChild on a dynamic supervisor: %v", err)
	}
	if _, err := supervisor.GetChildSpec(ctx, n, dyn, "x"); !errors.Is(err, supervisor.ErrDynamic) {
		t.Fatalf("GetChildSpec on a dynamic supervisor: %v", err)
	}
	if _, err := supervisor.WhichDynamicChild(ctx, n, sup, sup); !errors.Is(err, supervisor.ErrNotDynamic) {
		t.Fatalf("WhichDynamicChild on a static supervisor: %v", err)
	}
	pid, err := supervisor.StartDynamicChild(ctx, n, dyn, 1)
	gotptest.Must(t, err)
	if c, err := supervisor.WhichDynamicChild(ctx, n, dyn, pid); err != nil || c.PID != pid || c.State != supervisor.ChildRunning {
		t.Fatalf("WhichDynamicChild = %+v, %v", c, err)
	}
	if _, err := supervisor.WhichDynamicChild(ctx, n, dyn, sup); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("WhichDynamicChild of a process that is no child: %v", err)
	}
}

// sup_start_ignore_temporary_child and
// sup_start_ignore_temporary_child_start_child: a temporary child whose
// start returns ignore is not kept, at the supervisor's start or through
// StartChild; a permanent one is kept, not running (sup_start_ignore_child).
func TestIgnoredTemporaryChildIsDropped(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{
		{ID: "child1", Start: ignoring, Restart: supervisor.Temporary},
		funcChild("child2", supervisor.Temporary),
	}})
	gotptest.Must(t, err)
	if got := ids(mustWhich(t, n, sup)); len(got) != 1 || got[0] != "child2" {
		t.Fatalf("children %v, want only child2", got)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})

	pid, err := supervisor.StartChild(ctx, n, sup, supervisor.ChildSpec{ID: "child3", Start: ignoring, Restart: supervisor.Temporary})
	if err != nil || !pid.IsZero() {
		t.Fatalf("StartChild of an ignoring temporary child = %v, %v", pid, err)
	}
	if got := ids(mustWhich(t, n, sup)); len(got) != 1 {
		t.Fatalf("children %v: the ignored temporary child was kept", got)
	}
	// Not kept, so the id is free: a second StartChild is not "already present".
	if _, err := supervisor.StartChild(ctx, n, sup, funcChild("child3", supervisor.Temporary)); err != nil {
		t.Fatalf("StartChild under the id of a dropped child: %v", err)
	}

	if _, err := supervisor.StartChild(ctx, n, sup, supervisor.ChildSpec{ID: "perm", Start: ignoring}); err != nil {
		t.Fatal(err)
	}
	if c, err := supervisor.WhichChild(ctx, n, sup, "perm"); err != nil || c.State != supervisor.ChildNotRunning {
		t.Fatalf("an ignored permanent child: %+v, %v; want its spec kept, not running", c, err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 3, Active: 2, Workers: 3})
}

// count_children of a simple_one_for_one supervisor: one spec (the
// template), its children counted as its type.
func TestCountDynamicChildren(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
		Type: supervisor.Supervisor,
		Start: func(ctx context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
			return supervisor.StartLink(ctx, sup, supervisor.Spec{})
		},
	})
	gotptest.Must(t, err)
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1})
	for i := range 3 {
		_, err := supervisor.StartDynamicChild(ctx, n, sup, i)
		gotptest.Must(t, err)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 3, Supervisors: 3})
}

// OTP's terminate_child of a simple_one_for_one supervisor: a pid that is
// not alive is ok, whether the child exited by itself (a temporary child,
// already forgotten) or was never one; a live process that is no child is
// not_found.
func TestTerminateDynamicChildThatExited(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
		Restart: supervisor.Temporary,
		Start:   func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) { return sup.SpawnLink(worker) },
	})
	gotptest.Must(t, err)
	pid, err := supervisor.StartDynamicChild(ctx, n, sup, 0)
	gotptest.Must(t, err)
	down := gotptest.Watch(t, n, pid)
	n.Send(pid, exitWith{nil})
	gotptest.Recv(t, down)
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, pid); err != nil {
		t.Fatalf("TerminateDynamicChild of a child that exited: %v, want nil", err)
	}
	stranger := gotptest.NewSink(t, n)
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, stranger.PID()); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("TerminateDynamicChild of a live stranger: %v, want ErrNotFound", err)
	}
	if !n.IsAlive(stranger.PID()) {
		t.Fatal("the stranger was stopped")
	}
}

// A dynamic child whose restart keeps failing is listed as restarting,
// under the PID of its last process, can be found by that PID, and
// TerminateDynamicChild forgets it: no more retries.
func TestTerminateDynamicChildWhileRestarting(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Logger(discard))
	ctx := gotptest.Context(t)
	var failing atomic.Bool
	var tries atomic.Int64
	sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[string]{
		Intensity: 1 << 30,
		Start: func(_ context.Context, sup *gotp.Process, _ string) (gotp.PID, error) {
			if failing.Load() {
				tries.Add(1)
				return gotp.PID{}, errBoom
			}
			return sup.SpawnLink(worker)
		},
	})
	gotptest.Must(t, err)
	keep, err := supervisor.StartDynamicChild(ctx, n, sup, "keep")
	gotptest.Must(t, err)
	w, err := supervisor.StartDynamicChild(ctx, n, sup, "failing")
	gotptest.Must(t, err)
	failing.Store(true)
	down := gotptest.Watch(t, n, w)
	n.Exit(w, gotp.ErrKill)
	gotptest.Recv(t, down)
	for tries.Load() < 3 { // the restart has failed three times: it keeps failing
		mustWhich(t, n, sup)
	}
	which := mustWhich(t, n, sup)
	if len(which) != 2 || which[0].PID != keep || which[1].PID != w || which[1].State != supervisor.ChildRestarting {
		t.Fatalf("which %+v, want keep running and the failing child restarting under %v", which, w)
	}
	if c, err := supervisor.WhichDynamicChild(ctx, n, sup, w); err != nil || c.State != supervisor.ChildRestarting {
		t.Fatalf("WhichDynamicChild of the restarting child = %+v, %v", c, err)
	}
	if err := supervisor.TerminateDynamicChild(ctx, n, sup, w); err != nil {
		t.Fatalf("TerminateDynamicChild of the restarting child: %v", err)
	}
	which = mustWhich(t, n, sup)
	if len(which) != 1 || which[0].PID != keep {
		t.Fatalf("which %+v after terminating the restarting child", which)
	}
	wantCounts(t, n, sup, supervisor.Counts{Specs: 1, Active: 1, Workers: 1})
	// The retries stop: a retry already queued finds the child gone.
	before := tries.Load()
	mustWhich(t, n, sup)
	mustWhich(t, n, sup)
	if after := tries.Load(); after != before {
		t.Fatalf("%d more restart attempts after the child was terminated", after-before)
	}
	if _, err := supervisor.WhichDynamicChild(ctx, n, sup, w); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("WhichDynamicChild after terminate: %v", err)
	}
}

// extra_return: a start function that returns information beside the PID
// has it reported by WhichChildren and WhichChild, replaced at each
// restart, for static and dynamic children.
func TestStartInfo(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Logger(discard))
	ctx := gotptest.Context(t)
	var starts atomic.Int64
	startInfo := func(_ context.Context, sup *gotp.Process) (gotp.PID, any, error) {
		k := starts.Add(1)
		pid, err := sup.SpawnLink(worker)
		return pid, k, err
	}
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{Intensity: 10, Children: []supervisor.ChildSpec{
		{ID: "extra", StartInfo: startInfo},
		supervisor.Func("plain", worker),
	}})
	gotptest.Must(t, err)
	which := mustWhich(t, n, sup)
	if which[0].Info != int64(1) || which[1].Info != nil {
		t.Fatalf("which %+v, want the extra child's info 1 and none for the plain one", which)
	}
	down := gotptest.Watch(t, n, which[0].PID)
	n.Exit(which[0].PID, errBoom)
	gotptest.Recv(t, down)
	if c, err := supervisor.WhichChild(ctx, n, sup, "extra"); err != nil || c.Info != int64(2) || c.Restarts != 1 {
		t.Fatalf("after a restart: %+v, %v; want the restart's info 2", c, err)
	}
	pid, err := supervisor.StartChild(ctx, n, sup, supervisor.ChildSpec{ID: "added", StartInfo: startInfo})
	gotptest.Must(t, err)
	if c, _ := supervisor.WhichChild(ctx, n, sup, "added"); c.PID != pid || c.Info != int64(3) {
		t.Fatalf("StartChild's info: %+v", c)
	}
	gotptest.Must(t, supervisor.TerminateChild(ctx, n, sup, "added"))
	_, err = supervisor.RestartChild(ctx, n, sup, "added")
	gotptest.Must(t, err)
	if c, _ := supervisor.WhichChild(ctx, n, sup, "added"); c.Info != int64(4) {
		t.Fatalf("RestartChild's info: %+v", c)
	}
	if _, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{
		{ID: "both", Start: supervisor.Func("x", worker).Start, StartInfo: startInfo},
	}}); !errors.As(err, new(*supervisor.SpecError)) {
		t.Fatalf("a spec with both Start and StartInfo: %v", err)
	}

	dyn, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[string]{
		StartInfo: func(_ context.Context, sup *gotp.Process, arg string) (gotp.PID, any, error) {
			pid, err := sup.SpawnLink(worker)
			return pid, "info of " + arg, err
		},
	})
	gotptest.Must(t, err)
	dpid, err := supervisor.StartDynamicChild(ctx, n, dyn, "ana")
	gotptest.Must(t, err)
	if c, err := supervisor.WhichDynamicChild(ctx, n, dyn, dpid); err != nil || c.Info != "info of ana" {
		t.Fatalf("dynamic child's info: %+v, %v", c, err)
	}
	if w := mustWhich(t, n, dyn); len(w) != 1 || w[0].Info != "info of ana" {
		t.Fatalf("WhichChildren of the dynamic supervisor: %+v", w)
	}
}

// Significant children: invalid combinations are refused, as OTP's
// check_childspecs refuses them.
func TestSignificantSpecErrors(t *testing.T) {
	n := gotptest.NewNode(t)
	ctx := gotptest.Context(t)
	temp := funcChild("t", supervisor.Temporary)
	temp.Significant = true
	perm := supervisor.Func("p", worker)
	perm.Significant = true
	for name, spec := range map[string]supervisor.Spec{
		"significant without auto shutdown": {Children: []supervisor.ChildSpec{temp}},
		"significant permanent":             {AutoShutdown: supervisor.AnySignificant, Children: []supervisor.ChildSpec{perm}},
		"unknown auto shutdown":             {AutoShutdown: 9},
	} {
		if _, err := supervisor.Start(ctx, n, spec); !errors.As(err, new(*supervisor.SpecError)) {
			t.Errorf("%s: %v, want *SpecError", name, err)
		}
	}
	never, err := supervisor.Start(ctx, n, supervisor.Spec{})
	gotptest.Must(t, err)
	if _, err := supervisor.StartChild(ctx, n, never, temp); !errors.As(err, new(*supervisor.SpecError)) {
		t.Errorf("StartChild of a significant child where AutoShutdown is Never: %v", err)
	}
	if _, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
		Restart: supervisor.Temporary, Significant: true,
		Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) { return sup.SpawnLink(worker) },
	}); !errors.As(err, new(*supervisor.SpecError)) {
		t.Errorf("dynamic significant without auto shutdown: %v", err)
	}
}

// significantSup starts a supervisor with auto shutdown and the children
// given, and returns it with the exit reason it will end with.
func significantSup(t *testing.T, n *gotp.Node, auto supervisor.AutoShutdown, children ...supervisor.ChildSpec) (gotp.PID, <-chan error) {
	t.Helper()
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{AutoShutdown: auto, Intensity: 10, Children: children})
	gotptest.Must(t, err)
	return sup, gotptest.Watch(t, n, sup)
}

func significant(id string, restart supervisor.Restart) supervisor.ChildSpec {
	c := funcChild(id, restart)
	c.Significant = true
	return c
}

// endChild makes the child id of sup exit with reason and waits for it.
func endChild(t *testing.T, n *gotp.Node, sup gotp.PID, id string, reason error) {
	t.Helper()
	pid := pids(mustWhich(t, n, sup))[id]
	down := gotptest.Watch(t, n, pid)
	n.Send(pid, exitWith{reason})
	gotptest.Recv(t, down)
}

// significant_temporary and significant_transient, with any_significant:
// the supervisor ends with shutdown when a significant child ends and is
// not restarted; a significant transient child that crashes is restarted
// instead, and other children never matter.
func TestAutoShutdownAnySignificant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart supervisor.Restart
		reason  error
		ends    bool
	}{
		{"temporary normal", supervisor.Temporary, nil, true},
		{"temporary crash", supervisor.Temporary, errBoom, true},
		{"transient normal", supervisor.Transient, nil, true},
		{"transient shutdown", supervisor.Transient, gotp.ErrShutdown, true},
		{"transient crash", supervisor.Transient, errBoom, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := gotptest.NewNode(t, gotptest.Logger(discard))
			rec := &recorder{}
			sup, down := significantSup(t, n, supervisor.AnySignificant,
				recChild("bystander", rec), significant("sig", tc.restart), funcChild("plain", supervisor.Temporary))
			endChild(t, n, sup, "plain", nil) // not significant: nothing happens
			endChild(t, n, sup, "sig", tc.reason)
			if !tc.ends {
				if c, _ := supervisor.WhichChild(gotptest.Context(t), n, sup, "sig"); c.State != supervisor.ChildRunning || c.Restarts != 1 {
					t.Fatalf("a crashed significant transient child: %+v, want restarted", c)
				}
				gotptest.NoRecv(t, down)
				return
			}
			if r := gotptest.Recv(t, down); !errors.Is(r, supervisor.ErrAutoShutdown) || !gotp.IsNormal(r) {
				t.Fatalf("supervisor exit %v, want ErrAutoShutdown (a shutdown)", r)
			}
			if got := rec.get(); len(got) != 2 || got[1] != "stop bystander" {
				t.Fatalf("events %v: the other children must be stopped", got)
			}
		})
	}
}

// TerminateChild of a significant child is the supervisor's own doing:
// no auto shutdown.
func TestAutoShutdownNotOnTerminateChild(t *testing.T) {
	n := gotptest.NewNode(t)
	sup, down := significantSup(t, n, supervisor.AnySignificant, significant("sig", supervisor.Transient))
	gotptest.Must(t, supervisor.TerminateChild(gotptest.Context(t), n, sup, "sig"))
	mustWhich(t, n, sup)
	gotptest.NoRecv(t, down)
}

// all_significant: the supervisor ends when the last running significant
// child ends.
func TestAutoShutdownAllSignificant(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Logger(discard))
	sup, down := significantSup(t, n, supervisor.AllSignificant,
		significant("a", supervisor.Temporary), significant("b", supervisor.Transient), funcChild("plain", supervisor.Permanent))
	endChild(t, n, sup, "a", errBoom)
	endChild(t, n, sup, "b", errBoom) // restarted: still running
	mustWhich(t, n, sup)
	gotptest.NoRecv(t, down)
	endChild(t, n, sup, "b", nil)
	if r := gotptest.Recv(t, down); !errors.Is(r, supervisor.ErrAutoShutdown) {
		t.Fatalf("supervisor exit %v, want ErrAutoShutdown", r)
	}
}

// significant_simple: a dynamic supervisor with significant children ends
// at the first (any) or the last (all) that ends.
func TestAutoShutdownDynamic(t *testing.T) {
	for _, auto := range []supervisor.AutoShutdown{supervisor.AnySignificant, supervisor.AllSignificant} {
		t.Run(auto.String(), func(t *testing.T) {
			n := gotptest.NewNode(t)
			ctx := gotptest.Context(t)
			sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
				Restart: supervisor.Temporary, Significant: true, AutoShutdown: auto,
				Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) { return sup.SpawnLink(worker) },
			})
			gotptest.Must(t, err)
			down := gotptest.Watch(t, n, sup)
			var kids []gotp.PID
			for i := range 2 {
				pid, err := supervisor.StartDynamicChild(ctx, n, sup, i)
				gotptest.Must(t, err)
				kids = append(kids, pid)
			}
			first := gotptest.Watch(t, n, kids[0])
			n.Send(kids[0], exitWith{nil})
			gotptest.Recv(t, first)
			if auto == supervisor.AllSignificant {
				mustWhich(t, n, sup)
				gotptest.NoRecv(t, down)
				n.Send(kids[1], exitWith{nil})
			}
			if r := gotptest.Recv(t, down); !errors.Is(r, supervisor.ErrAutoShutdown) {
				t.Fatalf("supervisor exit %v, want ErrAutoShutdown", r)
			}
		})
	}
}

// significant_escalation: a supervisor that shuts itself down is a
// significant transient child of its parent, whose auto shutdown follows.
func TestAutoShutdownClimbsTheTree(t *testing.T) {
	n := gotptest.NewNode(t)
	inner := supervisor.Spec{AutoShutdown: supervisor.AnySignificant, Children: []supervisor.ChildSpec{significant("job", supervisor.Temporary)}}.ChildSpec("inner")
	inner.Restart, inner.Significant = supervisor.Transient, true
	root, down := significantSup(t, n, supervisor.AnySignificant, inner)
	innerPID := pids(mustWhich(t, n, root))["inner"]
	endChild(t, n, innerPID, "job", nil)
	if r := gotptest.Recv(t, down); !errors.Is(r, supervisor.ErrAutoShutdown) {
		t.Fatalf("root exit %v, want ErrAutoShutdown", r)
	}
}

// callsSup is a server whose Init calls its supervisor (named "sup"), as
// the process it is: the supervisor waits for that Init, so the call
// would wait for itself.
type callsSup struct{ server.Defaults }

func (callsSup) Init(ctx context.Context, p *gotp.Process) error {
	_, err := supervisor.WhichChildren(ctx, p, gotp.Name("sup"))
	return err
}

// A child whose Init calls its own supervisor (the classic deadlock of a
// supervision tree) fails at once with a call cycle instead of at its
// deadline, at the supervisor's start and through StartChild.
func TestChildInitCallingItsSupervisor(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Logger(discard))
	ctx := gotptest.Context(t) // a long deadline: a call that waited for it would fail the test
	spec := supervisor.Server("calls-sup", func() server.Behaviour { return callsSup{} })
	_, err := supervisor.Start(ctx, n, supervisor.Spec{Children: []supervisor.ChildSpec{spec}}, server.Named("sup"))
	if !errors.Is(err, server.ErrCallCycle) || !errors.As(err, new(*supervisor.ChildStartError)) {
		t.Fatalf("Start = %v, want the child's start to fail with a call cycle", err)
	}
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{}, server.Named("sup"))
	gotptest.Must(t, err)
	if _, err := supervisor.StartChild(ctx, n, sup, spec); !errors.Is(err, server.ErrCallCycle) {
		t.Fatalf("StartChild = %v, want a call cycle", err)
	}
	if w := mustWhich(t, n, sup); len(w) != 0 {
		t.Fatalf("children %+v", w)
	}
}
