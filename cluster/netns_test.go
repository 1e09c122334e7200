package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
)

// Partition tests on real network namespaces: each node process runs in a
// namespace of its own, joined to the others by veth pairs on a bridge
// (in a namespace of its own too, so the host's network is never
// touched); iptables in a node's namespace cuts it off (packets dropped,
// no connection closed) and heals it. They need root and iproute2 and
// iptables, and skip with a message otherwise. Every namespace is named
// gotp21<id>..., <id> from this test process's PID, and removed at the
// end of the test even when it fails (and on the next run if the process
// died first).
type netns struct {
	t     testing.TB
	id    string
	bridg string
	ns    map[string]string // node → namespace
	dev   map[string]string // node → its veth (inside its namespace)
	ip    map[string]string // node → address
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// removeStaleNetns deletes namespaces of earlier runs whose test process
// is gone.
func removeStaleNetns() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, "gotp21") || len(name) < 10 {
			continue
		}
		pid, err := strconv.ParseInt(name[6:10], 16, 32)
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && int(pid) != os.Getpid()&0xffff {
			continue // maybe a run under way (the id is only the PID's low bits)
		}
		_ = run("ip", "netns", "del", name)
	}
}

// newNetns makes a namespace per node, with addresses 10.21.0.1, .2, ...
func newNetns(t testing.TB, nodes ...string) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("partition tests need root (network namespaces, iptables)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("partition tests need %s: %v", tool, err)
		}
	}
	removeStaleNetns()
	nn := &netns{t: t, id: fmt.Sprintf("%04x", os.Getpid()&0xffff), ns: map[string]string{}, dev: map[string]string{}, ip: map[string]string{}}
	nn.bridg = "gotp21" + nn.id + "br"
	if err := run("ip", "netns", "add", nn.bridg); err != nil {
		t.Skipf("cannot make network namespaces here: %v", err)
	}
	t.Cleanup(nn.remove)
	gotptest.Must(t, run("ip", "-n", nn.bridg, "link", "add", "br21", "type", "bridge"))
	gotptest.Must(t, run("ip", "-n", nn.bridg, "link", "set", "br21", "up"))
	for i, name := range nodes {
		ns := "gotp21" + nn.id + name
		dev := "v21" + nn.id + name
		gotptest.Must(t, run("ip", "netns", "add", ns))
		nn.ns[name], nn.dev[name], nn.ip[name] = ns, dev, fmt.Sprintf("10.21.0.%d", i+1)
		gotptest.Must(t, run("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", dev+"b", "netns", nn.bridg))
		gotptest.Must(t, run("ip", "-n", nn.bridg, "link", "set", dev+"b", "master", "br21", "up"))
		gotptest.Must(t, run("ip", "-n", ns, "addr", "add", nn.ip[name]+"/24", "dev", dev))
		gotptest.Must(t, run("ip", "-n", ns, "link", "set", dev, "up"))
		gotptest.Must(t, run("ip", "-n", ns, "link", "set", "lo", "up"))
	}
	return nn
}

