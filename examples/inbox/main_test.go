package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
)

// runAsProgramEnv makes the test binary run main with the arguments in
// the variable, so the tests can start real instances as OS processes.
const runAsProgramEnv = "GOTP_EXAMPLE_INBOX_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(runAsProgramEnv); args != "" {
		os.Args = append([]string{"inbox"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	gotptest.VerifyTestMain(m)
}

// backend is where a test's tables live.
type backend struct {
	flags []string // -db FILE or -postgres URL, and -table
	cfg   config
}

func sqliteBackend(t *testing.T) backend {
	path := filepath.Join(t.TempDir(), "jobs.db")
	return backend{
		flags: []string{"-db", path},
		cfg:   config{sqlitePath: path, table: "thumbnail_jobs"},
	}
}

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

func postgresBackend(t *testing.T) backend {
	url := os.Getenv("POSTGRES_TEST_URL")
	if url == "" {
		t.Skip("POSTGRES_TEST_URL not set")
	}
	table := "ex_" + nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	b := backend{
		flags: []string{"-postgres", url, "-table", table},
		cfg:   config{postgresURL: url, table: table},
	}
	t.Cleanup(func() {
		db, err := openDB(context.Background(), b.cfg, nil)
		if err == nil {
			db.exec(context.Background(), `DROP TABLE IF EXISTS `+table+`, `+table+`_done, `+table+`_periodic, `+table+`_limits`)
			db.close()
		}
	})
	db, err := openDB(gotptest.Context(t), b.cfg, nil)
	gotptest.Must(t, err)
	defer db.close()
	gotptest.Must(t, db.exec(gotptest.Context(t), `DROP TABLE IF EXISTS `+table+`, `+table+`_done`))
	return b
}

// command runs one command of the program in this process.
func command(t *testing.T, b backend, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	c := b.cfg
	c.instance, c.workers, c.lease, c.stopTimeout, c.logLevel = "test", 1, time.Minute, time.Second, 8
	if err := run(gotptest.Context(t), c, args, &out); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out.String()
}

// rendered returns how many jobs have a result, and checks that each job
// of the table's ids 1..count has exactly one.
func rendered(t *testing.T, b backend) (done int64, byInstance map[string]int) {
	t.Helper()
	db, err := openDB(gotptest.Context(t), b.cfg, nil)
	gotptest.Must(t, err)
	defer db.close()
	done, err = db.countDone(gotptest.Context(t))
	gotptest.Must(t, err)
	byInstance = map[string]int{}
	q := `SELECT instance, count(*) FROM ` + db.table + ` GROUP BY instance`
	add := func(name string, k int) { byInstance[name] = k }
	if db.pg != nil {
		rows, err := db.pg.Query(gotptest.Context(t), q)
		gotptest.Must(t, err)
		defer rows.Close()
		for rows.Next() {
			var name string
			var k int
			gotptest.Must(t, rows.Scan(&name, &k))
			add(name, k)
		}
	} else {
		rows, err := db.sqlite.QueryContext(gotptest.Context(t), q)
		gotptest.Must(t, err)
		defer rows.Close()
		for rows.Next() {
			var name string
			var k int
			gotptest.Must(t, rows.Scan(&name, &k))
			add(name, k)
		}
	}
	return done, byInstance
}

// instance is the program running "work" as an OS process.
type instance struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan error
}

func startInstance(t *testing.T, b backend, name string, flags ...string) *instance {
	t.Helper()
	args := append(append(append([]string{}, b.flags...), "-name", name, "-log", "ERROR"), flags...)
	args = append(args, "work")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), runAsProgramEnv+"="+strings.Join(args, " "))
	stdout, err := cmd.StdoutPipe()
	gotptest.Must(t, err)
	cmd.Stderr = os.Stderr
	in := &instance{name: name, cmd: cmd, done: make(chan error, 1)}
	gotptest.Must(t, cmd.Start())
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			in.mu.Lock()
			in.out.WriteString(sc.Text() + "\n")
			in.mu.Unlock()
			if first {
				close(started)
				first = false
			}
		}
		if first {
			close(started)
		}
		in.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-started
	})
	gotptest.Recv(t, started)
	return in
}

func (in *instance) output() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.out.String()
}

