package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
)

// runAsProgramEnv makes the test binary run main with the arguments in
// the variable, so that the tests start nodes as OS processes.
const runAsProgramEnv = "GOTP_EXAMPLE_CLUSTER_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(runAsProgramEnv); args != "" {
		os.Args = append([]string{"cluster"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	gotptest.VerifyTestMain(m)
}

// node is the program running as an OS process.
type node struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced on every line
	done  chan error
}

func startNode(t *testing.T, name string, args ...string) *node {
	t.Helper()
	args = append([]string{"-name", name, "-route", "127.0.0.1:0", "-heartbeat-timeout", "2s"}, args...)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runAsProgramEnv+"="+strings.Join(args, " "))
	stdout, err := cmd.StdoutPipe()
	gotptest.Must(t, err)
	cmd.Stderr = os.Stderr
	gotptest.Must(t, cmd.Start())
	nd := &node{name: name, cmd: cmd, added: make(chan struct{}), done: make(chan error, 1)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			nd.mu.Lock()
			nd.lines = append(nd.lines, sc.Text())
			close(nd.added)
			nd.added = make(chan struct{})
			nd.mu.Unlock()
		}
		nd.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-read
	})
	return nd
}

// wait returns the first line matching re, waiting up to d for it.
func (nd *node) wait(t *testing.T, d time.Duration, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		nd.mu.Lock()
		for _, l := range nd.lines {
			if m := rx.FindStringSubmatch(l); m != nil {
				nd.mu.Unlock()
				return m
			}
		}
		added := nd.added
		nd.mu.Unlock()
		select {
		case <-added:
		case err := <-nd.done:
			nd.done <- err
			t.Fatalf("%s exited (%v) before printing %q; it printed:\n%s", nd.name, err, re, nd.output())
		case <-deadline.C:
			t.Fatalf("%s did not print %q within %v; it printed:\n%s", nd.name, re, d, nd.output())
		}
	}
}

func (nd *node) output() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return strings.Join(nd.lines, "\n")
}

// Two OS processes form a cluster, call each other's greeter found
// through a group that spans them, and hear of each other's going: at once
// for a graceful stop, and for a kill -9 too (their direct link closes),
// well within the heartbeat timeout.
func TestTwoProgramsInOneCluster(t *testing.T) {
	const secret = "-token s3cret"
	a := startNode(t, "a", strings.Fields(secret)...)
	route := a.wait(t, 30*time.Second, `^a: up, routes at (nats-route://\S+)$`)[1]

	b := startNode(t, "b", append(strings.Fields(secret), "-peers", route)...)
	b.wait(t, 30*time.Second, `^b: a is up$`)
	a.wait(t, 30*time.Second, `^a: b is up$`)
	b.wait(t, 30*time.Second, `^b: a says: hello b, this is a$`)
	a.wait(t, 30*time.Second, `^a: b says: hello a, this is b$`)

	// A graceful stop: b leaves, and a hears of it long before a
	// heartbeat timeout would tell it.
	gotptest.Must(t, b.cmd.Process.Signal(syscall.SIGTERM))
	if err := gotptest.RecvWithin(t, 30*time.Second, b.done); err != nil {
		t.Fatalf("b exited with %v after SIGTERM:\n%s", err, b.output())
	}
	b.wait(t, time.Second, `^b: stopped$`)
	start := time.Now()
	a.wait(t, 30*time.Second, `^a: b is down$`)
	t.Logf("a heard of b's stop after %v", time.Since(start))

	// A node with the wrong secret is refused, loudly.
	intruder := startNode(t, "x", "-token", "wrong", "-peers", route)
	if err := gotptest.RecvWithin(t, 60*time.Second, intruder.done); err == nil {
		t.Fatalf("a node with the wrong token joined:\n%s", intruder.output())
	}

	// b again, as a new incarnation; then a dies without a word.
	b2 := startNode(t, "b", append(strings.Fields(secret), "-peers", route)...)
	b2.wait(t, 30*time.Second, `^b: a says: hello b, this is a$`)
	gotptest.Must(t, a.cmd.Process.Kill())
	start = time.Now()
	b2.wait(t, 30*time.Second, `^b: a is down$`)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("b heard of a's death after %v: the closed link should tell before the heartbeat timeout (2s)", took)
	} else {
		t.Logf("b heard of a's kill -9 after %v", took)
	}
	gotptest.Must(t, b2.cmd.Process.Signal(syscall.SIGTERM))
	if err := gotptest.RecvWithin(t, 30*time.Second, b2.done); err != nil {
		t.Fatalf("b exited with %v after SIGTERM:\n%s", err, b2.output())
	}
}
