package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// progEnv, when set, makes the test binary run the program itself (run
// with the binary's arguments) instead of the tests: the tests start the
// program as a child process this way, with real signals, a real exit
// status and its real log.
const progEnv = "GOTP_CHAT_TEST_RUN_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(progEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// program is one run of cmd/chat as a child process.
type program struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *logLines
	done chan struct{} // closed when the child has exited and Wait returned
	err  error         // Wait's error, once done is closed

	tcp, http string // the addresses it logged
	token     string // the observer's token, if any
}

// logLines collects the child's stderr, line by line.
type logLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // a token each time a line arrives
}

func (l *logLines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.partial = append(l.partial, b...)
	for {
		i := slices.Index(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// startProgram runs cmd/chat with args and, unless args says otherwise,
// loopback ports chosen by the kernel; it waits for the addresses it logs.
func startProgram(t *testing.T, args ...string) *program {
	t.Helper()
	p := launch(t, append([]string{"-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0"}, args...)...)
	tcp := p.waitLog(`msg="chat: line protocol listening" tcp=(\S+)`)
	web := p.waitLog(`msg="chat: web page listening" http=http://(\S+)/ observer=`)
	p.tcp, p.http = tcp[1], web[1]
	return p
}

// launch runs cmd/chat with exactly args.
func launch(t *testing.T, args ...string) *program {
	t.Helper()
	return launchEnv(t, nil, args...)
}

// launchEnv runs cmd/chat with exactly args, and env (KEY=value) added to
// the test's environment.
func launchEnv(t *testing.T, env []string, args ...string) *program {
	t.Helper()
	return launchWith(t, env, nil, args...)
}

// launchWith runs cmd/chat with exactly args, under the command wrap (such
// as strace and its flags) if there is one, and env added to the test's
// environment.
func launchWith(t *testing.T, env, wrap []string, args ...string) *program {
	t.Helper()
	argv := append(append(slices.Clone(wrap), os.Args[0]), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// The secrets' variables come from env only, never from the
	// environment the tests run in.
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, envObserverToken+"=") || strings.HasPrefix(kv, envClusterToken+"=")
	})
	cmd.Env = append(append(base, progEnv+"=1"), env...)
	log := &logLines{changed: make(chan struct{}, 1)}
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &program{t: t, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("program log:\n%s", strings.Join(log.all(), "\n"))
		}
	})
	return p
}

