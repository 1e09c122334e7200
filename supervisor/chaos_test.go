package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// blueprint is the declared shape of a tree.
type blueprint struct {
	id   string
	typ  supervisor.ChildType
	kids []blueprint
}

type idle struct{ server.Defaults }

func idleServer(id string) supervisor.ChildSpec {
	return supervisor.Server(id, func() server.Behaviour { return idle{} })
}

// chaosTree returns a three-level tree (root, mid supervisors of each
// strategy, leaf supervisors) and its blueprint.
func chaosTree() (supervisor.Spec, []blueprint) {
	W, S := supervisor.Worker, supervisor.Supervisor
	l1 := supervisor.Spec{Strategy: supervisor.RestForOne, Children: []supervisor.ChildSpec{
		supervisor.Func("y1", worker), idleServer("y2"), supervisor.Func("y3", worker)}}
	m1 := supervisor.Spec{Strategy: supervisor.OneForAll, Children: []supervisor.ChildSpec{
		supervisor.Func("x1", worker), idleServer("x2"), l1.ChildSpec("l1")}}
	l2 := supervisor.Spec{Strategy: supervisor.OneForOne, Intensity: 3, Children: []supervisor.ChildSpec{
		supervisor.Func("q1", worker), supervisor.Func("q2", worker)}}
	m2 := supervisor.Spec{Strategy: supervisor.RestForOne, Intensity: 3, Children: []supervisor.ChildSpec{
		supervisor.Func("z1", worker), l2.ChildSpec("l2"), idleServer("z2")}}
	dyn := supervisor.DynamicSpec[int]{Restart: supervisor.Temporary, Start: func(_ context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
		return sup.SpawnLink(worker)
	}}
	root := supervisor.Spec{Strategy: supervisor.OneForOne, Intensity: 1 << 30, Period: time.Second, Children: []supervisor.ChildSpec{
		supervisor.Func("w1", worker), m1.ChildSpec("m1"), m2.ChildSpec("m2"), dyn.ChildSpec("dyn")}}
	bp := []blueprint{
		{id: "w1", typ: W},
		{id: "m1", typ: S, kids: []blueprint{{id: "x1", typ: W}, {id: "x2", typ: W},
			{id: "l1", typ: S, kids: []blueprint{{id: "y1", typ: W}, {id: "y2", typ: W}, {id: "y3", typ: W}}}}},
		{id: "m2", typ: S, kids: []blueprint{{id: "z1", typ: W},
			{id: "l2", typ: S, kids: []blueprint{{id: "q1", typ: W}, {id: "q2", typ: W}}}, {id: "z2", typ: W}}},
		{id: "dyn", typ: S},
	}
	return root, bp
}

// matches reports why the tree differs from the blueprint ("" if it does
// not), and collects the PIDs of the tree.
func matches(children []supervisor.ChildInfo, bp []blueprint, pids *[]gotp.PID) string {
	if len(children) != len(bp) {
		return fmt.Sprintf("%d children, want %d", len(children), len(bp))
	}
	for i, c := range children {
		b := bp[i]
		if c.ID != b.id || c.Type != b.typ || c.State != supervisor.ChildRunning {
			return fmt.Sprintf("child %d is %s/%v/%s, want %s/%v/running", i, c.ID, c.Type, c.State, b.id, b.typ)
		}
		*pids = append(*pids, c.PID)
		if b.typ == supervisor.Supervisor {
			if c.Sub == nil {
				return fmt.Sprintf("no subtree for %s", c.ID)
			}
			if why := matches(c.Sub.Children, b.kids, pids); why != "" {
				return c.ID + ": " + why
			}
		}
	}
	return ""
}

// whichMatches compares the tree with the blueprint through WhichChildren
// calls at every level.
func whichMatches(ctx context.Context, n *gotp.Node, sup gotp.PID, bp []blueprint) error {
	which, err := supervisor.WhichChildren(ctx, n, sup)
	if err != nil {
		return err
	}
	if len(which) != len(bp) {
		return fmt.Errorf("%v: %d children, want %d", sup, len(which), len(bp))
	}
	for i, c := range which {
		if c.ID != bp[i].id || c.Type != bp[i].typ || c.State != supervisor.ChildRunning {
			return fmt.Errorf("%v: child %d is %+v, want %s", sup, i, c, bp[i].id)
		}
		if c.Type == supervisor.Supervisor {
			if err := whichMatches(ctx, n, c.PID, bp[i].kids); err != nil {
				return err
			}
		}
	}
	return nil
}

