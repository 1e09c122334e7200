package chat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testService struct {
	*Service
	n   *gotp.Node
	dir string
}

func quietNode(name string) *gotp.Node {
	return gotp.NewNode(gotp.Options{Name: name, Logger: testLogger()})
}

// startService runs a chat on a fresh node with its data in dir, TCP and
// HTTP on loopback ports, and stops it at the end of the test.
func startService(t *testing.T, dir string) *testService {
	t.Helper()
	n := quietNode("chat")
	svc, err := Start(context.Background(), n, Config{DataDir: dir, TCPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testService{Service: svc, n: n, dir: dir}
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testService) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Stop(ctx); err != nil {
		t.Errorf("service stop: %v", err)
	}
	if err := ts.n.Stop(ctx); err != nil {
		t.Errorf("node stop: %v", err)
	}
}

type client struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dial(t *testing.T, ts *testService) *client {
	t.Helper()
	c, err := net.Dial("tcp", ts.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, rd: bufio.NewReader(c)}
}

func (c *client) send(line string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		c.t.Fatalf("write %q: %v", line, err)
	}
}

// line reads one line, failing the test after a generous deadline.
func (c *client) line() string {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := c.rd.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

// do sends a command and returns its one-line reply.
func (c *client) do(line string) string {
	c.t.Helper()
	c.send(line)
	return c.line()
}

func (c *client) expect(line, want string) {
	c.t.Helper()
	if got := c.do(line); got != want {
		c.t.Fatalf("%s → %q, want %q", line, got, want)
	}
}

func connect(t *testing.T, ts *testService, name string) *client {
	t.Helper()
	c := dial(t, ts)
	c.expect("CONNECT "+name, "OK")
	return c
}

// eventually retries check until it holds; used where the service has no
// signal to wait on (a restart by a supervisor), with a generous bound.
func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTreeMatchesTheDesign(t *testing.T) {
	ts := startService(t, t.TempDir())
	ctx := context.Background()
	root, err := supervisor.WhichChildren(ctx, ts.n, gotp.Name(rootName))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id  string
		typ supervisor.ChildType
	}{{"online", supervisor.Worker}, {"history", supervisor.Worker}, {"connections", supervisor.Supervisor}}
	if len(root) != len(want) {
		t.Fatalf("root children %+v", root)
	}
	for i, w := range want {
		c := root[i]
		if c.ID != w.id || c.Type != w.typ || c.Restart != supervisor.Permanent || c.State != supervisor.ChildRunning {
			t.Fatalf("root child %d = %+v, want %s %v permanent running", i, c, w.id, w.typ)
		}
	}
	info, _ := supervisor.Inspect(ts.n, gotp.Name(rootName))
	if info.Strategy != supervisor.OneForOne || info.Intensity != DefaultIntensity {
		t.Fatalf("root is %v with intensity %d", info.Strategy, info.Intensity)
	}
	a, b := connect(t, ts, "ana"), connect(t, ts, "bob")
	_, _ = a, b
	conns, err := supervisor.WhichChildren(ctx, ts.n, gotp.Name(connectionsName))
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 2 {
		t.Fatalf("connection supervisor has %d children, want 2", len(conns))
	}
	for _, c := range conns {
		if c.Restart != supervisor.Temporary || c.Type != supervisor.Worker {
			t.Fatalf("connection child %+v, want a temporary worker", c)
		}
	}
	ci, _ := supervisor.Inspect(ts.n, gotp.Name(connectionsName))
	if !ci.Dynamic {
		t.Fatal("connections is not a dynamic supervisor")
	}
}

