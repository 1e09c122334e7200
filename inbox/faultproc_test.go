package inbox_test

// Fault tests with real OS processes. The test binary re-executes itself as inbox
// instances (TestMain turns it into one when INBOX_FAULT_CHILD is set), drains a
// table with several of them, and meanwhile kills instances with SIGKILL, on SQLite
// stops one while another process holds the database's write lock, and on Postgres
// terminates every instance's backends (of this test's database only). Every handler
// execution is recorded outside the queue, in a log file every instance appends to
// (O_APPEND: each record is one write, which the kernel keeps whatever happens to the
// process; with fsync too in the full run). The parent then checks: no job lost, none
// acked twice, every re-run explained by a crash, a lost connection or a halted
// Stop, every fault hit jobs in work, and every Stop returned within its deadline
// plus 1 s.
//
// The normal suite runs a short version (300 jobs, 2 instances x 4 workers, two or
// three faults). The full run (10,000 jobs, 4 instances x 8 workers; on SQLite 10
// kills, on Postgres 4 kills and 6 terminations, of one instance's backends and of
// every instance's in turn) is behind INBOX_FAULT=1:
//
//	INBOX_FAULT=1 POSTGRES_TEST_URL=postgres://... go test -race -run TestFaultRun -v ./inbox/

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// faultChildEnv carries a childConfig (JSON) to a re-executed test binary.
const faultChildEnv = "INBOX_FAULT_CHILD"

// childConfig is what one instance process runs.
type childConfig struct {
	DB       string        // "sqlite" or "postgres"
	DSN      string        // the SQLite file, or the Postgres URL
	Table    string        // the job table (default columns)
	Form     inbox.Form    // claim form
	Workers  int           // workers of the subscription
	Lease    time.Duration // lease of the lease form
	Work     time.Duration // each handler runs about this long
	Log      string        // the execution log every instance appends to
	Instance string        // this instance's name (and Postgres application_name)
	StopIn   time.Duration // Stop's deadline when the process is told to stop (SIGTERM)
	Fsync    bool          // fsync each record
	LockFor  time.Duration // locker mode (SQLite): hold the write lock this long, then exit
	// Crash, if set, is the Text of the jobs whose handler kills its own process
	// (SIGKILL) once the instance is ready; MaxAttempts goes to the subscription.
	Crash       string
	MaxAttempts int
	Groups      bool // the table has GroupColumns (FIFO groups)
	Heads       bool // Postgres: claims read the groups' heads (inbox.ClaimHeads)
	// Limits go to the subscription (the table then has GroupColumns, for
	// Partition); each handler's return is recorded too ("X" records), so that
	// the parent can count handlers in work at once. Block makes every handler
	// wait for its context to end (the process to be killed) instead of Work.
	Limits inbox.Limits
	Block  bool
}

// runFaultChild is the body of an instance process; it returns the exit status.
func runFaultChild(cfgJSON string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bad child config:", err)
		return 2
	}
	if err := faultChild(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func faultChild(cfg childConfig) error {
	// The parent holds this process's stdin open for as long as it wants it: if the
	// parent dies (a test binary killed by its timeout), the instance goes too.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(4)
	}()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", cfg.Instance)
	rec, err := openRecorder(cfg.Log, cfg.Instance, cfg.Fsync)
	if err != nil {
		return err
	}
	defer rec.f.Close()
	var q *inbox.Queue[msg]
	qcfg := inbox.Config[msg]{Table: cfg.Table, Logger: logger}
	if cfg.Groups || cfg.Limits != (inbox.Limits{}) {
		qcfg.Columns = inbox.GroupColumns()
	}
	if cfg.DB == "sqlite" {
		db, err := inbox.OpenSQLite(ctx, cfg.DSN)
		if err != nil {
			return err
		}
		defer db.Close()
		if cfg.LockFor > 0 {
			conn, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return err
			}
			fmt.Println("ready")
			time.Sleep(cfg.LockFor) // the lock is the point: held for this long
			_, err = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			return err
		}
		db.SetMaxOpenConns(4)
		if q, err = inbox.NewSQLite(db, qcfg); err != nil {
			return err
		}
	} else {
		pc, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			return err
		}
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.Instance
		pc.MaxConns = int32(cfg.Workers + 2)
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return err
		}
		defer pool.Close()
		if q, err = inbox.NewPostgres(pool, qcfg); err != nil {
			return err
		}
	}
	if cfg.Heads && cfg.DB == "postgres" {
		inbox.ClaimHeads(q, true)
	}
	printed := make(chan struct{})
	sub, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
		rec.write("S %d %d %s %d", j.ID, j.Attempt, cfg.Instance, time.Now().UnixNano())
		if cfg.Crash != "" && j.Payload.Text == cfg.Crash {
			<-printed
			time.Sleep(cfg.Work * 20) // its own work, longer than the others': they finish first
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the process is going
		}
		if cfg.Limits != (inbox.Limits{}) || cfg.Groups {
			defer func() { rec.write("X %d %d %s %d", j.ID, j.Attempt, cfg.Instance, time.Now().UnixNano()) }()
		}
		if cfg.Block {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		d := cfg.Work/2 + rand.N(cfg.Work+1)
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, inbox.SubscribeOptions{
		Workers: cfg.Workers, Form: cfg.Form, Lease: cfg.Lease, PollInterval: 50 * time.Millisecond, MaxAttempts: cfg.MaxAttempts,
		Limits: cfg.Limits,
		Observe: func(r inbox.Result) {
			settle := "ok"
			switch {
			case errors.Is(r.SettleErr, inbox.ErrLeaseLost):
				settle = "lost"
			case r.SettleErr != nil:
				settle = "err"
			}
			cause := "-"
			if errors.Is(r.Err, inbox.ErrLeaseLost) {
				cause = "lost"
			}
			rec.write("E %d %d %s %d %s %s %s", r.ID, r.Attempt, cfg.Instance, time.Now().UnixNano(), r.Outcome, settle, cause)
		},
	})
	if err != nil {
		return err
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := sub.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	close(printed)
	<-term
	sctx, cancel := context.WithTimeout(ctx, cfg.StopIn)
	began := time.Now()
	err = sub.Stop(sctx)
	cancel()
	e := "-"
	if err != nil {
		e = "deadline"
	}
	rec.write("T %s %d %s", cfg.Instance, time.Since(began).Nanoseconds(), e)
	return nil
}

