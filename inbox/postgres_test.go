package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// The row-lock and advisory-lock forms: two instances on one table of twenty jobs
// handle every job exactly once, on Postgres.
func TestLockFormsTwoInstancesHandleEachJobOnce(t *testing.T) {
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(form.String(), func(t *testing.T) {
			t.Parallel()
			b := pgBackend(t)
			q1 := defaultTable(t, b)
			q2 := newQueue(t, b, inbox.Config[msg]{})
			for i := range 20 {
				if _, err := q1.Publish(t.Context(), msg{N: i}, nil); err != nil {
					t.Fatal(err)
				}
			}
			c := newTally(20)
			res := newResults()
			for _, q := range []*inbox.Queue[msg]{q1, q2} {
				start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
					time.Sleep(5 * time.Millisecond)
					c.add(j.Payload.N)
					if j.Payload.N == 3 && j.Attempt == 1 {
						return inbox.Retry(0)
					}
					return nil
				}, inbox.SubscribeOptions{Workers: 4, Form: form, PollInterval: 50 * time.Millisecond, Observe: res.observe})
			}
			c.wait(t, 20*time.Second)
			for range 21 {
				if r := res.next(t); r.SettleErr != nil {
					t.Fatalf("settlement %+v", r)
				}
			}
			c.mu.Lock()
			if c.seen[3] != 2 {
				t.Errorf("job 3 handled %d times, want 2 (retried once)", c.seen[3])
			}
			c.seen[3] = 1
			c.mu.Unlock()
			c.exactlyOnce(t)
			if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 0 {
				t.Fatalf("%d rows left", n)
			}
		})
	}
}

// The lock forms run on a DatabaseClock queue (the lease form refuses one).
func TestDatabaseClockWithRowLock(t *testing.T) {
	b := pgBackend(t)
	defaultTable(t, b)
	q := newQueue(t, b, inbox.Config[msg]{Clock: inbox.DatabaseClock})
	done := make(chan inbox.Job[msg], 1)
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
		done <- j
		return nil
	}, inbox.SubscribeOptions{Form: inbox.RowLock, PollInterval: 50 * time.Millisecond})
	if _, err := q.Publish(t.Context(), msg{N: 9}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-done:
		if j.Payload.N != 9 || j.Attempt != 1 {
			t.Fatalf("job %+v", j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("job not handled")
	}
}

// Listen/notify: an outside insert announced by the trigger is handled long before
// the poll (an hour), and so is a publish from another instance.
func TestListenNotifyWakesOnOutsideInsertAndOtherInstance(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	b.exec(t, q.NotifyTriggerSQL())
	sub := newQueue(t, b, inbox.Config[msg]{ListenNotify: true})
	other := newQueue(t, b, inbox.Config[msg]{ListenNotify: true})
	started := make(chan int, 2)
	first := make(chan struct{}, 1)
	start(t, sub, func(ctx context.Context, j inbox.Job[msg]) error {
		if j.Payload.N == 0 {
			first <- struct{}{}
			return nil
		}
		started <- j.Payload.N
		return nil
	}, inbox.SubscribeOptions{PollInterval: time.Hour, Workers: 2})
	// The listener wakes the subscription once it listens; this job proves it does.
	b.exec(t, `INSERT INTO "`+b.table+`" (payload) VALUES ($1)`, []byte(`{"n":0}`))
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("first outside insert not handled (listener not up?)")
	}
	for i, insert := range []func(){
		func() { b.exec(t, `INSERT INTO "`+b.table+`" (payload) VALUES ($1)`, []byte(`{"n":1}`)) },
		func() {
			if _, err := other.Publish(t.Context(), msg{N: 2}, nil); err != nil {
				t.Fatal(err)
			}
		},
	} {
		at := time.Now()
		insert()
		select {
		case n := <-started:
			if n != i+1 {
				t.Fatalf("handled %d, want %d", n, i+1)
			}
			if d := time.Since(at); d > 2*time.Second {
				t.Fatalf("notified job %d handled after %v", n, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notified job %d not handled within 10s (poll is an hour)", i+1)
		}
	}
}

// A Postgres connection dropped mid-run (its backend terminated): the subscription
// recovers and nothing is lost.
func TestTerminatedBackendsRecoverWithoutLoss(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	const jobs = 300
	c := newTally(jobs)
	var handled atomic.Int64
	kill := make(chan struct{})
	appName := fmt.Sprintf("inbox-kill-%d", time.Now().UnixNano())
	url := pgURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	victim, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: b.table, ListenNotify: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, victim, func(ctx context.Context, j inbox.Job[msg]) error {
		if handled.Add(1) == jobs/3 {
			close(kill)
		}
		time.Sleep(time.Millisecond)
		c.add(j.Payload.N)
		return nil
	}, inbox.SubscribeOptions{Workers: 4, Lease: 2 * time.Second, PollInterval: 100 * time.Millisecond})
	batch := make([]msg, jobs)
	for i := range batch {
		batch[i] = msg{N: i}
	}
	if err := q.PublishBatch(t.Context(), batch, nil); err != nil {
		t.Fatal(err)
	}
	<-kill
	n := b.queryN(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) k`, appName)
	if n == 0 {
		t.Fatal("no backend terminated")
	}
	c.wait(t, 30*time.Second)
	within(t, 10*time.Second, func() bool {
		return b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`) == 0
	}, "every job acked")
	// A lost ack response may make a job run twice (at least once); a lost claim
	// response delays it by one lease. No job may be lost.
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range jobs {
		if c.seen[i] == 0 {
			t.Errorf("job %d lost", i)
		}
	}
	t.Logf("terminated %d backends; %d handler runs for %d jobs", n, handled.Load(), jobs)
}