func TestTwoUsersOverTCP(t *testing.T) {
	ts := startService(t, t.TempDir())
	anon := dial(t, ts)
	anon.expect("SEND bob hi", "ERROR not_connected")
	anon.expect("WHO", "ERROR not_connected")

	ana := connect(t, ts, "ana")
	bob := connect(t, ts, "bob")
	dial(t, ts).expect("CONNECT ana", "ERROR name_taken")
	ana.expect("CONNECT ana2", "ERROR already_connected")

	ana.expect("SEND bob olá, Bob! 👋", "SENT bob")
	if got := bob.line(); got != "MSG ana olá, Bob! 👋" {
		t.Fatalf("bob got %q", got)
	}
	bob.expect("SEND ana oi", "SENT ana")
	if got := ana.line(); got != "MSG bob oi" {
		t.Fatalf("ana got %q", got)
	}
	ana.expect("SEND carol hello", "ERROR unknown_recipient")

	ana.send("HISTORY bob")
	got := []string{ana.line(), ana.line(), ana.line()}
	want := []string{"HISTORY 2", "ana olá, Bob! 👋", "bob oi"}
	if !slices.Equal(got, want) {
		t.Fatalf("history = %q, want %q", got, want)
	}
	ana.expect("WHO", "ONLINE 2 ana bob")

	ana.expect("JOIN lobby", "OK")
	bob.expect("JOIN lobby", "OK")
	ana.expect("SAY lobby hi all", "OK")
	if got := ana.line(); got != "ROOM lobby ana hi all" {
		t.Fatalf("ana got %q", got)
	}
	if got := bob.line(); got != "ROOM lobby ana hi all" {
		t.Fatalf("bob got %q", got)
	}
	bob.expect("LEAVE lobby", "OK")
	bob.expect("LEAVE lobby", "ERROR not_member")
	ana.expect("SAY lobby only me", "OK")
	if got := ana.line(); got != "ROOM lobby ana only me" {
		t.Fatalf("ana got %q", got)
	}

	ana.expect("DANCE", "ERROR bad_command")
	ana.expect("SEND bob \xff\xfe", "ERROR bad_encoding")
	ana.expect("CONNECT", "ERROR bad_command")
	ana.expect("QUIT", "BYE")
	ana.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ana.rd.ReadString('\n'); err == nil {
		t.Fatal("connection still open after BYE")
	}
	eventually(t, "ana to go offline", func() bool { return bob.do("WHO") == "ONLINE 1 bob" })
}

func TestLineTooLongClosesOnlyThatConnection(t *testing.T) {
	ts := startService(t, t.TempDir())
	bob := connect(t, ts, "bob")
	evil := connect(t, ts, "evil")
	evil.send(strings.Repeat("x", MaxLine+10))
	if got := evil.line(); got != "ERROR line_too_long" {
		t.Fatalf("got %q", got)
	}
	evil.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := evil.rd.ReadString('\n'); err == nil {
		t.Fatal("connection still open after line_too_long")
	}
	eventually(t, "evil to go offline", func() bool { return bob.do("WHO") == "ONLINE 1 bob" })
	// A line of exactly MaxLine bytes is fine.
	bob.expect("SEND bob "+strings.Repeat("y", MaxLine-len("SEND bob ")), "SENT bob")
	if got := bob.line(); len(got) != len("MSG bob ")+MaxLine-len("SEND bob ") {
		t.Fatalf("long message came back with %d bytes", len(got))
	}
}

// The failure table of the chat's design (doc.go), one row per test.

func TestFailureConnectionCrashes(t *testing.T) {
	ts := startService(t, t.TempDir())
	bob := connect(t, ts, "bob")
	connect(t, ts, "ana")
	e, ok := ts.Users().Find("ana")
	if !ok {
		t.Fatal("ana not in the registry")
	}
	ts.n.Exit(e.PID, errors.New("crash"))
	eventually(t, "ana to go offline", func() bool { return bob.do("WHO") == "ONLINE 1 bob" })
	// The registry may see ana's exit before the connections' supervisor
	// has removed her child: wait for the supervisor, then check that no
	// child came back.
	count := func() int {
		conns, _ := supervisor.WhichChildren(context.Background(), ts.n, gotp.Name(connectionsName))
		return len(conns)
	}
	eventually(t, "the supervisor to remove ana's connection", func() bool { return count() == 1 })
	bob.expect("SEND ana hi", "ERROR unknown_recipient")
	if n := count(); n != 1 {
		t.Fatalf("%d connections after the crash, want 1 (temporary children are not restarted)", n)
	}
}