// stop sends SIGTERM and returns how many jobs the instance says it handled.
func (in *instance) stop(t *testing.T) int {
	t.Helper()
	gotptest.Must(t, in.cmd.Process.Signal(syscall.SIGTERM))
	if err := gotptest.RecvWithin(t, 30*time.Second, in.done); err != nil {
		t.Fatalf("%s exited with %v after SIGTERM; output:\n%s", in.name, err, in.output())
	}
	var k int
	for _, line := range strings.Split(in.output(), "\n") {
		if _, err := fmt.Sscanf(line, in.name+": stopped, handled %d jobs", &k); err == nil {
			return k
		}
	}
	t.Fatalf("%s said nothing of what it handled:\n%s", in.name, in.output())
	return 0
}

func waitRendered(t *testing.T, b backend, want int64) {
	t.Helper()
	gotptest.EventuallyWithin(t, 60*time.Second, fmt.Sprintf("%d jobs rendered", want), func() bool {
		done, _ := rendered(t, b)
		return done == want
	})
}

// The whole program in one process: publish, work until every job is
// rendered, stop, stats.
func TestPublishWorkStats(t *testing.T) {
	b := sqliteBackend(t)
	if got := command(t, b, "publish", "30"); got != "published 30 jobs\n" {
		t.Fatalf("publish said %q", got)
	}
	ctx, cancel := context.WithCancel(gotptest.Context(t))
	c := b.cfg
	c.instance, c.workers, c.lease, c.work, c.stopTimeout, c.logLevel = "solo", 4, time.Minute, time.Millisecond, 5*time.Second, 8
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, []string{"work"}, &out) }()
	waitRendered(t, b, 30)
	cancel()
	gotptest.Must(t, gotptest.Recv(t, done))
	if !strings.Contains(out.String(), "solo: stopped, handled 30 jobs") {
		t.Fatalf("work said %q", out.String())
	}
	if got := command(t, b, "stats"); got != "ready 0, in work 0, delayed 0, dead 0; rendered 30\n" {
		t.Fatalf("stats said %q", got)
	}
}

func TestBadCommand(t *testing.T) {
	b := sqliteBackend(t)
	c := b.cfg
	c.instance = "x"
	for _, args := range [][]string{nil, {"publish", "many"}, {"publish", "0"}, {"dance"}} {
		if err := run(gotptest.Context(t), c, args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// Several instances as OS processes on one table: every job is rendered
// exactly once, and each instance stops gracefully on SIGTERM.
func TestInstancesShareATable(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(*testing.T) backend
		k    int
	}{
		{"sqlite", sqliteBackend, 2},
		{"postgres", postgresBackend, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b(t)
			command(t, b, "stats") // creates the tables before the instances race to
			var ins []*instance
			for i := range tc.k {
				ins = append(ins, startInstance(t, b, fmt.Sprintf("i%d", i), "-work", "2ms"))
			}
			command(t, b, "publish", "200")
			waitRendered(t, b, 200)
			total := 0
			for _, in := range ins {
				total += in.stop(t)
			}
			done, by := rendered(t, b)
			t.Logf("rendered by instance: %v", by)
			if done != 200 || total != 200 {
				t.Fatalf("%d jobs rendered, instances say they handled %d; want 200 and 200", done, total)
			}
		})
	}
}

// An instance killed with SIGKILL in the middle of its work loses nothing:
// its jobs go back to the table when their lease runs out, another
// instance renders them, and each is recorded once.
func TestKilledInstanceLosesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(*testing.T) backend
	}{
		{"sqlite", sqliteBackend},
		{"postgres", postgresBackend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b(t)
			command(t, b, "publish", "40")
			victim := startInstance(t, b, "victim", "-work", "300ms", "-lease", "2s", "-workers", "4")
			gotptest.EventuallyWithin(t, 30*time.Second, "the victim to render a job", func() bool {
				done, _ := rendered(t, b)
				return done > 0
			})
			gotptest.Must(t, victim.cmd.Process.Kill())
			if err := gotptest.Recv(t, victim.done); err == nil {
				t.Fatal("the victim exited normally after SIGKILL")
			}
			survivor := startInstance(t, b, "survivor", "-work", "1ms")
			waitRendered(t, b, 40)
			// The jobs the victim rendered but did not ack are still leased
			// to it: the survivor takes them when the lease runs out, renders
			// them again (recorded once) and acks them.
			gotptest.EventuallyWithin(t, 30*time.Second, "an empty table", func() bool {
				return strings.HasPrefix(command(t, b, "stats"), "ready 0, in work 0,")
			})
			survivor.stop(t)
			if got := command(t, b, "stats"); got != "ready 0, in work 0, delayed 0, dead 0; rendered 40\n" {
				t.Fatalf("stats said %q", got)
			}
		})
	}
}