// recorder appends records to the execution log, one write each.
type recorder struct {
	f     *os.File
	fsync bool
}

func openRecorder(path, instance string, fsync bool) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f, fsync: fsync}, nil
}

func (r *recorder) write(format string, args ...any) {
	b := fmt.Appendf(nil, format+"\n", args...)
	if _, err := r.f.Write(b); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(3) // a lost record would make the run's figures wrong
	}
	if r.fsync {
		_ = r.f.Sync()
	}
}

// child is one running instance process.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr string
	done   chan struct{} // closed when the process has exited; err is then its status
	err    error
}

// faultRun is one run of the fault test on one database and form.
type faultRun struct {
	t        *testing.T
	b        *backend
	cfg      childConfig // template for every instance
	jobs     int
	size     int // instances alive at once
	kills    int
	terms    int  // Postgres: terminations of every instance's backends
	lockStop bool // SQLite: stop an instance while another process holds the write lock
	timeout  time.Duration
	keys     int // with cfg.Limits: job i has partition key "k<i%keys>"
	groups   int // with cfg.Groups: job i is in FIFO group "g<i%groups>"

	dir      string
	prefix   string // of every instance name
	next     int
	mu       sync.Mutex
	alive    []*child
	killed   map[string]time.Time // instance → when it was killed
	stopped  int                  // instances stopped before the end
	lockers  []*child
	windows  []window // when claims could be lost: terminations
	locked   []window // when another process held SQLite's write lock
	all      []*child
	terminat int // backends terminated
	terms0   int // terminations so far
	events   []string
}

// childBackend is the backend of a test whose instances are child processes,
// on db ("sqlite" or "postgres"), and sets cfg's DSN for them.
func childBackend(t *testing.T, db string, cfg *childConfig) *backend {
	if db == "sqlite" {
		b := sqliteBackend(t)
		cfg.DSN = b.path
		return b
	}
	b := pgBackend(t)
	cfg.DSN = pgURL(t)
	return b
}

// spawner is a faultRun for a test that spawns its own children on b's table
// (made already): their execution log in a folder of the test's, cfg's Table
// and Log set for them, and every child killed at the end of the test.
func spawner(t *testing.T, b *backend, name string, cfg *childConfig) *faultRun {
	f := &faultRun{t: t, b: b, dir: t.TempDir(), prefix: fmt.Sprintf("inbox%s%d", name, time.Now().UnixNano()%1e9)}
	cfg.Table = b.table
	cfg.Log = filepath.Join(f.dir, "executions.log")
	t.Cleanup(func() {
		for _, c := range f.all {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return f
}

func (f *faultRun) spawn(cfg childConfig) *child {
	t := f.t
	t.Helper()
	if cfg.Instance == "" {
		f.next++
		cfg.Instance = fmt.Sprintf("%s-%d", f.prefix, f.next)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{name: cfg.Instance, stderr: filepath.Join(f.dir, cfg.Instance+".log"), done: make(chan struct{})}
	errf, err := os.Create(c.stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), faultChildEnv+"="+string(js))
	c.cmd.Stderr = errf
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.cmd.StdinPipe() // held open until the process exits: see faultChild
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		_, _ = io.Copy(io.Discard, out)
		c.err = c.cmd.Wait()
		in.Close()
		errf.Close()
		close(c.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-c.done
			t.Fatalf("instance %s did not start:\n%s", c.name, tail(c.stderr))
		}
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("instance %s not ready within 60s:\n%s", c.name, tail(c.stderr))
	}
	f.mu.Lock()
	f.all = append(f.all, c)
	f.mu.Unlock()
	return c
}

// tail is the end of a log file, for failure messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func (f *faultRun) note(format string, args ...any) {
	f.events = append(f.events, fmt.Sprintf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...))
}

