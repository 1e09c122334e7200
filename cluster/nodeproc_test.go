package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// Node processes: this test binary re-executed as one cluster node (with
// nodeProcEnv set, TestMain calls nodeProcMain instead of running tests),
// so that tests and benchmarks can put nodes in processes of their own
// (and in network namespaces of their own), kill them with SIGKILL, and
// measure what users deploy. The parent drives a node process with one
// command per line on its stdin; each command answers one line on its
// stdout. The node exits when its stdin closes (the parent died or was
// done), so a node process never outlives its test.
const nodeProcEnv = "GOTP_CLUSTER_NODE_PROC"

// nodeProcConfig configures a node process (JSON in nodeProcEnv).
type nodeProcConfig struct {
	Name              string
	Cluster           string
	RouteListen       string
	DirectListen      string
	Peers             []string
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	NoDirect          bool
	BusyPoll          time.Duration
}

// countTo tells a counter how many messages to expect and whom to tell.
type countTo struct {
	N      int
	Report gotp.PID
}

// counted is the counter's report.
type counted struct{ N int }

type adderServer struct{ server.Defaults }

func (adderServer) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	if n, ok := req.(int); ok {
		return n + 1, nil
	}
	return req, nil
}

// startCounter starts a process that counts the messages it gets after a
// countTo and reports when it has seen N.
func startCounter(n *gotp.Node) (gotp.PID, error) {
	var want, got int
	var report gotp.PID
	return n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if m, ok := msg.(countTo); ok {
			want, got, report = m.N, 0, m.Report
			return false, nil
		}
		got++
		if got == want {
			p.Send(report, counted{N: got})
		}
		return false, nil
	}), nil, gotp.Resident())
}

func nodeProcMain() int {
	var cfg nodeProcConfig
	if err := json.Unmarshal([]byte(os.Getenv(nodeProcEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "node process:", err)
		return 2
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "node process %s: %s: %v\n", cfg.Name, what, err)
		return 2
	}
	if dir := os.Getenv("GOTP_NODE_PROC_PROFILE"); dir != "" { // go tool pprof the node processes of a benchmark
		f, err := os.Create(filepath.Join(dir, cfg.Name+".cpu"))
		if err != nil {
			return fail("profile", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail("profile", err)
		}
		defer pprof.StopCPUProfile()
	}
	codec := NewCodec()
	for _, err := range []error{
		Register[Ping](codec, "test.Ping"), Register[Box](codec, "test.Box"),
		Register[countTo](codec, "test.countTo"), Register[counted](codec, "test.counted"),
		codec.RegisterError("test.errBoom", errBoom),
	} {
		if err != nil {
			return fail("codec", err)
		}
	}
	base := runtime.NumGoroutine()
	n := gotp.NewNode(gotp.Options{Name: cfg.Name})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Join(ctx, n, Options{
		Cluster: cfg.Cluster, RouteListen: cfg.RouteListen, DirectListen: cfg.DirectListen, Peers: cfg.Peers,
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout,
		NoDirect: cfg.NoDirect, BusyPoll: cfg.BusyPoll, Codec: codec,
	})
	if err != nil {
		return fail("join", err)
	}
	if _, err := server.Start(ctx, n, adderServer{}, server.Named("adder")); err != nil {
		return fail("adder", err)
	}
	ctr, err := startCounter(n)
	if err == nil {
		err = n.Register("counter", ctr)
	}
	if err != nil {
		return fail("counter", err)
	}
	scope, err := pg.Start(ctx, n, "mp", pg.Options{})
	if err == nil {
		err = c.Replicate(scope)
	}
	if err != nil {
		return fail("pg", err)
	}
	// The benchmarks' NATS baseline: a plain NATS echo on this node's
	// connection.
	if _, err := c.nc.Subscribe("bench.echo."+cfg.Name, func(m *nats.Msg) { _ = c.nc.Publish(m.Reply, m.Data) }); err != nil {
		return fail("echo", err)
	}
	_ = c.nc.Flush()
	np := &nodeProcState{n: n, c: c, scope: scope, lost: map[string]string{}}
	fmt.Printf("ready %s\n", c.RouteURL())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		reply := np.command(strings.Fields(in.Text()))
		fmt.Println(reply)
		if reply == "bye" {
			break
		}
	}
	stop, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := n.Stop(stop); err != nil {
		fmt.Println("stop", err)
		return 1
	}
	// Nothing the node started may outlive it: the goroutines are back to
	// what the process had before Join.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("stopped goroutines=%d base=%d\n", runtime.NumGoroutine(), base)
	return 0
}

type nodeProcState struct {
	n     *gotp.Node
	c     *Cluster
	scope *pg.Scope

	mu       sync.Mutex
	lost     map[string]string // name → the exit reason its holder got
	received []string
}

