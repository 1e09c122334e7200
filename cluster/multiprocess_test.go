package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

// The multi-process test re-runs this test binary as a cluster node: with
// childEnv set, TestMain calls childMain instead of running tests.
const (
	childEnv     = "GOTP_CLUSTER_CHILD"
	childPeerEnv = "GOTP_CLUSTER_PEER"
	childToEnv   = "GOTP_CLUSTER_REPORT_TO"
	mpInterval   = 100 * time.Millisecond
	mpTimeout    = 1500 * time.Millisecond
)

// childMain runs a node named $GOTP_CLUSTER_CHILD routed to $GOTP_CLUSTER_PEER:
// it replicates pg scope "mp", has one process join group "workers", tells
// the process $GOTP_CLUSTER_REPORT_TO about it, prints "ready" and waits to
// be killed.
func childMain() int {
	name := os.Getenv(childEnv)
	to, err := gotp.ParsePID(os.Getenv(childToEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	codec := NewCodec()
	if err := Register[Ping](codec, "test.Ping"); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	n := gotp.NewNode(gotp.Options{Name: name})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Join(ctx, n, Options{
		Cluster: "mp", Peers: []string{os.Getenv(childPeerEnv)}, Codec: codec,
		HeartbeatInterval: mpInterval, HeartbeatTimeout: mpTimeout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child join:", err)
		return 2
	}
	scope, err := pg.Start(ctx, n, "mp", pg.Options{})
	if err == nil {
		err = c.Replicate(scope)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child pg:", err)
		return 2
	}
	if err := c.WaitFor(ctx, to.Node()); err != nil {
		fmt.Fprintln(os.Stderr, "child wait:", err)
		return 2
	}
	joined := make(chan error, 1)
	_, err = n.Spawn(func(p *gotp.Process) error {
		inst, err := scope.Open(p)
		if err == nil {
			err = inst.Join("workers")
		}
		joined <- err
		if err != nil {
			return err
		}
		p.Send(to, Ping{From: p.Self(), Note: name})
		_, err = p.Receive(context.Background())
		return err
	})
	if err == nil {
		err = <-joined
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child member:", err)
		return 2
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

func TestMultiProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node processes; skipped with -short")
	}
	o := fastOpts(t)
	o.Cluster = "mp"
	o.HeartbeatInterval, o.HeartbeatTimeout = mpInterval, mpTimeout
	parent := startNode(t, "parent", o)
	scope, err := pg.Start(context.Background(), parent.n, "mp", pg.Options{})
	gotptest.Must(t, err)
	gotptest.Must(t, parent.c.Replicate(scope))
	reportSink := gotptest.NewSink(t, parent.n)
	report, reports := reportSink.PID(), reportSink.C()

	children := map[string]*exec.Cmd{}
	for _, name := range []string{"k1", "k2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+name, childPeerEnv+"="+parent.c.RouteURL(), childToEnv+"="+report.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		gotptest.Must(t, err)
		gotptest.Must(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		ready := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(out).ReadString('\n')
			ready <- strings.TrimSpace(line)
		}()
		select {
		case line := <-ready:
			if line != "ready" {
				t.Fatalf("child %s said %q", name, line)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("child %s not ready", name)
		}
		children[name] = cmd
	}
	members := map[string]gotp.PID{}
	for range 2 {
		p := gotptest.RecvWithin(t, 10*time.Second, reports).(Ping)
		members[p.Note] = p.From
	}
	gotptest.EventuallyWithin(t, 10*time.Second, "both children's members", func() bool { return countMembers(scope, "workers") == 2 })

	watcherSink := gotptest.NewSink(t, parent.n)

	wch := watcherSink.C()
	ref := monitorFrom(t, watcherSink, members["k1"])
	sub, _ := parent.c.Subscribe()
	defer sub.Close()
	// The monitor must reach k1 before it dies; a round trip proves it.
	_ = ref

	killed := time.Now()
	gotptest.Must(t, children["k1"].Process.Signal(syscall.SIGKILL))
	bound := mpTimeout + 2*mpInterval + time.Second // timeout, a tick of the checker, slack for a loaded machine
	waitEvent(t, sub, NodeDown, "k1", bound)
	seen := time.Since(killed)
	t.Logf("SIGKILLed node seen down after %v (timeout %v)", seen, mpTimeout)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoConnection || d.PID != members["k1"] {
		t.Fatalf("down %+v", d)
	}
	gotptest.EventuallyWithin(t, 5*time.Second, "k1's members dropped", func() bool {
		m := countMembers(scope, "workers")
		return m == 1
	})
	if got := membersOf(scope, "workers"); len(got) != 1 || got[0] != members["k2"] {
		t.Fatalf("members after the kill: %v", got)
	}
}

func membersOf(s *pg.Scope, group string) []gotp.PID { return members(s, group) }