// kill9 kills the live instance with the most runs in flight (by the execution log)
// with SIGKILL, and starts another in its place.
func (f *faultRun) kill9() {
	i := f.busiest()
	c := f.alive[i]
	if err := c.cmd.Process.Kill(); err != nil {
		f.t.Fatal(err)
	}
	<-c.done
	f.killed[c.name] = time.Now()
	f.note("kill -9 %s", c.name)
	f.alive[i] = f.spawn(f.cfg)
}

// busiest returns the index in f.alive of the instance with the most runs started and
// not yet settled, waiting a little for one to have any.
func (f *faultRun) busiest() int {
	for range 100 {
		b, err := os.ReadFile(f.cfg.Log)
		if err != nil && !os.IsNotExist(err) {
			f.t.Fatal(err)
		}
		inFlight := map[string]int{}
		for line := range strings.Lines(string(b)) {
			fs := strings.Fields(line)
			switch {
			case len(fs) == 5 && fs[0] == "S":
				inFlight[fs[3]]++
			case len(fs) == 8 && fs[0] == "E" && fs[5] != "released":
				inFlight[fs[3]]--
			}
		}
		best, most := rand.N(len(f.alive)), 0
		for i, c := range f.alive {
			if n := inFlight[c.name]; n > most {
				best, most = i, n
			}
		}
		if most > 0 {
			return best
		}
		time.Sleep(10 * time.Millisecond) // polling the log: no event says a run started
	}
	return rand.N(len(f.alive))
}

// waitExit waits for an instance told to stop, and fails the test if it does not exit
// cleanly and soon.
func (f *faultRun) waitExit(c *child) {
	f.t.Helper()
	select {
	case <-c.done:
		if c.err != nil {
			f.t.Errorf("instance %s exited with %v:\n%s", c.name, c.err, tail(c.stderr))
		}
	case <-time.After(f.cfg.StopIn + 30*time.Second):
		f.t.Fatalf("instance %s did not exit after SIGTERM:\n%s", c.name, tail(c.stderr))
	}
}

// lockedStop stops a random live instance while another process holds SQLite's write
// lock, so that the acks of its jobs in work cannot be written: its Stop must still
// keep its deadline. Another instance takes its place.
func (f *faultRun) lockedStop() {
	t := f.t
	locker := f.cfg
	locker.Instance, locker.LockFor = fmt.Sprintf("%s-locker%d", f.prefix, len(f.lockers)), f.cfg.StopIn+time.Second
	lc := f.spawn(locker)
	f.lockers = append(f.lockers, lc)
	w := window{from: time.Now()}
	go func() {
		<-lc.done
		f.mu.Lock()
		f.locked = append(f.locked, window{from: w.from, to: time.Now()})
		f.mu.Unlock()
	}()
	// The busiest instance, as for a kill: a Stop of an instance with no job in
	// work proves nothing of halted runs (picked at random, one sometimes had
	// none, and the run failed for it).
	i := f.busiest()
	c := f.alive[i]
	f.note("write lock held by %s; SIGTERM %s", locker.Instance, c.name)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	f.waitExit(c)
	f.stopped++
	f.alive[i] = f.spawn(f.cfg)
}

// terminate ends, on this test's database only, every backend of the busiest
// instance (odd calls: the others can take its rows at once) or of every instance of
// this run (even calls). In the lock forms it makes sure that the fault hit a job in
// work: a run found in flight in the log may have settled by the time its backend
// is terminated (a loaded machine widens that gap), so if no run ends with its lock
// lost within faultHitWait, it terminates again, up to faultTries times while jobs
// remain. Otherwise the run would prove nothing of lost locks, and fail for it.
func (f *faultRun) terminate() {
	for try := 1; ; try++ {
		before := f.lostRuns()
		f.terminateOnce()
		if f.cfg.Form == inbox.Lease {
			return
		}
		hit := false
		for deadline := time.Now().Add(faultHitWait); !hit && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // polling the log: no event says a run ended
			hit = f.lostRuns() > before
		}
		if hit || try == faultTries || f.remaining() == 0 {
			return
		}
		f.note("the termination hit no job in work; terminating again")
	}
}

