package inbox_test

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Tests of a hostile review of Limits (issue 23): each tries to break a guarantee
// the package doc states for Concurrency, PerPartition and Rate.

// A Rate window's counter never goes back to an earlier window. A claimer whose
// "now" falls in window w, and whose statement runs after another claimer (whose
// now fell in w+1) has moved the counter row to w+1, must not start afresh in w:
// it would write the row back to w, and every claimer in w+1 would then find no
// count for w+1 and start Rate more in it. That needs no clock skew: a claimer
// whose now is read just before a window's edge and whose statement runs just
// after it (a GC pause, a settlement statement first, a wait for SQLite's write
// lock) is enough.
//
// The test stands in for the claimer in w+1 by writing its count (Rate starts in
// w+1, the most it may hold) into TABLE_limits early in window w, then starts an
// instance with a backlog. Window w+1 is full, so the instance may start at most
// Rate jobs before w+2 opens (those it finds room for in w, whose count the row
// no longer holds); before the fix it started Rate in w (resetting the row to w)
// and Rate more in w+1.
func TestReviewRateCounterNeverGoesBack(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		const rate, per = 3, time.Second
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		if err := pub.PublishBatch(t.Context(), make([]msg, 4*rate), nil); err != nil {
			t.Fatal(err)
		}
		// Early in a window (windows count from the Unix epoch): to a phase of the
		// clock, not to wait for an event.
		now := time.Now()
		w := now.UnixNano()/int64(per) + 1
		time.Sleep(time.Until(time.Unix(0, w*int64(per)).Add(20 * time.Millisecond)))
		// The row holds a window's start in nanoseconds since the epoch.
		b.exec(t, `INSERT INTO "`+b.table+`_limits" (name, window_start, starts) VALUES ('starts', `+b.ph(1)+`, `+b.ph(2)+`)
			ON CONFLICT (name) DO UPDATE SET window_start = excluded.window_start, starts = excluded.starts`, (w+1)*int64(per), rate)
		var mu sync.Mutex
		var starts []time.Time
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil
		}, inbox.SubscribeOptions{Workers: 2 * rate, Prefetch: inbox.NoPrefetch, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Rate: rate, Per: per}})
		w2 := time.Unix(0, (w+2)*int64(per))
		time.Sleep(time.Until(w2.Add(-50 * time.Millisecond))) // to a phase of the clock
		mu.Lock()
		before := 0
		for _, s := range starts {
			if s.Before(w2) {
				before++
			}
		}
		mu.Unlock()
		if before > rate {
			t.Fatalf("%d starts before window w+2 opened, with w+1 full (Rate %d): the counter went back to w and w+1 started afresh", before, rate)
		}
		t.Logf("%d starts in windows w and w+1 (Rate %d, w+1 full)", before, rate)
	})
}

// Concurrency, PerPartition and Rate together hold across two instances while
// one instance's Postgres backends are terminated again and again
// (pg_terminate_backend: every statement of that instance may fail, before or
// after its commit): never more than Concurrency handlers at once, nor more than
// PerPartition of a key, and every job is handled, none lost or wedged.
func TestReviewLimitsHoldWhileBackendsAreTerminated(t *testing.T) {
	b := pgBackend(t)
	groupTable(t, b)
	const n, conc, perKey = 240, 4, 2
	keyOf := func(i int) string { return string(rune('a' + i%5)) }
	pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	for i := range n {
		if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: keyOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	g := newGauge()
	done := newTally(n)
	runs := newTally(-1) // by job and attempt: an attempt handled twice was claimed twice
	h := func(ctx context.Context, j inbox.Job[msg]) error {
		k := keyOf(j.Payload.N)
		g.enter(k)
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
		}
		g.leave(k)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		done.add(j.Payload.N)
		runs.add(j.Payload.N*100 + j.Attempt)
		return nil
	}
	o := inbox.SubscribeOptions{Workers: 4, Claimers: 2, Lease: 2 * time.Second, PollInterval: 10 * time.Millisecond,
		Limits: inbox.Limits{Concurrency: conc, PerPartition: perKey}}
	victimPool, app := appPool(t, 4)
	victim, err := inbox.NewPostgres(victimPool, inbox.Config[msg]{Table: b.table, Columns: inbox.GroupColumns(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, victim, h, o)
	start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), h, o)
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Go(func() {
		tick := time.NewTicker(15 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = b.queryN(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = $1) k`, app)
			}
		}
	})
	select {
	case <-done.all:
	case <-time.After(90 * time.Second):
	}
	close(stop)
	killer.Wait()
	done.wait(t, 60*time.Second)
	// Under the gauge's lock: a job run again at its next attempt (a victim
	// that could not settle within its lease) may still be in its handler.
	g.mu.Lock()
	if g.max > conc {
		t.Errorf("%d handlers at once, Concurrency %d", g.max, conc)
	}
	for k, m := range g.keyMax {
		if m > perKey {
			t.Errorf("%d handlers of key %q at once, PerPartition %d", m, k, perKey)
		}
	}
	g.mu.Unlock()
	// A victim that cannot settle within its lease runs a job again at its next
	// attempt (at least once, as documented); no attempt may run twice.
	runs.mu.Lock()
	for ja, c := range runs.seen {
		if c > 1 {
			t.Errorf("job %d attempt %d handled %d times", ja/100, ja%100, c)
		}
	}
	t.Logf("%d handler runs for %d jobs", len(runs.seen), n)
	runs.mu.Unlock()
	within(t, 30*time.Second, func() bool {
		return b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE dead_at IS NULL`) == 0
	}, "every row settled")
}