func chaosKills(t *testing.T) int {
	if s := os.Getenv("GOTP_CHAOS_KILLS"); s != "" {
		k, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("GOTP_CHAOS_KILLS: %v", err)
		}
		return k
	}
	if testing.Short() {
		return 300
	}
	return 2000
}

// TestChaos kills random processes of a three-level tree (one to three at
// a time, with gotp.ErrKill or an error; then in storms of ten kills that
// do not wait for the tree to recover) and checks after each round that
// the tree comes back to its declared shape, that none of the killed
// processes is in it, that no process is left over outside it, and, at
// the end, that WhichChildren at every level agrees and nothing leaks.
func TestChaos(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "chaos", Logger: discard})
	ctx := gotptest.Context(t)
	spec, bp := chaosTree()
	root, err := supervisor.Start(ctx, n, spec)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GOTP_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("GOTP_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 42))
	t.Logf("seed %d (rerun with GOTP_CHAOS_SEED)", seed)

	// settle waits until the tree matches the blueprint without any of
	// the killed PIDs, and returns the tree's PIDs.
	settle := func(round int, killed []gotp.PID) []gotp.PID {
		deadline := time.Now().Add(10 * time.Second)
		for {
			tree, ok := supervisor.Tree(n, root)
			if !ok {
				t.Fatalf("round %d: root supervisor died", round)
			}
			var ps []gotp.PID
			why := matches(tree.Children, bp, &ps)
			if why == "" {
				for _, k := range killed {
					if slices.Contains(ps, k) {
						why = fmt.Sprintf("killed %v still in the tree", k)
					}
				}
			}
			if why == "" && n.ProcessCount() != len(ps)+1 {
				why = fmt.Sprintf("%d processes, tree has %d", n.ProcessCount(), len(ps)+1)
			}
			if why == "" {
				return ps
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: tree did not come back: %s", round, why)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}

	ps := settle(-1, nil)
	kills := chaosKills(t)
	for round := range kills {
		var killed []gotp.PID
		for range 1 + rng.IntN(3) {
			pid := ps[rng.IntN(len(ps))]
			killed = append(killed, pid)
			if rng.IntN(2) == 0 {
				n.Exit(pid, gotp.ErrKill)
			} else {
				n.Exit(pid, errBoom)
			}
		}
		ps = settle(round, killed)
	}
	// Storms: kill while the tree is still restarting, reading the PIDs
	// to kill from the tree as it is at that moment.
	for round := range kills / 20 {
		var killed []gotp.PID
		for range 10 {
			tree, _ := supervisor.Tree(n, root)
			var live []gotp.PID
			collect(tree, &live)
			if len(live) == 0 {
				continue
			}
			pid := live[rng.IntN(len(live))]
			killed = append(killed, pid)
			n.Exit(pid, gotp.ErrKill)
		}
		settle(kills+round, killed)
	}
	if err := whichMatches(ctx, n, root, bp); err != nil {
		t.Fatal(err)
	}
	in, _ := supervisor.Inspect(n, root)
	t.Logf("%d rounds; root restarted children %d times", kills, in.Restarts)
	if in.Restarts == 0 {
		t.Fatal("no failure ever reached the root: the tree is not exercised")
	}
	down := gotptest.Watch(t, n, root)
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := gotptest.Recv(t, down); !errors.Is(r, gotp.ErrShutdown) {
		t.Fatalf("root exit %v", r)
	}
	if c := n.ProcessCount(); c != 0 {
		t.Fatalf("%d processes after Stop", c)
	}
}

// collect appends the PIDs of every running process of a tree.
func collect(in supervisor.Info, out *[]gotp.PID) {
	for _, c := range in.Children {
		if c.State == supervisor.ChildRunning {
			*out = append(*out, c.PID)
		}
		if c.Sub != nil {
			collect(*c.Sub, out)
		}
	}
}