const (
	faultHitWait = 2 * time.Second // how long a termination's lost runs may take to be logged
	faultTries   = 5               // terminations tried for one fault
)

// lostRuns counts the runs the log records as ended by a lost claim or with their
// settlement refused: only a fault makes them.
func (f *faultRun) lostRuns() int {
	b, err := os.ReadFile(f.cfg.Log)
	if err != nil && !os.IsNotExist(err) {
		f.t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if fs := strings.Fields(line); len(fs) == 8 && fs[0] == "E" && (fs[6] != "ok" || fs[7] == "lost") {
			n++
		}
	}
	return n
}

// terminateOnce is one termination of terminate.
func (f *faultRun) terminateOnce() {
	f.terms0++
	who := f.prefix + "-%"
	if f.terms0%2 == 1 {
		who = f.alive[f.busiest()].name
	}
	from := time.Now()
	n := f.b.queryN(f.t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE $1) k`, who)
	f.terminat += int(n)
	f.windows = append(f.windows, window{from: from, to: time.Now()})
	f.note("pg_terminate_backend of %s: %d backends", who, n)
}

func (f *faultRun) remaining() int64 {
	return f.b.queryN(f.t, `SELECT count(*) FROM "`+f.b.table+`"`)
}

// run publishes the jobs, drains them with f.size instances through the faults, stops
// every instance, and checks the execution log.
func (f *faultRun) run() faultSummary {
	t := f.t
	q := defaultTable(t, f.b)
	f.dir = t.TempDir()
	f.prefix = fmt.Sprintf("inboxfault%d", time.Now().UnixNano()%1e9)
	f.killed = map[string]time.Time{}
	f.cfg.Table = f.b.table
	f.cfg.Log = filepath.Join(f.dir, "executions.log")
	ids := map[int64]bool{}
	keyOf := map[int64]string{} // with keys or groups: each job's partition key or group
	if f.keys > 0 || f.groups > 0 {
		kq := newQueue(t, f.b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for i := range f.jobs {
			var o inbox.PublishOpts
			k := ""
			if f.keys > 0 {
				k = fmt.Sprint("k", i%f.keys)
				o.Partition = k
			} else {
				k = fmt.Sprint("g", i%f.groups)
				o.Group = k
			}
			id, err := kq.Publish(t.Context(), msg{N: i}, &o)
			if err != nil {
				t.Fatal(err)
			}
			ids[id], keyOf[id] = true, k
		}
	} else {
		batch := make([]msg, f.jobs)
		for i := range batch {
			batch[i] = msg{N: i}
		}
		for i := 0; i < len(batch); i += 1000 {
			if err := q.PublishBatch(t.Context(), batch[i:min(i+1000, len(batch))], nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range f.ids() {
			ids[id] = true
		}
	}
	for range f.size {
		f.alive = append(f.alive, f.spawn(f.cfg))
	}
	t.Cleanup(func() {
		for _, c := range f.all {
			_ = c.cmd.Process.Kill()
		}
	})
	// The faults, spread over the drain: the k-th once this much of it is done.
	faults := make([]string, 0, f.kills+f.terms+1)
	for i := range max(f.kills, f.terms) {
		if i < f.kills {
			faults = append(faults, "kill")
		}
		if i < f.terms {
			faults = append(faults, "term")
		}
	}
	if f.lockStop {
		faults = slices.Insert(faults, len(faults)/2, "lockstop")
	}
	began := time.Now()
	deadline := began.Add(f.timeout)
	for k := 0; ; {
		left := f.remaining()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs left after %v; events:\n%s", left, f.jobs, f.timeout, strings.Join(f.events, "\n"))
		}
		done := float64(int64(f.jobs)-left) / float64(f.jobs)
		if k < len(faults) && done >= 0.1+0.7*float64(k)/float64(max(len(faults)-1, 1)) {
			switch faults[k] {
			case "kill":
				f.kill9()
			case "term":
				f.terminate()
			case "lockstop":
				f.lockedStop()
			}
			k++
			continue
		}
		time.Sleep(20 * time.Millisecond) // polling the table: no event announces progress
	}
	drained := time.Since(began)
	for _, c := range f.lockers {
		<-c.done
	}
	f.mu.Lock()
	windows := append(slices.Clone(f.windows), f.locked...)
	f.mu.Unlock()
	for _, c := range f.alive {
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range f.alive {
		f.waitExit(c)
	}
	recs, err := os.ReadFile(f.cfg.Log)
	if err != nil {
		t.Fatal(err)
	}
	s := analyze(string(recs), ids, f.killed, windows)
	s.Jobs, s.Instances, s.Kills, s.Terminated, s.Drain = f.jobs, len(f.all)-len(f.lockers), len(f.killed), f.terminat, drained
	s.Lost += int(f.remaining())
	for _, e := range s.Errors {
		t.Error(e)
	}
	if f.groups > 0 {
		// keyOf holds each job's group: at most one handler of a group in work at
		// once, and each group's jobs first started in id order.
		most, ofGroup := limitLoad(string(recs), keyOf, f.killed)
		s.MostInWork, s.MostOfKey = most, ofGroup
		if ofGroup > 1 {
			t.Errorf("%d handlers of one FIFO group in work at once across the instances", ofGroup)
		}
		for g, ids := range firstStarts(string(recs), keyOf) {
			if !slices.IsSorted(ids) {
				t.Errorf("group %s: jobs first started in the order %v, not in id order", g, ids)
			}
		}
	}
	if l := f.cfg.Limits; l != (inbox.Limits{}) {
		most, perKey := limitLoad(string(recs), keyOf, f.killed)
		s.MostInWork, s.MostOfKey = most, perKey
		if l.Concurrency > 0 && most > l.Concurrency {
			t.Errorf("%d handlers in work at once across the instances, Concurrency %d", most, l.Concurrency)
		}
		if l.PerPartition > 0 && perKey > l.PerPartition {
			t.Errorf("%d handlers of one key in work at once across the instances, PerPartition %d", perKey, l.PerPartition)
		}
	}
	if s.Lost != 0 || s.AckedTwice != 0 || s.Unexplained != 0 || s.StopMax > f.cfg.StopIn+time.Second || len(s.Errors) > 0 {
		t.Errorf("summary %s\nevents:\n%s", s, strings.Join(f.events, "\n"))
		for _, c := range f.all {
			t.Logf("--- %s\n%s", c.name, tail(c.stderr))
		}
	}
	// The faults must have hit jobs in work, or the run proved nothing. A kill
	// hit a job in work if it cut a run short (a run with no end record), even
	// when that job's settlement had committed just before and it never ran
	// again: its end record is written after the settlement (seen with one
	// kill in the advisory form: 3 runs cut short, all acked).
	crashed := 0
	for _, fates := range s.ByInstance {
		crashed += fates["crash"]
	}
	if f.kills > 0 && s.RerunCrash == 0 && crashed == 0 {
		t.Errorf("%d kills, and no job ran again after a crash: the kills missed the drain; runs by instance: %v", f.kills, s.ByInstance)
	}
	if f.terms > 0 && f.cfg.Form != inbox.Lease && s.RerunClaimLost == 0 {
		t.Errorf("%d terminations, and no job ran again after a lost lock", f.terms)
	}
	if f.lockStop && s.RerunHalted == 0 {
		t.Errorf("a Stop under a locked database, and no job left to run again")
	}
	if want := len(f.alive) + f.stopped; s.Stops != want {
		t.Errorf("%d Stop records, want one per instance stopped (%d)", s.Stops, want)
	}
	return s
}

func (f *faultRun) ids() []int64 {
	var out []int64
	n := f.b.queryN(f.t, `SELECT count(*) FROM "`+f.b.table+`"`)
	lo := f.b.queryN(f.t, `SELECT min(id) FROM "`+f.b.table+`"`)
	for i := range n {
		out = append(out, lo+i) // ids of one batch publish are consecutive
	}
	if hi := f.b.queryN(f.t, `SELECT max(id) FROM "`+f.b.table+`"`); hi != lo+n-1 {
		f.t.Fatalf("ids %d..%d of %d jobs are not consecutive", lo, hi, n)
	}
	return out
}

// execRun is one execution of a job's handler, as the log recorded it.
type execRun struct {
	inst            string
	attempt         int
	start, end      time.Time
	ended           bool
	outcome, settle string
	cause           string // "lost" when the handler's context was cancelled by a lost claim
}

// faultSlack is how long after its window a fault may still take a claim away.
const faultSlack = time.Second

// window is a time during which a fault could take claims away: a termination of
// backends (an instant), or another process holding SQLite's write lock.
type window struct{ from, to time.Time }

// fate is how a run ended: "acked", "lost" (its claim was lost: a connection loss or
// a lease that could not be extended), "released" (at Stop), "crash" (its instance
// was killed first), "halted" (its instance's Stop passed its deadline first), or
// "unexplained".
func (r *execRun) fate(killed map[string]time.Time, halted map[string]bool) string {
	switch {
	case !r.ended && !killed[r.inst].IsZero():
		return "crash"
	case !r.ended && halted[r.inst]:
		return "halted"
	case !r.ended:
		return "unexplained"
	case r.settle == "lost" || r.settle == "err" || r.cause == "lost":
		return "lost"
	case r.outcome == "released":
		return "released"
	case r.outcome == "acked":
		return "acked"
	}
	return "unexplained"
}

// faultSummary is the figures of one fault run.
type faultSummary struct {
	Jobs, Instances, Kills, Terminated int
	Drain                              time.Duration
	Runs                               int // handler executions
	Lost                               int // jobs never run, or left in the table
	AckedTwice                         int // jobs with two successful acks
	RerunCrash                         int // jobs run again after a run lost in a crash
	RerunClaimLost                     int // jobs run again after a run whose claim was lost to a fault
	RerunHalted                        int // jobs run again after a run a halted Stop left
	Unexplained                        int // runs ended in no way above, or run after their ack
	MaxOverlap                         time.Duration
	Stops                              int
	StopMax                            time.Duration
	MostInWork, MostOfKey              int // with Limits: handlers in work at once, overall and of one key
	Errors                             []string
	ByInstance                         map[string]map[string]int // instance → fate → runs, for failure messages
}

func (s faultSummary) String() string {
	return fmt.Sprintf("jobs=%d instances=%d kills=%d terminated=%d drain=%v runs=%d lost=%d acked_twice=%d rerun_crash=%d rerun_claimlost=%d rerun_halted=%d unexplained=%d max_overlap=%v stop_max=%v",
		s.Jobs, s.Instances, s.Kills, s.Terminated, s.Drain.Round(time.Millisecond), s.Runs, s.Lost, s.AckedTwice,
		s.RerunCrash, s.RerunClaimLost, s.RerunHalted, s.Unexplained, s.MaxOverlap.Round(time.Microsecond), s.StopMax.Round(time.Millisecond))
}

// analyze checks an execution log against the jobs published (ids), the instances
// killed and the windows of the faults that can take claims away: a run whose claim
// was lost is explained only if it overlapped one (a connection cut while it ran, or
// a database locked for longer than its lease).
func analyze(log string, ids map[int64]bool, killed map[string]time.Time, windows []window) faultSummary {
	s := faultSummary{ByInstance: map[string]map[string]int{}}
	runs := map[int64][]*execRun{}
	halted := map[string]bool{}
	lines := strings.Split(log, "\n")
	for i, line := range lines {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func() { s.Errors = append(s.Errors, fmt.Sprintf("log line %d unreadable: %q", i+1, line)) }
		switch {
		case f[0] == "S" && len(f) == 5:
			id, _ := strconv.ParseInt(f[1], 10, 64)
			a, _ := strconv.Atoi(f[2])
			ns, _ := strconv.ParseInt(f[4], 10, 64)
			runs[id] = append(runs[id], &execRun{inst: f[3], attempt: a, start: time.Unix(0, ns)})
			s.Runs++
		case f[0] == "E" && len(f) == 8:
			id, _ := strconv.ParseInt(f[1], 10, 64)
			a, _ := strconv.Atoi(f[2])
			ns, _ := strconv.ParseInt(f[4], 10, 64)
			var r *execRun
			for _, x := range slices.Backward(runs[id]) {
				if x.inst == f[3] && x.attempt == a && !x.ended {
					r = x
					break
				}
			}
			if r == nil {
				if f[5] != "released" { // a prefetched or undispatched job released unrun
					s.Errors = append(s.Errors, fmt.Sprintf("settlement without a run: %q", line))
				}
				continue
			}
			r.ended, r.end, r.outcome, r.settle, r.cause = true, time.Unix(0, ns), f[5], f[6], f[7]
		case f[0] == "X" && len(f) == 5:
			// A handler's return (limits runs): limitLoad reads them.
		case f[0] == "T" && len(f) == 4:
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			s.Stops++
			s.StopMax = max(s.StopMax, time.Duration(ns))
			if f[3] == "deadline" {
				halted[f[1]] = true
			}
		case i == len(lines)-1:
			// A torn last line: an instance killed in the middle of a write.
		default:
			bad()
		}
	}
	for id := range ids {
		rs := runs[id]
		if len(rs) == 0 {
			s.Lost++
			continue
		}
		acks := 0
		why := map[string]bool{}
		for k, r := range rs {
			fate := r.fate(killed, halted)
			if s.ByInstance[r.inst] == nil {
				s.ByInstance[r.inst] = map[string]int{}
			}
			s.ByInstance[r.inst][fate]++
			switch fate {
			case "acked":
				acks++
				if k != len(rs)-1 {
					s.Unexplained++
					s.Errors = append(s.Errors, fmt.Sprintf("job %d ran again after its ack", id))
				}
			case "lost":
				// A fault's effects trail it a little: pg_terminate_backend returns
				// before the backends have gone.
				if !slices.ContainsFunc(windows, func(w window) bool { return !r.start.After(w.to.Add(faultSlack)) && !r.end.Before(w.from) }) {
					s.Unexplained++
					s.Errors = append(s.Errors, fmt.Sprintf("job %d: its claim was lost with no fault while it ran (%+v)", id, *r))
				}
			case "unexplained":
				s.Unexplained++
				s.Errors = append(s.Errors, fmt.Sprintf("job %d: run %+v ended in no known way", id, *r))
			}
			if k < len(rs)-1 {
				why[fate] = true
				// How long this run and the next overlapped.
				end := r.end
				if !r.ended {
					end = killed[r.inst]
				}
				if next := rs[k+1]; !end.IsZero() && end.After(next.start) {
					s.MaxOverlap = max(s.MaxOverlap, end.Sub(next.start))
				}
			}
		}
		if acks > 1 {
			s.AckedTwice++
		}
		if why["crash"] {
			s.RerunCrash++
		}
		if why["lost"] {
			s.RerunClaimLost++
		}
		if why["halted"] {
			s.RerunHalted++
		}
	}
	return s
}

// limitLoad reads the handlers' starts (S) and returns (X) in an execution log
// and reports the most handlers in work at once across every instance, overall
// and of one partition key (keyOf, by job id). A run its instance's kill cut
// short ends at the kill. The records of each instance are written in its order,
// and a handler's return is written before its slot or place is given back, so an
// overlap here is an overlap of handlers.
func limitLoad(log string, keyOf map[int64]string, killed map[string]time.Time) (most, mostOfKey int) {
	type ev struct {
		at  int64
		d   int
		key string
	}
	var evs []ev
	open := map[string]ev{} // "id attempt instance" -> its start
	for line := range strings.Lines(log) {
		f := strings.Fields(line)
		if len(f) != 5 || (f[0] != "S" && f[0] != "X") {
			continue
		}
		id, _ := strconv.ParseInt(f[1], 10, 64)
		ns, _ := strconv.ParseInt(f[4], 10, 64)
		run := f[1] + " " + f[2] + " " + f[3]
		if f[0] == "S" {
			open[run] = ev{ns, 1, keyOf[id]}
			evs = append(evs, open[run])
		} else if s, ok := open[run]; ok {
			delete(open, run)
			evs = append(evs, ev{ns, -1, s.key})
		}
	}
	for run, s := range open {
		inst := strings.Fields(run)[2]
		if k := killed[inst]; !k.IsZero() {
			evs = append(evs, ev{k.UnixNano(), -1, s.key})
		} // else it never ended: it counts to the end
	}
	// Ends before starts at the same instant: a slot handed on at once.
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.d, b.d)
	})
	now, ofKey := 0, map[string]int{}
	for _, e := range evs {
		now += e.d
		ofKey[e.key] += e.d
		most = max(most, now)
		if e.key != "" {
			mostOfKey = max(mostOfKey, ofKey[e.key])
		}
	}
	return most, mostOfKey
}

// firstStarts reads the handlers' starts (S) in an execution log and returns, by
// group (keyOf, by job id), the jobs in the order of their first starts.
func firstStarts(log string, keyOf map[int64]string) map[string][]int64 {
	first := map[int64]int64{}
	for line := range strings.Lines(log) {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "S" {
			continue
		}
		id, _ := strconv.ParseInt(f[1], 10, 64)
		ns, _ := strconv.ParseInt(f[4], 10, 64)
		if at, ok := first[id]; !ok || ns < at {
			first[id] = ns
		}
	}
	byGroup := map[string][]int64{}
	for id := range first {
		byGroup[keyOf[id]] = append(byGroup[keyOf[id]], id)
	}
	for _, ids := range byGroup {
		slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(first[a], first[b]) })
	}
	return byGroup
}

// faultParams are the sizes of one fault run: the short one of the normal suite, or
// the full one with INBOX_FAULT=1.
func faultParams(dialect inbox.Dialect) (jobs, size, workers, kills, terms int, work, lease, timeout time.Duration) {
	if os.Getenv("INBOX_FAULT") != "" {
		// Handlers of about 40 ms: 32 workers take some 12 s to drain 10,000 jobs,
		// long enough for every fault to land mid-drain.
		jobs, size, workers, kills, terms = 10_000, 4, 8, 10, 0
		if dialect == inbox.Postgres {
			kills, terms = 4, 6
		}
		return jobs, size, workers, kills, terms, 40 * time.Millisecond, 5 * time.Second, 10 * time.Minute
	}
	// A lease long enough that a loaded machine or a stalled database does not take
	// leases away by itself, which would make lost claims no fault explains.
	jobs, size, workers, kills, terms = 300, 2, 4, 2, 0
	if dialect == inbox.Postgres {
		kills, terms = 1, 1
	}
	return jobs, size, workers, kills, terms, 20 * time.Millisecond, 5 * time.Second, 2 * time.Minute
}

// dbForm is a database and a form that an OS-process test runs with.
type dbForm struct {
	db   string
	form inbox.Form
}

// dbForms are the combinations the OS-process tests run: the lease form on both
// databases, the lock forms on Postgres (they need it).
var dbForms = []dbForm{{"sqlite", inbox.Lease}, {"postgres", inbox.Lease}, {"postgres", inbox.RowLock}, {"postgres", inbox.AdvisoryLock}}

// TestFaultRun drains a table with instances that are real processes while some are
// killed (SIGKILL) and, on Postgres, every instance's backends are terminated, once
// per database and form. See the top of this file.
func TestFaultRun(t *testing.T) {
	for _, c := range dbForms {
		t.Run(c.db+"/"+strings.ReplaceAll(c.form.String(), " ", "-"), func(t *testing.T) {
			t.Parallel()
			var b *backend
			// The full run fsyncs every record unless INBOX_FAULT_FSYNC=0; the short
			// one only if INBOX_FAULT_FSYNC=1 (a kill -9 loses no written record
			// either way: only a crash of the machine would).
			fsync := os.Getenv("INBOX_FAULT_FSYNC") == "1" || os.Getenv("INBOX_FAULT") != "" && os.Getenv("INBOX_FAULT_FSYNC") != "0"
			cfg := childConfig{DB: c.db, Form: c.form, StopIn: 2 * time.Second, Fsync: fsync}
			b = childBackend(t, c.db, &cfg)
			jobs, size, workers, kills, terms, work, lease, timeout := faultParams(b.dialect)
			cfg.Workers, cfg.Work, cfg.Lease = workers, work, lease
			f := &faultRun{t: t, b: b, cfg: cfg, jobs: jobs, size: size, kills: kills, terms: terms,
				lockStop: c.db == "sqlite", timeout: timeout}
			s := f.run()
			t.Logf("%s %s: %s", c.db, c.form, s)
		})
	}
}

// TestAnalyzeFaultLog checks the checker on a hand-written log: it must see a lost
// job, a double ack, a re-run after an ack, and unexplained ends.
func TestAnalyzeFaultLog(t *testing.T) {
	killed := map[string]time.Time{"a": time.Unix(0, 50)}
	log := strings.Join([]string{
		"S 1 1 a 10",                   // job 1: run in a, which is killed
		"S 1 2 b 60",                   //        run again in b: a re-run after a crash
		"E 1 2 b 70 acked ok -",        //        acked
		"S 2 1 b 20",                   // job 2: acked twice
		"E 2 1 b 30 acked ok -",        //
		"S 2 2 c 40",                   //
		"E 2 2 c 45 acked ok -",        //
		"S 3 1 c 20",                   // job 3: its claim lost, then run again
		"E 3 1 c 30 retried lost lost", //
		"S 3 2 b 25",                   //        overlapping the first run by 5
		"E 3 2 b 35 acked ok -",        //
		"S 4 1 c 20",                   // job 4: never settled, c never killed
		"T c 1500000000 deadline",      // c's Stop passed its deadline: that explains it
		"S 5 1 b 20",                   // job 5: never settled, b not killed nor halted
		"T b 1000 -",
		"E 6 1 b 2", // torn last line
	}, "\n")
	ids := map[int64]bool{1: true, 2: true, 3: true, 4: true, 5: true, 7: true}
	cut := []window{{from: time.Unix(0, 28), to: time.Unix(0, 28)}} // a termination while job 3's first run ran
	s := analyze(log, ids, killed, cut)
	want := faultSummary{Runs: 8, Lost: 1, AckedTwice: 1, RerunCrash: 1, RerunClaimLost: 1, Unexplained: 2,
		MaxOverlap: 5, Stops: 2, StopMax: 1500 * time.Millisecond}
	s.Errors, s.ByInstance = nil, nil
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("analyze:\n got %s\nwant %s", s, want)
	}
	late := []window{{from: time.Unix(0, 31), to: time.Unix(0, 40)}} // after that run had ended
	if s := analyze(log, ids, killed, late); s.Unexplained != 3 {
		t.Fatalf("a claim lost with no fault while the run ran must be unexplained: %s", s)
	}
}