// holder starts a process that traps exits and registers name in space;
// an exit signal it gets is recorded in s.lost.
func (s *nodeProcState) holder(space, name string) (gotp.PID, error) {
	ready := make(chan error, 1)
	pid, err := s.n.Spawn(func(p *gotp.Process) error {
		p.TrapExit(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.c.Names(space).Register(ctx, name, p.Self())
		cancel()
		ready <- err
		if err != nil {
			return nil
		}
		for {
			m, err := p.Receive(context.Background())
			if err != nil {
				return err
			}
			if e, ok := m.(gotp.Exit); ok {
				s.mu.Lock()
				s.lost[name] = e.Reason.Error()
				if errors.Is(e.Reason, ErrNameConflict) {
					s.lost[name] = "conflict " + e.Reason.Error()
				}
				s.mu.Unlock()
				if e.From.IsZero() && !errors.Is(e.Reason, ErrNameConflict) {
					return e.Reason // the node stops
				}
			}
		}
	})
	if err != nil {
		return gotp.PID{}, err
	}
	return pid, <-ready
}

// command runs one command of the parent and returns its one-line answer.
func (s *nodeProcState) command(args []string) string {
	if len(args) == 0 {
		return "error empty command"
	}
	switch args[0] {
	case "quit":
		return "bye"
	case "nodes":
		var names []string
		for _, ni := range s.c.Nodes() {
			names = append(names, ni.Name)
		}
		return "nodes " + strings.Join(names, ",")
	case "join": // join <group> [k]: k processes join group
		k := 1
		if len(args) > 2 {
			k, _ = strconv.Atoi(args[2])
		}
		var pids []string
		for range k {
			pid, err := s.member(args[1])
			if err != nil {
				return "error " + err.Error()
			}
			pids = append(pids, pid.String())
		}
		return "ok " + strings.Join(pids, ",")
	case "members": // members <group>: every node's members
		var pids []string
		for _, p := range members(s.scope, args[1]) {
			pids = append(pids, p.String())
		}
		return fmt.Sprintf("members %d %s", len(pids), strings.Join(pids, ","))
	case "register": // register <space> <name>: a process that traps exits takes name
		pid, err := s.holder(args[1], args[2])
		if err != nil {
			return "error " + err.Error()
		}
		return "ok " + pid.String()
	case "register-try": // the same, reporting a refusal instead of failing
		pid, err := s.holder(args[1], args[2])
		if err != nil {
			return "refused " + err.Error()
		}
		return "ok " + pid.String()
	case "holder": // holder <name>: what the holder of name was told
		s.mu.Lock()
		defer s.mu.Unlock()
		if r, ok := s.lost[args[1]]; ok {
			return "lost " + r
		}
		return "holding"
	case "whereis": // whereis <space> <name>
		if pid, ok := s.c.Names(args[1]).Whereis(args[2]); ok {
			return "at " + pid.String()
		}
		return "none"
	case "sender": // sender <pid>: a process that sends to pid a numbered Ping every millisecond
		to, err := gotp.ParsePID(args[1])
		if err != nil {
			return "error " + err.Error()
		}
		note := fmt.Sprintf("%s/%d", s.n.Name(), s.n.Creation())
		pid, err := s.n.Spawn(func(p *gotp.Process) error {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for seq := 1; ; seq++ {
				select {
				case <-t.C:
					p.Send(to, Ping{N: seq, Note: note})
				case <-p.Done():
					return nil
				}
			}
		})
		if err != nil {
			return "error " + err.Error()
		}
		return "ok " + pid.String()
	case "send": // send <pid> <text>: one message
		to, err := gotp.ParsePID(args[1])
		if err != nil {
			return "error " + err.Error()
		}
		s.n.Send(to, args[2])
		return "ok"
	case "inbox": // inbox: a process whose messages "received" reports
		pid, err := s.n.SpawnHandler(gotp.HandlerFunc(func(_ *gotp.Process, msg any) (bool, error) {
			s.mu.Lock()
			s.received = append(s.received, fmt.Sprint(msg))
			s.mu.Unlock()
			return false, nil
		}), nil)
		if err != nil {
			return "error " + err.Error()
		}
		return "ok " + pid.String()
	case "received":
		s.mu.Lock()
		defer s.mu.Unlock()
		return fmt.Sprintf("received %d %s", len(s.received), strings.Join(s.received, "|"))
	case "stats":
		return fmt.Sprintf("stats procs=%d goroutines=%d", s.n.ProcessCount(), runtime.NumGoroutine())
	case "watch": // watch <group> <pid>: a Ping to pid for every join seen
		to, err := gotp.ParsePID(args[2])
		if err != nil {
			return "error " + err.Error()
		}
		if err := s.watch(args[1], to); err != nil {
			return "error " + err.Error()
		}
		return "ok"
	}
	return "error unknown command " + args[0]
}

// member starts a process that joins group and stays.
func (s *nodeProcState) member(group string) (gotp.PID, error) {
	joined := make(chan error, 1)
	pid, err := s.n.Spawn(func(p *gotp.Process) error {
		inst, err := s.scope.Open(p)
		if err == nil {
			err = inst.Join(group)
		}
		joined <- err
		if err != nil {
			return err
		}
		_, err = p.Receive(context.Background())
		return err
	})
	if err != nil {
		return gotp.PID{}, err
	}
	return pid, <-joined
}

func (s *nodeProcState) watch(group string, to gotp.PID) error {
	ready := make(chan error, 1)
	_, err := s.n.Spawn(func(p *gotp.Process) error {
		inst, err := s.scope.Open(p)
		if err != nil {
			ready <- err
			return err
		}
		sub, _, err := inst.Monitor(group)
		ready <- err
		if err != nil {
			return err
		}
		defer sub.Close()
		for {
			select {
			case ev, ok := <-sub.C():
				if !ok {
					return nil
				}
				if ev.Kind == pg.MemberJoined {
					p.Send(to, Ping{Note: group})
				}
			case <-p.Done():
				return nil
			}
		}
	})
	if err != nil {
		return err
	}
	return <-ready
}

// nodeProc is the parent's handle on a node process.
type nodeProc struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	route string
	mu    sync.Mutex // serialises commands
	done  chan struct{}
}

