package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gotp/gotp/inbox"
	"github.com/jackc/pgx/v5/pgxpool"
)

// groupLog records, across every instance of a test, the jobs of each FIFO group
// as their handlers start and end, and fails the test if two jobs of a group are
// ever in work at once.
type groupLog struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string]int   // group → payload in work
	started map[string][]int // group → payloads in the order their handlers started
	done    map[string][]int // group → payloads in the order they were acked
	acked   int
	all     chan struct{}
	want    int
}

func newGroupLog(t *testing.T, want int) *groupLog {
	return &groupLog{t: t, running: map[string]int{}, started: map[string][]int{}, done: map[string][]int{}, all: make(chan struct{}), want: want}
}

func groupOf(n int, groups int) string { return fmt.Sprintf("g%d", n%groups) }

func (l *groupLog) begin(g string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, busy := l.running[g]; busy {
		l.t.Errorf("group %s: job %d started while job %d is in work", g, n, other)
	}
	l.running[g] = n
	l.started[g] = append(l.started[g], n)
}

func (l *groupLog) end(g string, n int, acked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, g)
	if acked {
		l.done[g] = append(l.done[g], n)
		l.acked++
		if l.acked == l.want {
			close(l.all)
		}
	}
}

// inOrder fails the test unless every group's jobs were acked in publish order.
func (l *groupLog) inOrder(t *testing.T, groups, perGroup int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for g := range groups {
		name := fmt.Sprintf("g%d", g)
		got := l.done[name]
		if len(got) != perGroup {
			t.Fatalf("group %s: %d jobs acked, want %d: %v", name, len(got), perGroup, got)
		}
		for i := 1; i < len(got); i++ {
			if got[i] < got[i-1] {
				t.Fatalf("group %s acked out of order: %v", name, got)
			}
		}
	}
}

// groupTable makes the default schema for b's table and returns a queue on it
// with GroupColumns.
func groupTable(t *testing.T, b *backend) *inbox.Queue[msg] {
	t.Helper()
	q := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	return q
}

// freshBackend is a backend of its own for a subtest, on dialect d.
func freshBackend(t *testing.T, d inbox.Dialect) *backend {
	if d == inbox.SQLite {
		return sqliteBackend(t)
	}
	return pgBackend(t)
}

// groupForms are the claim forms FIFO groups work in on b's database.
func groupForms(b *backend) []inbox.Form {
	if b.dialect == inbox.SQLite {
		return []inbox.Form{inbox.Lease}
	}
	return []inbox.Form{inbox.Lease, inbox.RowLock, inbox.AdvisoryLock}
}

// Two instances (two Queues on their own pools) drain 6 interleaved groups with 4
// workers each: no two jobs of a group are ever in work at once, and each group is
// taken in publish order, though every third job fails its first attempt (a
// retry at once: the job stays at the head of its group). On Postgres one
// instance's claims read the groups' heads, the other's the claim index in order.
func TestFIFOGroupsTwoInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range groupForms(b) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				groupTable(t, b)
				const groups, perGroup = 6, 12
				log := newGroupLog(t, groups*perGroup)
				var mu sync.Mutex
				failed := map[int]bool{}
				h := func(ctx context.Context, j inbox.Job[msg]) error {
					g := groupOf(j.Payload.N, groups)
					log.begin(g, j.Payload.N)
					time.Sleep(time.Millisecond) // long enough for another instance to try the group
					mu.Lock()
					fail := j.Payload.N%3 == 0 && !failed[j.Payload.N]
					failed[j.Payload.N] = true
					mu.Unlock()
					log.end(g, j.Payload.N, !fail)
					if fail {
						return inbox.Retry(0)
					}
					return nil
				}
				pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
				for n := range groups * perGroup {
					if _, err := pub.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: groupOf(n, groups)}); err != nil {
						t.Fatal(err)
					}
				}
				for i := range 2 {
					q := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
					if i == 0 && b.dialect == inbox.Postgres {
						inbox.ClaimHeads(q, true) // beside the other's claims in order
					}
					start(t, q, h, inbox.SubscribeOptions{Workers: 4, Form: form, PollInterval: 20 * time.Millisecond})
				}
				select {
				case <-log.all:
				case <-time.After(60 * time.Second):
					t.Fatalf("only %d of %d jobs acked", log.acked, groups*perGroup)
				}
				log.inOrder(t, groups, perGroup)
			})
		}
	})
}

