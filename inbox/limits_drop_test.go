package inbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// syncBuf is a log sink safe for the subscriptions' goroutines. If want is set,
// seen is closed once a write contains it.
type syncBuf struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want != "" && bytes.Contains(p, []byte(s.want)) {
		select {
		case <-s.seen:
		default:
			close(s.seen)
		}
	}
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TABLE_limits dropped while two instances drain under each limit (a careless
// operator): the instance that finds it gone makes it again and says so at WARN,
// with a fence that keeps every slot and place untaken for a lease, until the
// dropped table's holders have lost theirs; never more in work than the limit;
// every job runs; the log does not flood. The handlers that start after the drop
// wait for that WARN, so that the drain cannot end on the dropped table's leases;
// those that start while the DROP waits for SQLite's write lock wait for the drop,
// so that the lanes' claims cannot hold it off until every other job has run (the
// drain then ended with no claim after the drop, and no WARN: 1 run in 150 under
// load).
// Before, the lanes retried the missing table every 2 ms, logging a WARN each
// time (4,400 lines, 1.1 MB in 20 s), and once their leases ran out claimed
// nothing more: the drain wedged for good.
func TestAttackLimitsTableDroppedWhileRunning(t *testing.T) {
	cases := []struct {
		name string
		l    inbox.Limits
	}{
		{"concurrency", inbox.Limits{Concurrency: 2}},
		{"perpartition", inbox.Limits{PerPartition: 1}},
		{"both", inbox.Limits{Concurrency: 2, PerPartition: 1}},
		{"rate", inbox.Limits{Rate: 20, Per: 100 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, b *backend) {
				const n = 60
				groupTable(t, b)
				lb := &syncBuf{want: "made again", seen: make(chan struct{})}
				logger := slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo}))
				g := newGauge()
				var done atomic.Int64
				dropping, dropped := make(chan struct{}), make(chan struct{})
				var once sync.Once
				tally := newTally(n)
				for range 2 {
					start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns(), Logger: logger}), func(ctx context.Context, j inbox.Job[msg]) error {
						wait := func(ch chan struct{}) error {
							select {
							case <-ch:
								return nil
							case <-ctx.Done():
								return context.Cause(ctx)
							}
						}
						select {
						case <-dropped: // made again before this job runs
							if err := wait(lb.seen); err != nil {
								return err
							}
						case <-dropping: // claimed before the drop: let the drop go first
							if err := wait(dropped); err != nil {
								return err
							}
						default:
						}
						k := fmt.Sprint("k", j.Payload.N%2)
						g.enter(k)
						time.Sleep(5 * time.Millisecond)
						g.leave(k)
						if done.Add(1) == 10 {
							once.Do(func() {
								close(dropping)
								b.exec(t, `DROP TABLE "`+b.table+`_limits"`)
								close(dropped)
							})
						}
						tally.add(j.Payload.N)
						return nil
					}, inbox.SubscribeOptions{Workers: 3, PollInterval: 20 * time.Millisecond, Lease: 600 * time.Millisecond, Limits: c.l})
				}
				// Both instances run before the jobs come (and the drop with them).
				pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
				for i := range n {
					if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: fmt.Sprint("k", i%2)}); err != nil {
						t.Fatal(err)
					}
				}
				select {
				case <-tally.all:
				case <-time.After(30 * time.Second):
					l := lb.String()
					tally.mu.Lock()
					t.Fatalf("%d of %d jobs handled in 30 s; log:\n%s", len(tally.seen), n, l[max(0, len(l)-3000):])
				}
				l := lb.String()
				if !strings.Contains(l, "was missing") {
					t.Errorf("no WARN that TABLE_limits was made again; log:\n%s", l[max(0, len(l)-2000):])
				}
				if lines := strings.Count(l, "\n"); lines > 200 {
					t.Errorf("%d log lines: the missing table flooded the log; last:\n%s", lines, l[max(0, len(l)-2000):])
				}
				if c.l.Concurrency > 0 && g.max > c.l.Concurrency {
					t.Errorf("%d jobs in work at once, Concurrency %d", g.max, c.l.Concurrency)
				}
				for k, m := range g.keyMax {
					if c.l.PerPartition > 0 && m > c.l.PerPartition {
						t.Errorf("key %s: %d jobs in work at once, PerPartition %d", k, m, c.l.PerPartition)
					}
				}
			})
		})
	}
}