func TestFailureOnlineRegistryCrashes(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	ana.expect("JOIN lobby", "OK")
	old, _ := ts.n.Whereis(onlineName)
	ts.n.Exit(old, errors.New("crash"))
	eventually(t, "a new online registry", func() bool {
		pid, ok := ts.n.Whereis(onlineName)
		return ok && pid != old
	})
	// Connections notice and register again: both users are online, they
	// can talk, and ana is back in her room.
	eventually(t, "users to register again", func() bool { return bob.do("WHO") == "ONLINE 2 ana bob" })
	bob.expect("SEND ana still here?", "SENT ana")
	if got := ana.line(); got != "MSG bob still here?" {
		t.Fatalf("ana got %q", got)
	}
	bob.expect("SAY lobby knock knock", "ERROR not_joined")
	bob.expect("JOIN lobby", "OK")
	bob.expect("SAY lobby knock knock", "OK")
	if got := ana.line(); got != "ROOM lobby bob knock knock" {
		t.Fatalf("ana got %q", got)
	}
	dial(t, ts).expect("CONNECT ana", "ERROR name_taken")
}

func TestFailureHistoryOwnerCrashes(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	for i := range 3 {
		ana.expect(fmt.Sprintf("SEND bob m%d", i), "SENT bob")
		bob.line()
	}
	old, _ := ts.n.Whereis(historyName)
	if _, err := server.Call[any](context.Background(), ts.n, old, crashNow{}); err == nil {
		t.Fatal("crash call returned no error")
	}
	eventually(t, "a new history owner", func() bool {
		pid, ok := ts.n.Whereis(historyName)
		return ok && pid != old
	})
	bob.send("HISTORY ana")
	if got := bob.line(); got != "HISTORY 3" {
		t.Fatalf("history after the restart: %q", got)
	}
	for i := range 3 {
		if got := bob.line(); got != fmt.Sprintf("ana m%d", i) {
			t.Fatalf("message %d = %q", i, got)
		}
	}
}

func TestFailureRuntimeRestarts(t *testing.T) {
	dir := t.TempDir()
	ts := startService(t, dir)
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	ana.expect("SEND bob before the restart", "SENT bob")
	bob.line()
	ts.stop(t)

	ts2 := startService(t, dir)
	conns, _ := supervisor.WhichChildren(context.Background(), ts2.n, gotp.Name(connectionsName))
	if len(conns) != 0 {
		t.Fatalf("a fresh tree has %d connections", len(conns))
	}
	bob2 := connect(t, ts2, "bob")
	bob2.send("HISTORY ana")
	if got := bob2.line(); got != "HISTORY 1" {
		t.Fatalf("history after the runtime restart: %q", got)
	}
	if got := bob2.line(); got != "ana before the restart" {
		t.Fatalf("message = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "history.db")); err != nil {
		t.Fatal(err)
	}
}

func TestFailureRepeatsEscalates(t *testing.T) {
	ts := startService(t, t.TempDir())
	for i := 0; i <= DefaultIntensity; i++ {
		pid, ok := ts.n.Whereis(historyName)
		if !ok {
			break
		}
		ts.n.Exit(pid, errors.New("disk on fire"))
		if i < DefaultIntensity {
			eventually(t, "the history owner to restart", func() bool {
				p, ok := ts.n.Whereis(historyName)
				return ok && p != pid
			})
		}
	}
	select {
	case <-ts.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the root supervisor did not give up")
	}
	if err := ts.Err(); err == nil || !strings.Contains(err.Error(), "intensity") {
		t.Fatalf("Err = %v, want the escalation", err)
	}
	if ts.n.IsAlive(ts.Root()) {
		t.Fatal("root still alive")
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("CHAT_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}