// An instance that dies with the head of a group in work (its Start context ends:
// nothing is settled, as in a crash) holds the group back until its claim ends (the
// lease expires, or the lock goes with the connection); then the other instance
// takes that same job first, and the rest of the group after it. Other groups go on
// meanwhile.
func TestFIFOGroupsCrash(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range groupForms(b) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				groupTable(t, b)
				pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
				// Job 0 (group a) is the one the first instance dies with.
				for n, g := range []string{"a", "a", "a", "b", "b"} {
					if _, err := pub.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: g}); err != nil {
						t.Fatal(err)
					}
				}
				inWork := make(chan struct{})
				crashCtx, crash := context.WithCancel(context.Background())
				dying, err := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}).Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
					close(inWork)
					<-ctx.Done()
					return ctx.Err()
				}, inbox.SubscribeOptions{Workers: 1, Form: form, Lease: 600 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if err := dying.Start(crashCtx); err != nil {
					t.Fatal(err)
				}
				<-inWork
				var mu sync.Mutex
				var order []int
				var crashedAt time.Time
				acked := make(chan struct{}, 5)
				start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
					mu.Lock()
					order = append(order, j.Payload.N)
					if j.Payload.N == 0 && crashedAt.IsZero() {
						t.Errorf("job 0 taken again before the instance holding it died")
					}
					mu.Unlock()
					acked <- struct{}{}
					return nil
				}, inbox.SubscribeOptions{Workers: 3, Form: form, PollInterval: 20 * time.Millisecond})
				// Group b drains while group a waits for its head.
				for range 2 {
					select {
					case <-acked:
					case <-time.After(20 * time.Second):
						t.Fatal("group b did not drain while group a's head was in work")
					}
				}
				mu.Lock()
				if got := fmt.Sprint(order); got != "[3 4]" {
					t.Errorf("while job 0 was in work, the other instance ran %s, want [3 4]", got)
				}
				crashedAt = time.Now()
				mu.Unlock()
				crash()
				<-dying.Done()
				for range 3 {
					select {
					case <-acked:
					case <-time.After(20 * time.Second):
						t.Fatal("group a did not resume after the crash")
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if got := fmt.Sprint(order); got != "[3 4 0 1 2]" {
					t.Fatalf("order after the crash %s, want [3 4 0 1 2]", got)
				}
			})
		}
	})
}

// A retry with a delay keeps the job at the head of its group (the next job of the
// group waits for it) but lets due jobs of other groups pass.
func TestFIFOGroupsDelayedRetry(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		for n, g := range []string{"a", "a", "b"} {
			if _, err := q.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: g}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var order []string
		done := make(chan struct{})
		retried := false
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, fmt.Sprint(j.Payload.N, "/", j.Attempt))
			if j.Payload.N == 0 && !retried {
				retried = true
				return inbox.Retry(300 * time.Millisecond)
			}
			if len(order) == 4 {
				close(done)
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 1, PollInterval: 20 * time.Millisecond})
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs not done")
		}
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(order); got != "[0/1 2/1 0/2 1/1]" {
			t.Fatalf("order %s, want [0/1 2/1 0/2 1/1]: job 2 (group b) passes the delayed job 0, job 1 waits for it", got)
		}
	})
}

// A Group or Partition column the table does not have is a *ConfigError at Start,
// and the rows already published stay as they were.
func TestGroupColumnMissing(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		if _, err := q.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Group: "a", Partition: "p"}); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"Columns.Group", "Columns.Partition"} {
			cols := inbox.GroupColumns()
			if field == "Columns.Group" {
				cols.Group = "no_such_group"
			} else {
				cols.Partition = "no_such_partition"
			}
			bad := newQueue(t, b, inbox.Config[msg]{Columns: cols})
			s, err := bad.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start(t.Context())
			var ce *inbox.ConfigError
			if !errors.As(err, &ce) || ce.Field != field {
				t.Fatalf("Start with a missing %s = %v, want a *ConfigError", field, err)
			}
		}
		st, err := q.Stats(t.Context())
		if err != nil || st.Ready != 1 {
			t.Fatalf("stats after the refused starts %+v (%v), want the job still ready", st, err)
		}
		// A queue without the columns refuses the publish options.
		cols := inbox.DefaultColumns()
		plain := newQueue(t, b, inbox.Config[msg]{Columns: cols})
		var ce *inbox.ConfigError
		if _, err := plain.Publish(t.Context(), msg{}, &inbox.PublishOpts{Group: "a"}); !errors.As(err, &ce) {
			t.Fatalf("Publish with a Group on a queue without the column = %v, want a *ConfigError", err)
		}
	})
}