// Stop(ctx) with limits keeps its deadline while handlers hold every slot and
// place, and gives the slots back as the released jobs settle: another instance
// then starts at once, not a lease later.
func TestReviewStopDeadlineGivesSlotsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		const n = 20
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for i := range n {
			if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: string(rune('a' + i%2))}); err != nil {
				t.Fatal(err)
			}
		}
		l := inbox.Limits{Concurrency: 3, PerPartition: 2, Rate: 1000, Per: time.Second}
		o := inbox.SubscribeOptions{Workers: 4, Claimers: 2, Lease: 20 * time.Second, PollInterval: 10 * time.Millisecond, Limits: l}
		entered := make(chan struct{}, n)
		// The first instance's log, shown if the test fails: the limit went
		// unfilled for 20 s twice in full runs on Postgres (2026-12-06), not
		// reproduced alone.
		lb := &syncBuf{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the first instance's log:\n%s", lb.String())
			}
		})
		qa := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns(), Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		a, err := qa.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatalf("the limit was not filled; health %+v", qa.Health())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		_ = a.Stop(ctx)
		if d := time.Since(began); d > 100*time.Millisecond+600*time.Millisecond {
			t.Fatalf("Stop returned %v after it was called, deadline 100 ms", d)
		}
		<-a.Done()
		done := newTally(n)
		began = time.Now()
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			done.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 4, Lease: o.Lease, PollInterval: o.PollInterval, Limits: l})
		done.wait(t, 10*time.Second) // well within the stopped instance's 20 s leases
		t.Logf("second instance drained %d jobs in %v", n, time.Since(began))
	})
}

// Stop(ctx) keeps its deadline on SQLite while another connection holds the write
// lock (every statement of the subscription waits for it: busy), with handlers
// holding the Concurrency slots; nothing is lost once the lock is released.
func TestReviewStopDeadlineWhileSQLiteIsLocked(t *testing.T) {
	b := sqliteBackend(t)
	groupTable(t, b)
	const n = 12
	pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	if err := pub.PublishBatch(t.Context(), make([]msg, n), nil); err != nil {
		t.Fatal(err)
	}
	ids := make(chan int64, 2*n)
	entered := make(chan struct{}, 2*n)
	release := make(chan struct{})
	a, err := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}).Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		ids <- j.ID
		return nil
	}, inbox.SubscribeOptions{Workers: 4, Lease: 2 * time.Second, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Concurrency: 2, Rate: 100, Per: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the limit was not filled")
		}
	}
	// Another writer takes the lock and holds it past Stop's deadline.
	conn, err := b.newDB(t).(*sql.DB).Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	close(release) // the handlers return and try to settle: busy
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_ = a.Stop(ctx)
	if d := time.Since(began); d > 200*time.Millisecond+600*time.Millisecond {
		t.Fatalf("Stop returned %v after it was called, deadline 200 ms, with the database locked", d)
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription's goroutines did not end after Stop returned")
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Every job runs: those settled before the lock, and the others once their
	// leases end.
	done := newTally(n)
	start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
		done.add(j.Payload.N)
		return nil
	}, inbox.SubscribeOptions{Workers: 4, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Concurrency: 2, Rate: 100, Per: time.Second}})
	within(t, 20*time.Second, func() bool {
		return b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`) == 0
	}, "every job handled")
}

// A change of Limits.Per (every instance restarted with the new period) leaves
// Rate working: the counter row a subscription with the old Per left behind
// neither stops the new one's starts nor is taken for a later window.
func TestReviewRateSurvivesAChangeOfPer(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for _, per := range []time.Duration{50 * time.Millisecond, time.Hour, 7 * time.Millisecond} {
			if err := pub.PublishBatch(t.Context(), make([]msg, 3), nil); err != nil {
				t.Fatal(err)
			}
			var handled atomic.Int64
			s := start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				handled.Add(1)
				return nil
			}, inbox.SubscribeOptions{Workers: 2, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Rate: 5, Per: per}})
			within(t, 10*time.Second, func() bool { return handled.Load() == 3 }, "3 jobs handled with Per "+per.String())
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err := s.Stop(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}