// Pool rule: a pool too small for its workers runs fewer deliveries at once and
// never errors.
func TestSmallPoolRunsFewerAtOnceWithoutErrors(t *testing.T) {
	b := pgBackend(t)
	defaultTable(t, b)
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: b.table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 40
	c := newTally(jobs)
	var now, peak atomic.Int64
	res := newResults()
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
		cur := now.Add(1)
		for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
		}
		// The handler publishes through the same pool: it must find a connection.
		if j.Payload.N < jobs/2 {
			if _, err := q.Publish(ctx, msg{N: j.Payload.N + jobs/2}, nil); err != nil {
				t.Errorf("publish from handler: %v", err)
			}
		}
		time.Sleep(10 * time.Millisecond)
		now.Add(-1)
		c.add(j.Payload.N)
		return nil
	}, inbox.SubscribeOptions{Workers: 8, Form: inbox.RowLock, PollInterval: 20 * time.Millisecond, Observe: res.observe})
	for i := range jobs / 2 {
		if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.wait(t, 30*time.Second)
	c.exactlyOnce(t)
	if p := peak.Load(); p > 2 {
		t.Fatalf("%d jobs in work at once on a pool of 3; the row-lock form may hold pool size - 1 = 2", p)
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	for _, r := range res.all {
		if r.SettleErr != nil || r.Outcome != inbox.Acked {
			t.Fatalf("settlement %+v", r)
		}
	}
}

// A stress test of the inbox on several instances: 4 instances x 8 workers x 10,000 jobs on Postgres,
// every job handled exactly once. It takes a few seconds; -short skips it unless
// INBOX_STRESS=1 is set.
func TestStressFourInstancesEightWorkers(t *testing.T) {
	if testing.Short() && os.Getenv("INBOX_STRESS") == "" {
		t.Skip("-short: set INBOX_STRESS=1 to run the 4x8x10,000 Postgres stress test")
	}
	b := pgBackend(t)
	q := defaultTable(t, b)
	const jobs = 10_000
	batch := make([]msg, jobs)
	for i := range batch {
		batch[i] = msg{N: i}
	}
	c := newTally(jobs)
	for range 4 {
		qi := newQueue(t, b, inbox.Config[msg]{})
		start(t, qi, func(ctx context.Context, j inbox.Job[msg]) error {
			c.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 8, PollInterval: 20 * time.Millisecond})
	}
	began := time.Now()
	for i := 0; i < jobs; i += 1000 {
		if err := q.PublishBatch(t.Context(), batch[i:i+1000], nil); err != nil {
			t.Fatal(err)
		}
	}
	c.wait(t, 5*time.Minute)
	c.exactlyOnce(t)
	t.Logf("%d jobs in %v", jobs, time.Since(began))
}

// The lease form's throughput options on Postgres keep every job exactly once:
// several claimers per instance, prefetch, and asynchronous commits.
func TestLeaseOptionsKeepExactlyOnce(t *testing.T) {
	for name, o := range map[string]inbox.SubscribeOptions{
		"claimers":     {Workers: 6, Claimers: 3},
		"prefetch":     {Workers: 4, Prefetch: 12},
		"async-commit": {Workers: 8, AsyncCommit: true, Prefetch: 8},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := pgBackend(t)
			q := defaultTable(t, b)
			const jobs = 2000
			batch := make([]msg, jobs)
			for i := range batch {
				batch[i] = msg{N: i}
			}
			if err := q.PublishBatch(t.Context(), batch, nil); err != nil {
				t.Fatal(err)
			}
			c := newTally(jobs)
			for range 2 {
				start(t, newQueue(t, b, inbox.Config[msg]{}), func(ctx context.Context, j inbox.Job[msg]) error {
					c.add(j.Payload.N)
					return nil
				}, o)
			}
			c.wait(t, 60*time.Second)
			c.exactlyOnce(t)
			within(t, 10*time.Second, func() bool {
				return b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`) == 0
			}, "every ack written")
		})
	}
}

// appPool opens a pool whose connections carry a unique application_name, so that a
// test can terminate exactly its backends.
func appPool(t testing.TB, maxConns int32) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("inbox-%d", time.Now().UnixNano())
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, app
}

// appQueue makes the default schema for b's table and a queue on it whose pool
// (of 4 connections) is named by the returned application name (for terminate).
func appQueue(t *testing.T, b *backend) (*inbox.Queue[msg], string) {
	t.Helper()
	defaultTable(t, b)
	pool, app := appPool(t, 4)
	q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: b.table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return q, app
}

// terminate ends every backend of application app on this test's database, and
// reports how many.
func terminate(t *testing.T, b *backend, app string) int64 {
	t.Helper()
	return b.queryN(t, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1) k`, app)
}

// When the connection holding a job's row lock or advisory lock dies, the handler's
// context is cancelled at once with ErrLeaseLost as its cause; whatever the handler
// then returns is never reported as settled, and the job runs again, once, to a
// single clean ack.
func TestLockLossCancelsHandlerAndIsNeverASuccess(t *testing.T) {
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(form.String(), func(t *testing.T) {
			t.Parallel()
			b := pgBackend(t)
			q, app := appQueue(t, b)
			res := newResults()
			inJob := make(chan struct{}, 2)
			cancelled := make(chan time.Time, 1)
			var runs atomic.Int64
			start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
				if runs.Add(1) > 1 {
					return nil
				}
				inJob <- struct{}{}
				<-ctx.Done()
				cancelled <- time.Now()
				if cause := context.Cause(ctx); !errors.Is(cause, inbox.ErrLeaseLost) {
					t.Errorf("cause %v, want ErrLeaseLost", cause)
				} else if le, _ := errors.AsType[*inbox.LeaseLostError](cause); le.Op != "lock" || le.Err == nil {
					t.Errorf("cause %#v, want Op lock with the connection's error", le)
				}
				return nil // would ack, if the lock were still held
			}, inbox.SubscribeOptions{Form: form, PollInterval: 20 * time.Millisecond, Observe: res.observe})
			id, err := q.Publish(t.Context(), msg{N: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			gotptest.Recv(t, inJob)
			killed := time.Now()
			if n := terminate(t, b, app); n == 0 {
				t.Fatal("no backend terminated")
			}
			at := gotptest.Recv(t, cancelled)
			// The target is 100 ms (BenchmarkLockLoss reports the real figure); the
			// bound is generous for a loaded machine under -race.
			if took := at.Sub(killed); took > time.Second {
				t.Errorf("handler cancelled %v after pg_terminate_backend returned, want within 1 s (target 100 ms)", took)
			}
			t.Logf("handler cancelled %v after pg_terminate_backend returned", at.Sub(killed))
			first := res.next(t)
			if first.ID != id || !errors.Is(first.SettleErr, inbox.ErrLeaseLost) {
				t.Fatalf("first run: %+v, want its settlement refused with ErrLeaseLost", first)
			}
			second := res.next(t)
			if second.ID != id || second.Outcome != inbox.Acked || second.SettleErr != nil {
				t.Fatalf("second run: %+v, want a clean ack", second)
			}
			if h := q.Health(); h.LocksLost != 1 {
				t.Fatalf("health %+v, want one lock lost", h)
			}
			if o := q.Outcomes(); o["lease_lost"] != 1 || o["ack"] != 1 {
				t.Fatalf("outcomes %v, want one ack and one lease_lost", o)
			}
		})
	}
}

// An advisory-lock settlement is fenced by the attempt its claim wrote: when the row
// carries another claim's attempt, the late settlement is refused with a
// *LeaseLostError and the row stays.
func TestAdvisorySettlementIsFencedByAttempt(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	res := newResults()
	inJob := make(chan int64, 1)
	release := make(chan struct{})
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
		inJob <- j.ID
		<-release
		return nil
	}, inbox.SubscribeOptions{Form: inbox.AdvisoryLock, PollInterval: 20 * time.Millisecond, Observe: res.observe})
	if _, err := q.Publish(t.Context(), msg{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	id := gotptest.Recv(t, inJob)
	// As a newer claim would: the attempt moves on (and the row is put out of reach,
	// so that no claim of this subscription takes it again).
	b.exec(t, `UPDATE "`+b.table+`" SET attempts = attempts + 1, locked_until = now() + interval '1 hour' WHERE id = $1`, id)
	close(release)
	r := res.next(t)
	lost, ok := errors.AsType[*inbox.LeaseLostError](r.SettleErr)
	if !ok || lost.ID != id || lost.Op != "ack" {
		t.Fatalf("late settlement: %+v, want *LeaseLostError on ack", r)
	}
	if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE id = $1`, id); n != 1 {
		t.Fatal("the row owned by the newer claim was deleted by the fenced-out one")
	}
}