// The model of FIFO groups: whatever the groups of a run of jobs and however many
// times each fails before it succeeds, the jobs of each group are acked in publish
// order and never two of a group are in work at once (three workers; on Postgres
// with claims that read the claim index in order or the groups' heads, drawn).
//
// Each check drains a table of its own (about a second under -race), so the test
// runs 20 checks unless -rapid.checks asks for a number.
func TestFIFOGroupsOrderProperty(t *testing.T) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if f := flag.Lookup("rapid.checks"); f != nil && !set {
		old := f.Value.String()
		_ = f.Value.Set("20")
		defer func() { _ = f.Value.Set(old) }()
	}
	for _, mk := range []func(*testing.T) *backend{sqliteBackend, pgBackend} {
		t.Run("", func(t *testing.T) { fifoOrderProperty(t, mk(t)) })
	}
}

func fifoOrderProperty(t *testing.T, b *backend) {
	db := b.newDB(t)
	seq := 0
	rapid.Check(t, func(rt *rapid.T) {
		seq++
		ctx := context.Background()
		cfg := inbox.Config[msg]{Table: fmt.Sprintf("%s_%d", b.table, seq), Columns: inbox.GroupColumns(), Logger: quiet()}
		var q *inbox.Queue[msg]
		var err error
		switch db := db.(type) {
		case *sql.DB:
			q, err = inbox.NewSQLite(db, cfg)
		case *pgxpool.Pool:
			q, err = inbox.NewPostgres(db, cfg)
			t.Cleanup(func() {
				for _, s := range []string{"", "_limits", "_periodic"} {
					_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS "`+cfg.Table+s+`"`)
				}
				_, _ = db.Exec(context.Background(), `DELETE FROM gotp_schema WHERE key = $1`, "inbox:"+cfg.Table)
			})
			inbox.ClaimHeads(q, rapid.Bool().Draw(rt, "heads"))
		}
		if err != nil {
			rt.Fatal(err)
		}
		if err := q.CreateTable(ctx); err != nil {
			rt.Fatal(err)
		}
		n := rapid.IntRange(1, 12).Draw(rt, "jobs")
		groups := make([]string, n)
		fails := make([]int, n)
		for i := range n {
			groups[i] = rapid.SampledFrom([]string{"a", "b", "c", ""}).Draw(rt, "group")
			fails[i] = rapid.IntRange(0, 2).Draw(rt, "fails")
			if _, err := q.Publish(ctx, msg{N: i}, &inbox.PublishOpts{Group: groups[i]}); err != nil {
				rt.Fatal(err)
			}
		}
		var mu sync.Mutex
		var broken []string
		running := map[string]int{}
		tries := make([]int, n)
		acked := map[string][]int{}
		left := n
		all := make(chan struct{})
		sub, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			i := j.Payload.N
			g := groups[i]
			mu.Lock()
			if other, busy := running[g]; busy && g != "" {
				broken = append(broken, fmt.Sprintf("job %d of group %s started while job %d is in work", i, g, other))
			}
			running[g] = i
			mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			mu.Lock()
			defer mu.Unlock()
			delete(running, g)
			tries[i]++
			if tries[i] <= fails[i] {
				return inbox.Retry(0)
			}
			acked[g] = append(acked[g], i)
			if left--; left == 0 {
				close(all)
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 3, PollInterval: 5 * time.Millisecond})
		if err != nil {
			rt.Fatal(err)
		}
		if err := sub.Start(ctx); err != nil {
			rt.Fatal(err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := sub.Stop(sctx); err != nil {
				rt.Error(err)
			}
		}()
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			rt.Fatalf("%d of %d jobs not acked", left, n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(broken) > 0 {
			rt.Fatal(broken)
		}
		for g, ids := range acked {
			if g != "" && !slices.IsSorted(ids) {
				rt.Fatalf("group %s acked out of order: %v", g, ids)
			}
		}
	})
}
