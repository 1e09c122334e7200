package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// syncProc makes a call to the node process's adder: everything m sent it
// before has been handled there when it returns (one ordered connection).
func syncProc(t testing.TB, m member, np *nodeProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := server.Call[int](ctx, m.n, Remote{Node: np.name, Name: "adder"}, 1); err != nil || v != 2 {
		t.Fatalf("call to %s's adder: %v, %v", np.name, v, err)
	}
}

// A node whose OS process is killed (SIGKILL) closes its direct links with
// it: its peers see it down at once, well inside the heartbeat timeout,
// and its monitors, links and group members go.
func TestMultiProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes; skipped with -short")
	}
	const interval, timeout = 100 * time.Millisecond, 3 * time.Second
	o := fastOpts(t)
	o.Cluster = "mp"
	o.HeartbeatInterval, o.HeartbeatTimeout = interval, timeout
	parent := startNode(t, "parent", o)
	scope, err := pg.Start(context.Background(), parent.n, "mp", pg.Options{})
	gotptest.Must(t, err)
	gotptest.Must(t, parent.c.Replicate(scope))

	procs := map[string]*nodeProc{}
	memberOf := map[string]gotp.PID{}
	for _, name := range []string{"k1", "k2"} {
		procs[name] = startNodeProc(t, "", nodeProcConfig{Name: name, Cluster: "mp", Peers: []string{parent.c.RouteURL()},
			HeartbeatInterval: interval, HeartbeatTimeout: timeout})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gotptest.Must(t, parent.c.WaitFor(ctx, "k1", "k2"))
	for name, np := range procs {
		pid, err := gotp.ParsePID(strings.TrimPrefix(np.do("join workers"), "ok "))
		gotptest.Must(t, err)
		memberOf[name] = pid
	}
	gotptest.EventuallyWithin(t, 10*time.Second, "both children's members", func() bool { return countMembers(scope, "workers") == 2 })

	watcher := gotptest.NewSink(t, parent.n, gotp.TrapExit(true))
	ref := monitorFrom(t, watcher, memberOf["k1"])
	linkFrom(t, watcher, memberOf["k1"])
	syncProc(t, parent, procs["k1"]) // the monitor and link are there before the kill
	sub, _ := parent.c.Subscribe()
	defer sub.Close()

	killed := time.Now()
	procs["k1"].kill()
	waitEvent(t, sub, NodeDown, "k1", timeout+time.Second)
	seen := time.Since(killed)
	t.Logf("SIGKILLed node seen down after %v (heartbeat timeout %v)", seen, timeout)
	if seen > timeout/2 {
		t.Errorf("a killed node took %v to be seen down: the closed link should tell at once", seen)
	}
	for got := 0; got < 2; got++ {
		switch m := watcher.NextWithin(t, 5*time.Second).(type) {
		case gotp.Down:
			if m.Ref != ref || m.Reason != gotp.ErrNoConnection || m.PID != memberOf["k1"] {
				t.Fatalf("down %+v", m)
			}
		case gotp.Exit:
			if m.From != memberOf["k1"] || m.Reason != gotp.ErrNoConnection {
				t.Fatalf("exit %+v", m)
			}
		default:
			t.Fatalf("unexpected %#v", m)
		}
	}
	gotptest.EventuallyWithin(t, 5*time.Second, "k1's members dropped", func() bool { return countMembers(scope, "workers") == 1 })
	if got := members(scope, "workers"); len(got) != 1 || got[0] != memberOf["k2"] {
		t.Fatalf("members after the kill: %v", got)
	}
}