// TABLE_limits dropped before a subscription starts on a table Migrate made: Start
// makes it again, logs that at WARN and fences it for a lease (instances still
// running may hold the dropped table's slots); then the limit holds and the jobs
// run. A table mapped by the caller (no version recorded) gets TABLE_limits made
// at its first Start with an INFO line and no fence. Before, both were made
// silently, and the first with no fence.
func TestLimitsTableMadeAgainAtStart(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		b.exec(t, `DROP TABLE "`+b.table+`_limits"`)
		lb := &syncBuf{}
		logger := slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo}))
		q := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns(), Logger: logger})
		for i := range 10 {
			if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		g := newGauge()
		done := newTally(10)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			g.enter("")
			time.Sleep(time.Millisecond)
			g.leave("")
			done.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 4, PollInterval: 20 * time.Millisecond, Lease: 400 * time.Millisecond, Limits: inbox.Limits{Concurrency: 2}})
		if l := lb.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "was missing") {
			t.Errorf("Start made TABLE_limits again without a WARN; log:\n%s", l)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name = 'fence'`); n != 1 {
			t.Errorf("%d fence rows, want 1", n)
		}
		done.wait(t, 20*time.Second)
		if g.max > 2 {
			t.Errorf("%d jobs in work at once, Concurrency 2", g.max)
		}

		// A caller's own table (made here by Migrate, its version record and
		// TABLE_limits then removed): made with INFO, no fence.
		own := b.table + "_own"
		t.Cleanup(func() {
			for _, s := range []string{"", "_periodic", "_limits"} {
				b.exec(t, `DROP TABLE IF EXISTS "`+own+s+`"`)
			}
		})
		if _, err := inbox.Migrate(t.Context(), dbOf(t, b), own); err != nil {
			t.Fatal(err)
		}
		b.exec(t, `DELETE FROM gotp_schema WHERE key = `+b.ph(1), "inbox:"+own)
		b.exec(t, `DROP TABLE "`+own+`_limits"`)
		c := newQueue(t, b, inbox.Config[msg]{Table: own, Columns: inbox.GroupColumns(), Logger: logger})
		s, err := c.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{Limits: inbox.Limits{Concurrency: 2}})
		if err != nil {
			t.Fatal(err)
		}
		before := strings.Count(lb.String(), "level=WARN")
		run(t, s)
		if strings.Count(lb.String(), "level=WARN") != before || !strings.Contains(lb.String(), "_own_limits\\\" for Limits") {
			t.Errorf("a first TABLE_limits of the caller's own table: want an INFO line and no WARN; log:\n%s", lb.String())
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+own+`_limits" WHERE name = 'fence'`); n != 0 {
			t.Errorf("%d fence rows on a first TABLE_limits, want 0", n)
		}
	})
}

// A lane that loses its slots (here an operator resets TABLE_limits' slot rows,
// as a stalled database or a cut connection would also make it lose them) while
// it holds rows waiting for a slot, and no other row of the table may be claimed:
// it takes slots again for the rows it holds and runs them. Before, a lane took
// new slots only while the table had a claimable row, and these rows, held by
// the lane and their leases extended, waited for a slot for ever (and Stop for
// them).
func TestLimitsSlotsLostWithRowsWaiting(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		release := make(chan struct{})
		started := make(chan int, 8)
		var first atomic.Int64
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			started <- j.Payload.N
			if first.Add(1) <= 2 {
				select { // the first two fill the slots until the slots are lost
				case <-release:
				case <-ctx.Done():
				}
				return context.Cause(ctx)
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 2, Prefetch: 2, PollInterval: 20 * time.Millisecond, Lease: 600 * time.Millisecond,
			Backoff: func(int) time.Duration { return time.Hour }, // the two cut short stay out of the way
			Limits:  inbox.Limits{Concurrency: 2}})
		for i := range 4 {
			if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		blocked := map[int]bool{}
		for range 2 {
			select {
			case n := <-started:
				blocked[n] = true
			case <-time.After(20 * time.Second):
				t.Fatal("the first two jobs did not start")
			}
		}
		// All four rows are held by the lane (two running, two waiting for a
		// slot, prefetched); none is claimable. Reset the slots.
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE claimed_at IS NOT NULL`) == 4
		}, "the lane holds all four rows")
		b.exec(t, `UPDATE "`+b.table+`_limits" SET window_start = 0, starts = 0 WHERE name LIKE 'slot %'`)
		got := map[int]bool{}
		for len(got) < 2 {
			select {
			case n := <-started:
				got[n] = true
			case <-time.After(20 * time.Second):
				t.Fatalf("the rows waiting for a slot never ran after the slots were lost (ran %v)", got)
			}
		}
		close(release)
		for n := range got {
			if blocked[n] {
				t.Fatalf("ran %v after the slots were lost, want the two that waited (the first were %v)", got, blocked)
			}
		}
	})
}

// TABLE_limits emptied by hand (DELETE, TRUNCATE) while a subscription under
// Concurrency drains: the slot rows are made again, at WARN and fenced for a
// lease as a dropped table is, and every job runs within the limit. Before, no
// take found a slot row any more: once the lease of its slots ran out the lane
// claimed nothing, for good (19 of 40 jobs on SQLite).
func TestLimitsSlotRowsDeleted(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		lb := &syncBuf{want: "were missing", seen: make(chan struct{})}
		lq := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns(), Logger: slog.New(slog.NewTextHandler(lb, nil))})
		const n = 40
		g := newGauge()
		deleted := make(chan struct{})
		var once sync.Once
		done := newTally(n)
		start(t, lq, func(ctx context.Context, j inbox.Job[msg]) error {
			select {
			case <-deleted:
				select { // the rows made again before this job runs
				case <-lb.seen:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			default:
			}
			g.enter("")
			time.Sleep(2 * time.Millisecond)
			g.leave("")
			if j.Payload.N == 5 {
				once.Do(func() {
					b.exec(t, `DELETE FROM "`+b.table+`_limits"`)
					close(deleted)
				})
			}
			done.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 3, PollInterval: 20 * time.Millisecond, Lease: 600 * time.Millisecond, Limits: inbox.Limits{Concurrency: 2}})
		for i := range n {
			if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		done.wait(t, 30*time.Second)
		if g.max > 2 {
			t.Errorf("%d jobs in work at once, Concurrency 2", g.max)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name LIKE 'slot %'`); n != 2 {
			t.Errorf("%d slot rows, want 2", n)
		}
	})
}