func (nn *netns) remove() {
	for _, ns := range nn.ns {
		if err := run("ip", "netns", "del", ns); err != nil {
			nn.t.Errorf("cleanup: %v", err)
		}
	}
	if err := run("ip", "netns", "del", nn.bridg); err != nil {
		nn.t.Errorf("cleanup: %v", err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if bytes.Contains(out, []byte("gotp21"+nn.id)) {
		nn.t.Errorf("namespaces left: %s", out)
	}
}

// cut drops every packet in and out of node's veth: its connections stay
// open, silent.
func (nn *netns) cut(node string) {
	nn.t.Helper()
	ns, dev := nn.ns[node], nn.dev[node]
	gotptest.Must(nn.t, run("ip", "netns", "exec", ns, "iptables", "-I", "INPUT", "-i", dev, "-j", "DROP"))
	gotptest.Must(nn.t, run("ip", "netns", "exec", ns, "iptables", "-I", "OUTPUT", "-o", dev, "-j", "DROP"))
}

func (nn *netns) heal(node string) {
	nn.t.Helper()
	ns, dev := nn.ns[node], nn.dev[node]
	gotptest.Must(nn.t, run("ip", "netns", "exec", ns, "iptables", "-D", "INPUT", "-i", dev, "-j", "DROP"))
	gotptest.Must(nn.t, run("ip", "netns", "exec", ns, "iptables", "-D", "OUTPUT", "-o", dev, "-j", "DROP"))
}

const (
	nnInterval = 100 * time.Millisecond
	nnTimeout  = time.Second
)

func (nn *netns) config(node string, noDirect bool, all []string) nodeProcConfig {
	cfg := nodeProcConfig{
		Name: node, Cluster: "netns",
		RouteListen: nn.ip[node] + ":31201", DirectListen: nn.ip[node] + ":31202",
		HeartbeatInterval: nnInterval, HeartbeatTimeout: nnTimeout, NoDirect: noDirect,
	}
	for _, o := range all {
		if o != node {
			cfg.Peers = append(cfg.Peers, "nats-route://"+nn.ip[o]+":31201")
		}
	}
	return cfg
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func sees(np *nodeProc, want string) bool { return np.do("nodes") == "nodes "+want }

func membersSeen(np *nodeProc, group string) int {
	var k int
	fmt.Sscanf(np.do("members "+group), "members %d", &k)
	return k
}

// TestPartitionNetns: three node processes in three namespaces; c is cut
// off (no connection closes) and healed, then cut again, killed and
// started afresh while cut. It checks that the others see c down within
// the heartbeat timeout and c them, that pg membership changed on both
// sides converges after the heal, that a cluster-wide name taken on both
// sides is kept by the earlier registration while the other holder gets a
// name-conflict exit, that messages of the dead incarnation are never
// delivered after its successor is up nor to it, and that every node
// process stops with no goroutine left.
func TestPartitionNetns(t *testing.T) {
	for _, mode := range []struct {
		name     string
		noDirect bool
	}{{"direct", false}, {"nats", true}} {
		t.Run(mode.name, func(t *testing.T) { testPartition(t, mode.noDirect) })
	}
}

func testPartition(t *testing.T, noDirect bool) {
	nodes := []string{"a", "b", "c"}
	nn := newNetns(t, nodes...)
	procs := map[string]*nodeProc{}
	for _, n := range nodes {
		procs[n] = startNodeProc(t, nn.ns[n], nn.config(n, noDirect, nodes))
	}
	a, b, c := procs["a"], procs["b"], procs["c"]
	oldInbox := strings.TrimPrefix(c.do("inbox"), "ok ") // a process of c's first incarnation
	eventually(t, 20*time.Second, "the three nodes connected", func() bool {
		return sees(a, "b,c") && sees(b, "a,c") && sees(c, "a,b")
	})
	a.do("join room 1")
	b.do("join room 1")
	c.do("join room 2")
	for _, np := range procs {
		eventually(t, 10*time.Second, np.name+" sees 4 members of room", func() bool { return membersSeen(np, "room") == 4 })
	}
	kept := strings.TrimPrefix(a.do("register global kept"), "ok ")
	for _, np := range procs {
		eventually(t, 10*time.Second, np.name+" sees kept", func() bool { return np.do("whereis global kept") == "at "+kept })
	}
	inbox := strings.TrimPrefix(a.do("inbox"), "ok ")
	c.do("sender " + inbox)

	// Cut c off: nobody closes anything, the heartbeat timeout tells.
	cutAt := time.Now()
	nn.cut("c")
	bound := nnTimeout + 3*nnInterval + time.Second // the timeout, the checker's tick, a loaded machine
	eventually(t, 10*time.Second, "a and b see c down", func() bool { return sees(a, "b") && sees(b, "a") })
	if d := time.Since(cutAt); d > bound {
		t.Errorf("c seen down %v after the cut (heartbeat timeout %v)", d, nnTimeout)
	} else {
		t.Logf("c seen down %v after the cut (heartbeat timeout %v)", d, nnTimeout)
	}
	eventually(t, 10*time.Second, "c sees a and b down", func() bool { return sees(c, "") })
	eventually(t, 5*time.Second, "a and b drop c's members", func() bool { return membersSeen(a, "room") == 2 && membersSeen(b, "room") == 2 })
	eventually(t, 5*time.Second, "c drops a's and b's members", func() bool { return membersSeen(c, "room") == 2 })

	// Both sides change: a takes "solo" first, then c does.
	soloA := strings.TrimPrefix(a.do("register global solo"), "ok ")
	time.Sleep(2 * time.Millisecond) // the rule compares registration times: make them differ
	soloC := strings.TrimPrefix(c.do("register global solo"), "ok ")
	b.do("join room 1")
	c.do("join lobby 1")

	nn.heal("c")
	eventually(t, 30*time.Second, "the cluster whole again", func() bool {
		return sees(a, "b,c") && sees(b, "a,c") && sees(c, "a,b")
	})
	for _, np := range procs {
		eventually(t, 10*time.Second, np.name+" sees 5 members of room and 1 of lobby", func() bool {
			return membersSeen(np, "room") == 5 && membersSeen(np, "lobby") == 1
		})
		eventually(t, 10*time.Second, np.name+" sees solo kept by a", func() bool { return np.do("whereis global solo") == "at "+soloA })
		if got := np.do("whereis global kept"); got != "at "+kept {
			t.Errorf("%s: kept is %s", np.name, got)
		}
	}
	eventually(t, 10*time.Second, "c's holder of solo told", func() bool { return strings.HasPrefix(c.do("holder solo"), "lost conflict") })
	if got := a.do("holder solo"); got != "holding" {
		t.Errorf("a's holder of solo: %s", got)
	}
	t.Logf("solo: kept %s, %s got %q", soloA, soloC, c.do("holder solo"))

	// Cut c again, kill it while cut, start it afresh (still cut), heal.
	nn.cut("c")
	eventually(t, 10*time.Second, "a sees c down again", func() bool { return sees(a, "b") })
	c.kill()
	c2 := startNodeProc(t, nn.ns["c"], nn.config("c", noDirect, nodes))
	newInbox := strings.TrimPrefix(c2.do("inbox"), "ok ")
	t.Logf("c's inbox %s, its successor's %s", oldInbox, newInbox)
	c2.do("sender " + inbox)
	nn.heal("c")
	eventually(t, 30*time.Second, "c's successor connected", func() bool { return sees(a, "b,c") && sees(b, "a,c") && sees(c2, "a,b") })
	eventually(t, 10*time.Second, "c's members gone, its successor's in", func() bool {
		return membersSeen(a, "room") == 3 && membersSeen(a, "lobby") == 0
	})
	eventually(t, 10*time.Second, "the old solo holder's name gone", func() bool { return c2.do("whereis global solo") == "at "+soloA })
	// A message to the old incarnation's process does not reach the new
	// one's, even where their ids are the same.
	a.do("send " + oldInbox + " for-the-dead")
	a.do("send " + newInbox + " for-the-living")
	eventually(t, 10*time.Second, "the successor's inbox got its message", func() bool {
		return strings.Contains(c2.do("received"), "for-the-living")
	})
	if got := c2.do("received"); strings.Contains(got, "for-the-dead") {
		t.Errorf("a message to the dead incarnation reached its successor: %s", got)
	}
	// a got both incarnations' numbered messages: each in order, the dead
	// one's all before the successor's first.
	time.Sleep(50 * time.Millisecond)
	checkPings(t, a.do("received"))

	// The long version: more cuts and heals of a node picked in turn,
	// with joins on both sides while cut.
	procs["c"] = c2
	rounds, _ := strconv.Atoi(os.Getenv("GOTP_PARTITION_ROUNDS"))
	want := map[string]int{"room": 3}
	for r := range rounds {
		victim := nodes[r%len(nodes)]
		var others []*nodeProc
		for _, n := range nodes {
			if n != victim {
				others = append(others, procs[n])
			}
		}
		cutAt := time.Now()
		nn.cut(victim)
		for _, o := range others {
			eventually(t, 10*time.Second, o.name+" sees "+victim+" down", func() bool { return !strings.Contains(o.do("nodes"), victim) })
		}
		if d := time.Since(cutAt); d > bound {
			t.Errorf("round %d: %s seen down %v after the cut", r, victim, d)
		}
		group := fmt.Sprintf("g%d", r)
		procs[victim].do("join " + group + " 1")
		others[0].do("join " + group + " 2")
		want[group] = 3
		nn.heal(victim)
		for _, np := range procs {
			eventually(t, 30*time.Second, np.name+" sees every member after round "+strconv.Itoa(r), func() bool {
				for g, k := range want {
					if membersSeen(np, g) != k {
						return false
					}
				}
				return true
			})
		}
	}
	if rounds > 0 {
		t.Logf("%d more cuts and heals", rounds)
	}

	for _, np := range []*nodeProc{a, b, c2} {
		np.quit()
	}
}

// checkPings checks the Pings an inbox received: per sender (Note: node
// and creation) strictly increasing, and no sender's messages after
// another's began (each incarnation of c sent in turn).
func checkPings(t *testing.T, received string) {
	t.Helper()
	_, list, _ := strings.Cut(strings.TrimPrefix(received, "received "), " ")
	last := map[string]int{}
	var order []string
	total := 0
	for _, m := range strings.Split(list, "|") {
		// fmt.Sprint of Ping: {<pid> N note}
		f := strings.Fields(strings.Trim(m, "{}"))
		if len(f) != 3 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		note := f[2]
		if len(order) == 0 || order[len(order)-1] != note {
			for _, o := range order {
				if o == note {
					t.Fatalf("messages of %s resumed after another incarnation's: %v", note, order)
				}
			}
			order = append(order, note)
		}
		if n <= last[note] {
			t.Fatalf("%s: message %d after %d", note, n, last[note])
		}
		last[note] = n
		total++
	}
	if len(order) != 2 {
		t.Fatalf("messages from %v, want c's two incarnations", order)
	}
	t.Logf("%d numbered messages from %v, last numbers %v", total, order, last)
}