// waitLog waits for a log line matching re and returns its submatches.
func (p *program) waitLog(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(30 * time.Second)
	for {
		for _, l := range p.log.all() {
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		select {
		case <-p.log.changed:
		case <-p.done:
			for _, l := range p.log.all() {
				if m := rx.FindStringSubmatch(l); m != nil {
					return m
				}
			}
			p.t.Fatalf("the program exited (%v) without logging %s", p.err, re)
		case <-deadline:
			p.t.Fatalf("no log line %s", re)
		}
	}
}

// exit waits for the program to end and returns its exit status.
func (p *program) exit() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("the program did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *program) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// httpClient returns a client with a transport of its own, closed at the
// end of the test (goleak would see its idle connections otherwise).
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// lineClient speaks the TCP line protocol.
type lineClient struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialLine(t *testing.T, addr string) *lineClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineClient{t: t, c: c, rd: bufio.NewReader(c)}
}

func (c *lineClient) line() string {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := c.rd.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read: %v (%q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

func (c *lineClient) expect(cmd, want string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(cmd + "\n")); err != nil {
		c.t.Fatal(err)
	}
	if got := c.line(); got != want {
		c.t.Fatalf("%s → %q, want %q", cmd, got, want)
	}
}

// snapshot is the part of the observer's JSON the tests read.
type snapshot struct {
	Processes []struct {
		PID    string `json:"pid"`
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"processes"`
	Supervisors []supTree `json:"supervisors"`
}

type supTree struct {
	PID      string `json:"pid"`
	Name     string `json:"name"`
	Restarts uint64 `json:"restarts"`
	Children []struct {
		ID       string   `json:"id"`
		PID      string   `json:"pid"`
		Restarts int      `json:"restarts"`
		Sub      *supTree `json:"sub"`
	} `json:"children"`
}

// find returns the tree of the supervisor named name, at any depth.
func find(trees []supTree, name string) *supTree {
	for i := range trees {
		if trees[i].Name == name {
			return &trees[i]
		}
		for _, c := range trees[i].Children {
			if c.Sub != nil {
				if t := find([]supTree{*c.Sub}, name); t != nil {
					return t
				}
			}
		}
	}
	return nil
}

func (p *program) snapshot(c *http.Client) (snapshot, error) {
	var s snapshot
	req, err := http.NewRequest(http.MethodGet, "http://"+p.http+"/observer/api/snapshot", nil)
	if err != nil {
		return s, err
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("snapshot: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// kill asks the observer to kill pid, as its page does (JSON, with the
// token), and returns the status and the body of the answer.
func (p *program) kill(c *http.Client, pid string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+p.http+"/observer/api/kill", strings.NewReader(`{"pid":`+strconv.Quote(pid)+`}`))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		p.t.Fatalf("kill %s: %v", pid, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// pidOf returns the PID of the process registered as name, or "".
func (s snapshot) pidOf(name string) string {
	for _, p := range s.Processes {
		if p.Name == name {
			return p.PID
		}
	}
	return ""
}

func TestProgramServesAndStopsCleanly(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fresh", "data") // does not exist yet
			p := startProgram(t, "-data", dir)
			hc := httpClient(t)

			// TCP: two users talk.
			ana, bob := dialLine(t, p.tcp), dialLine(t, p.tcp)
			ana.expect("CONNECT ana", "OK")
			bob.expect("CONNECT bob", "OK")
			ana.expect("SEND bob hi from the program test", "SENT bob")
			if got := bob.line(); got != "MSG ana hi from the program test" {
				t.Fatalf("bob got %q", got)
			}
			ana.expect("WHO", "ONLINE 2 ana bob")

			// HTTP: the page, and the observer with the tree.
			if code, body := get(t, hc, "http://"+p.http+"/"); code != http.StatusOK || !strings.Contains(body, "/ws") {
				t.Fatalf("GET / = %d %.80q", code, body)
			}
			if code, body := get(t, hc, "http://"+p.http+"/observer/"); code != http.StatusOK || !strings.Contains(body, "chat.root") {
				t.Fatalf("GET /observer/ = %d, chat.root shown: %v", code, strings.Contains(body, "chat.root"))
			}
			s, err := p.snapshot(hc)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"chat.root", "chat.online", "chat.history", "chat.connections"} {
				if s.pidOf(name) == "" {
					t.Errorf("observer snapshot has no process %s", name)
				}
			}
			// Prometheus metrics of the running chat: the observer's, and
			// /metrics with the Go runtime's and the process's beside them.
			code, metrics := get(t, hc, "http://"+p.http+"/observer/metrics")
			if code != http.StatusOK {
				t.Fatalf("GET /observer/metrics = %d", code)
			}
			for _, want := range []string{
				`gotp_registry_entries{registry="chat.users"} 2`,
				`gotp_pg_members{scope="chat"} 2`,
				`gotp_supervisor_restarts_total{supervisor="chat.root"} 0`,
				`gotp_processes{behaviour="server *chat.conn"} 2`,
				"gotp_mailbox_length_bucket",
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			code, all := get(t, hc, "http://"+p.http+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("GET /metrics = %d", code)
			}
			for _, want := range []string{`gotp_pg_members{scope="chat"} 2`, "go_goroutines ", "process_cpu_seconds_total ",
				"chat_throttled_commands_total 0", "chat_slow_consumers_total 0"} {
				if !strings.Contains(all, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "history.db")); err != nil {
				t.Fatalf("history store: %v", err)
			}

			p.signal(sig)
			if code := p.exit(); code != 0 {
				t.Fatalf("exit status %d after %v, want 0", code, sig)
			}
			logs := p.log.all()
			p.waitLog(`msg="chat: stopping"`)
			p.waitLog(`msg="chat: stopped"`)
			for _, l := range logs {
				if strings.Contains(l, "level=ERROR") || strings.Contains(l, "panic") || strings.Contains(l, "DATA RACE") {
					t.Errorf("unclean log line: %s", l)
				}
			}
			// The clients saw their connections closed.
			bob.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if l, err := bob.rd.ReadString('\n'); err == nil {
				t.Fatalf("bob read %q after the program stopped", l)
			}

			// The restart scenario of the chat's design, at the program's level: a new run
			// on the same data directory still has the history.
			p2 := startProgram(t, "-data", dir)
			bob2 := dialLine(t, p2.tcp)
			bob2.expect("CONNECT bob", "OK")
			bob2.expect("HISTORY ana", "HISTORY 1")
			if got := bob2.line(); got != "ana hi from the program test" {
				t.Fatalf("history after the restart: %q", got)
			}
			p2.signal(syscall.SIGTERM)
			if code := p2.exit(); code != 0 {
				t.Fatalf("second run: exit status %d, want 0", code)
			}
		})
	}
}

// A failure that repeats beyond the root's intensity ends the program with
// status 1 and a clear log line, rather than leaving it half-dead.
func TestProgramGivesUpWhenFailuresRepeat(t *testing.T) {
	p := startProgram(t, "-data", t.TempDir(), "-observer-kill", "-observer-token", "s3cret")
	p.token = "s3cret"
	hc := httpClient(t)
	kill := func(pid string) {
		t.Helper()
		if code, body := p.kill(hc, pid); code != http.StatusOK || !strings.Contains(body, pid) {
			t.Fatalf("kill %s: %d %s", pid, code, body)
		}
	}
	// Intensity 3 in 5 s: three kills are restarted, the fourth is one
	// too many.
	var last string
	for i := range 4 {
		var pid string
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := p.snapshot(hc)
			if err != nil {
				t.Fatalf("kill %d: snapshot: %v", i, err)
			}
			if pid = s.pidOf("chat.online"); pid != "" && pid != last {
				// The observer counts the restarts so far, on the root and
				// on its child.
				root := find(s.Supervisors, "chat.root")
				if root == nil || root.Restarts != uint64(i) || len(root.Children) != 3 || root.Children[0].ID != "online" || root.Children[0].Restarts != i {
					t.Fatalf("kill %d: chat.root in the observer = %+v, want %d restarts of online", i, root, i)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: no new chat.online process (last %s)", i, last)
			}
			time.Sleep(10 * time.Millisecond) // the restart has no signal outside the process
		}
		kill(pid)
		last = pid
	}
	if code := p.exit(); code != 1 {
		t.Fatalf("exit status %d, want 1", code)
	}
	m := p.waitLog(`level=ERROR msg="chat: giving up" err="(.*)"`)
	if !strings.Contains(m[1], "intensity") {
		t.Fatalf("the giving-up line does not say why: %s", m[0])
	}
	if slices.ContainsFunc(p.log.all(), func(l string) bool { return strings.Contains(l, `msg="chat: stopped"`) }) {
		t.Fatal(`"chat: stopped" logged by a program that gave up`)
	}
}

func TestProgramBadStart(t *testing.T) {
	t.Run("flag", func(t *testing.T) {
		p := launch(t, "-no-such-flag")
		if code := p.exit(); code != 2 {
			t.Fatalf("exit status %d, want 2", code)
		}
		p.waitLog(`flag provided but not defined: -no-such-flag`)
	})
	t.Run("history sync", func(t *testing.T) {
		p := launch(t, "-history-sync", "off", "-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0")
		if code := p.exit(); code != 2 {
			t.Fatalf("exit status %d, want 2", code)
		}
		p.waitLog(`level=ERROR msg="chat: -history-sync" err=".*want full or normal`)
	})
	t.Run("help", func(t *testing.T) {
		p := launch(t, "-h")
		if code := p.exit(); code != 0 {
			t.Fatalf("exit status %d, want 0", code)
		}
		p.waitLog(`-observer-kill`)
	})
	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := launch(t, "-data", t.TempDir(), "-tcp", ln.Addr().String(), "-http", "127.0.0.1:0")
		if code := p.exit(); code != 1 {
			t.Fatalf("exit status %d, want 1", code)
		}
		p.waitLog(`level=ERROR msg="chat: cannot start" err=".*listen tcp.*address already in use`)
	})
	t.Run("data dir is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		p := launch(t, "-data", f, "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0")
		if code := p.exit(); code != 1 {
			t.Fatalf("exit status %d, want 1", code)
		}
		p.waitLog(`level=ERROR msg="chat: cannot start" err=.*data directory`)
	})
}