// startNodeProc starts a node process; with netns set it runs in that
// network namespace (ip netns exec). It is killed at the end of the test.
func startNodeProc(t testing.TB, netns string, cfg nodeProcConfig) *nodeProc {
	t.Helper()
	if cfg.Cluster == "" {
		cfg.Cluster = "test"
	}
	js, err := json.Marshal(cfg)
	gotptest.Must(t, err)
	var cmd *exec.Cmd
	if netns != "" {
		cmd = exec.Command("ip", "netns", "exec", netns, os.Args[0], "-test.run=^$")
	} else {
		cmd = exec.Command(os.Args[0], "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), nodeProcEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	gotptest.Must(t, err)
	out, err := cmd.StdoutPipe()
	gotptest.Must(t, err)
	gotptest.Must(t, cmd.Start())
	np := &nodeProc{t: t, name: cfg.Name, cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	go func() { // ends when the process's stdout closes
		defer close(np.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20) // "received" answers are long
		for sc.Scan() {
			np.lines <- sc.Text()
		}
	}()
	go func() { // ends when the process exits
		_ = cmd.Wait()
		close(np.done)
	}()
	t.Cleanup(np.kill)
	select {
	case line, ok := <-np.lines:
		if !ok || !strings.HasPrefix(line, "ready") {
			t.Fatalf("node process %s said %q", cfg.Name, line)
		}
		np.route = strings.TrimSpace(strings.TrimPrefix(line, "ready"))
	case <-time.After(60 * time.Second):
		t.Fatalf("node process %s not ready", cfg.Name)
	}
	return np
}

// do sends one command and returns its answer.
func (np *nodeProc) do(cmd string) string {
	np.t.Helper()
	np.mu.Lock()
	defer np.mu.Unlock()
	if _, err := io.WriteString(np.stdin, cmd+"\n"); err != nil {
		np.t.Fatalf("node process %s: %v", np.name, err)
	}
	select {
	case line, ok := <-np.lines:
		if !ok {
			np.t.Fatalf("node process %s ended", np.name)
		}
		if strings.HasPrefix(line, "error") {
			np.t.Fatalf("node process %s: %s", np.name, line)
		}
		return line
	case <-time.After(30 * time.Second):
		np.t.Fatalf("node process %s did not answer %q", np.name, cmd)
		return ""
	}
}

// quit stops the node (Node.Stop) and fails the test if the node process
// has goroutines left that it did not have before Join.
func (np *nodeProc) quit() {
	np.t.Helper()
	if got := np.do("quit"); got != "bye" {
		np.t.Fatalf("node process %s: quit: %q", np.name, got)
	}
	select {
	case line := <-np.lines:
		var g, base int
		if _, err := fmt.Sscanf(line, "stopped goroutines=%d base=%d", &g, &base); err != nil {
			np.t.Fatalf("node process %s: %q", np.name, line)
		}
		if g > base {
			np.t.Errorf("node process %s: %d goroutines after Node.Stop, %d before Join", np.name, g, base)
		}
	case <-time.After(30 * time.Second):
		np.t.Fatalf("node process %s did not stop", np.name)
	}
	<-np.done
}

// kill ends the process with SIGKILL (its connections close at once) and
// waits for it.
func (np *nodeProc) kill() {
	_ = np.cmd.Process.Signal(syscall.SIGKILL)
	<-np.done
	np.stdin.Close()
	for range np.lines {
	}
}
