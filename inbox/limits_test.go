package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// gauge tracks how many handlers are in work at once, overall and per key, across
// every instance of a test, and the most seen.
type gauge struct {
	mu       sync.Mutex
	now, max int
	key      map[string]int
	keyMax   map[string]int
}

func newGauge() *gauge { return &gauge{key: map[string]int{}, keyMax: map[string]int{}} }

func (g *gauge) enter(k string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now++
	g.max = max(g.max, g.now)
	g.key[k]++
	g.keyMax[k] = max(g.keyMax[k], g.key[k])
}

func (g *gauge) leave(k string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now--
	g.key[k]--
}

// drainLimited publishes n jobs (job i with partition key keyOf(i)), drains them
// with two instances of 6 workers each under l, and reports the gauge.
func drainLimited(t *testing.T, b *backend, l inbox.Limits, n int, keyOf func(int) string) *gauge {
	return drainLimitedBy(t, b, l, n, keyOf, 2, inbox.SubscribeOptions{Workers: 6})
}

// drainLimitedBy is drainLimited with the given instances, each subscribed with o
// (and l, and a poll interval of 10 ms).
func drainLimitedBy(t *testing.T, b *backend, l inbox.Limits, n int, keyOf func(int) string, instances int, o inbox.SubscribeOptions) *gauge {
	t.Helper()
	groupTable(t, b)
	pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	for i := range n {
		if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: keyOf(i)}); err != nil {
			t.Fatal(err)
		}
	}
	g := newGauge()
	var done atomic.Int64
	all := make(chan struct{})
	o.Limits, o.PollInterval = l, 10*time.Millisecond
	for range instances {
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			k := keyOf(j.Payload.N)
			g.enter(k)
			time.Sleep(3 * time.Millisecond)
			g.leave(k)
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil
		}, o)
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d jobs done", done.Load(), n)
	}
	return g
}

// Limits.Concurrency holds the table's jobs in work across two instances of 6
// workers each to 3.
func TestLimitsConcurrency(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		g := drainLimited(t, b, inbox.Limits{Concurrency: 3}, 60, func(int) string { return "" })
		if g.max > 3 {
			t.Fatalf("%d jobs in work at once, limit 3", g.max)
		}
	})
}

// Limits.Concurrency holds across three instances of 8 workers and two claimers
// each (on Postgres, lanes that take slots concurrently), with fast handlers that
// the default prefetch serves: at most 5 handlers run at once.
func TestLimitsConcurrencyThreeInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		g := drainLimitedBy(t, b, inbox.Limits{Concurrency: 5}, 300, func(int) string { return "" }, 3, inbox.SubscribeOptions{Workers: 8, Claimers: 2})
		if g.max > 5 {
			t.Fatalf("%d jobs in work at once, limit 5", g.max)
		}
		if g.max < 2 {
			t.Logf("at most %d jobs in work at once", g.max)
		}
	})
}

// Limits.Concurrency holds across a crash: an instance abandoned (as in a crash)
// while its handlers fill the limit keeps its places (its slots) until their lease
// ends, so a second instance starts no handler before then; it then runs every
// job, the crashed instance's too, at most 3 at once.
func TestLimitsConcurrencyCrash(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		const n, limit = 30, 3
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for i := range n {
			if _, err := pub.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		g := newGauge()
		o := inbox.SubscribeOptions{Workers: 6, Lease: 1500 * time.Millisecond, Limits: inbox.Limits{Concurrency: limit}, PollInterval: 10 * time.Millisecond}
		entered := make(chan struct{}, n)
		crashed, crash := context.WithCancel(context.Background())
		a, err := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}).Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			g.enter("")
			defer g.leave("")
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(crashed); err != nil {
			t.Fatal(err)
		}
		for range limit {
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the first instance did not fill the limit")
			}
		}
		crash()
		<-a.Done()
		// Where the crashed instance's places (its slots) end, in microseconds
		// since the epoch.
		until := b.queryN(t, `SELECT min(starts) FROM "`+b.table+`_limits" WHERE name LIKE 'slot %' AND starts > 0`)
		var first atomic.Int64
		done := newTally(n)
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			first.CompareAndSwap(0, time.Now().UnixMicro())
			g.enter("")
			time.Sleep(2 * time.Millisecond)
			g.leave("")
			done.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 6, Limits: o.Limits, PollInterval: o.PollInterval})
		done.wait(t, 60*time.Second)
		if f := first.Load(); f < until {
			t.Fatalf("the second instance started a handler %v before the crashed instance's places ended", time.Duration(until-f)*time.Microsecond)
		}
		if g.max > limit {
			t.Fatalf("%d jobs in work at once, limit %d", g.max, limit)
		}
	})
}

// Limits.PerPartition holds each key's jobs in work to 2 across two instances,
// while the table as a whole runs more.
func TestLimitsPerPartition(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		g := drainLimited(t, b, inbox.Limits{PerPartition: 2}, 90, func(i int) string { return fmt.Sprint("k", i%3) })
		for k, m := range g.keyMax {
			if m > 2 {
				t.Fatalf("key %s had %d jobs in work at once, limit 2", k, m)
			}
		}
		if g.max < 3 {
			t.Logf("at most %d jobs in work at once across keys", g.max)
		}
	})
}

// Limits.Rate allows at most Rate claims per window of Per across two instances:
// 20 jobs at 4 per 300 ms take at least five windows, so the last starts more
// than two windows after the first (three, less the delay from a claim to its
// handler's start).
func TestLimitsRate(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		const n, per = 20, 300 * time.Millisecond
		for i := range n {
			if _, err := pub.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		starts := startRated(t, b, n, 4, inbox.Limits{Rate: 4, Per: per}).wait(t)
		if span := starts[n-1].Sub(starts[0]); span <= 2*per {
			t.Fatalf("20 starts at 4 per %v spanned %v", per, span)
		}
	})
}

// Fair claims: a key with 10,000 jobs published first cannot starve a key with 10
// published after it: the 10 are done while most of the 10,000 still wait.
func TestLimitsFairness(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) { fairness(t, b, inbox.Limits{Fair: true}) })
}

// Fair claims under a Concurrency limit too (on Postgres, claims with slots and
// the default prefetch).
func TestLimitsFairnessConcurrency(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) { fairness(t, b, inbox.Limits{Fair: true, Concurrency: 2}) })
}

func fairness(t *testing.T, b *backend, limits inbox.Limits) {
	q := groupTable(t, b)
	big := make([]msg, 10000)
	for i := range big {
		big[i] = msg{N: i}
	}
	if err := q.PublishBatch(t.Context(), big, &inbox.PublishOpts{Partition: "big"}); err != nil {
		t.Fatal(err)
	}
	small := make([]msg, 10)
	for i := range small {
		small[i] = msg{N: -1 - i}
	}
	if err := q.PublishBatch(t.Context(), small, &inbox.PublishOpts{Partition: "small"}); err != nil {
		t.Fatal(err)
	}
	var bigDone, smallDone atomic.Int64
	var bigWhenSmallDone atomic.Int64
	finished := make(chan struct{})
	start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
		if j.Payload.N >= 0 {
			bigDone.Add(1)
			return nil
		}
		if smallDone.Add(1) == 10 {
			bigWhenSmallDone.Store(bigDone.Load())
			close(finished)
		}
		return nil
	}, inbox.SubscribeOptions{Workers: 1, Limits: limits})
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatalf("the small key's jobs not done: %d of 10 (big: %d)", smallDone.Load(), bigDone.Load())
	}
	// One worker: every claim is a tie between the keys, won by either at
	// random, so the 10 are done after about 10 of the big key's jobs.
	if n := bigWhenSmallDone.Load(); n > 200 {
		t.Fatalf("the big key had %d jobs done before the small key's 10", n)
	}
}

// Limits the form or the table cannot enforce are refused at Subscribe: negative
// limits, a Rate without Per, PerPartition or Fair without a Partition column, and
// any limit in the lock forms (RowLock, AdvisoryLock), whose rows in work other
// instances cannot count.
func TestLimitsRefused(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		cols := inbox.DefaultColumns()
		noPart := newQueue(t, b, inbox.Config[msg]{Columns: cols})
		h := func(context.Context, inbox.Job[msg]) error { return nil }
		cases := []struct {
			q *inbox.Queue[msg]
			o inbox.SubscribeOptions
		}{
			{q, inbox.SubscribeOptions{Limits: inbox.Limits{Concurrency: -1}}},
			{q, inbox.SubscribeOptions{Limits: inbox.Limits{Rate: 3}}},
			{noPart, inbox.SubscribeOptions{Limits: inbox.Limits{PerPartition: 3}}},
			{noPart, inbox.SubscribeOptions{Limits: inbox.Limits{Fair: true}}},
		}
		if b.dialect == inbox.Postgres {
			cases = append(cases, struct {
				q *inbox.Queue[msg]
				o inbox.SubscribeOptions
			}{q, inbox.SubscribeOptions{Form: inbox.RowLock, Limits: inbox.Limits{Concurrency: 3}}}, struct {
				q *inbox.Queue[msg]
				o inbox.SubscribeOptions
			}{q, inbox.SubscribeOptions{Form: inbox.AdvisoryLock, Limits: inbox.Limits{PerPartition: 2}}})
		}
		for i, c := range cases {
			_, err := c.q.Subscribe(h, c.o)
			if _, ok := errors.AsType[*inbox.ConfigError](err); !ok {
				t.Errorf("case %d: Subscribe = %v, want a *ConfigError", i, err)
			}
		}
	})
}

// Fair claims of two instances (two claimers each) never take a row that another
// claim took after their snapshot: every job of a drain runs once.
func TestLimitsFairRunsOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		const n = 2000
		groupTable(t, b)
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for k := range 10 {
			jobs := make([]msg, n/10)
			for i := range jobs {
				jobs[i] = msg{N: k*n/10 + i}
			}
			if err := pub.PublishBatch(t.Context(), jobs, &inbox.PublishOpts{Partition: fmt.Sprint("k", k)}); err != nil {
				t.Fatal(err)
			}
		}
		done := newTally(n)
		for range 2 {
			start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 8, Claimers: 2, Limits: inbox.Limits{Fair: true}, PollInterval: 10 * time.Millisecond})
		}
		done.wait(t, 60*time.Second)
		done.mu.Lock()
		defer done.mu.Unlock()
		for id, c := range done.seen {
			if c > 1 {
				t.Errorf("job %d ran %d times", id, c)
			}
		}
	})
}

// Limits.PerPartition (with Concurrency or not) holds each key's rows in work to
// 2 across two instances of two claimers each, in the database itself: a sampler
// counts each key's rows in work while they drain 600 jobs over 6 keys and some
// without a key (which are not limited, and all run).
func TestLimitsPerPartitionSampled(t *testing.T) {
	for _, l := range []inbox.Limits{{PerPartition: 2}, {PerPartition: 2, Concurrency: 5}} {
		t.Run(fmt.Sprint("concurrency", l.Concurrency), func(t *testing.T) {
			eachDB(t, func(t *testing.T, b *backend) {
				groupTable(t, b)
				stop := make(chan struct{})
				most := make(chan int64, 1)
				go func() {
					var m int64
					defer func() { most <- m }()
					for {
						select {
						case <-stop:
							return
						default:
						}
						// The places of each key held (a lane may claim more rows than its
						// places, prefetched: the gauge checks the handlers), and the places
						// made of each key.
						q := `SELECT COALESCE(max(c), 0) FROM (SELECT count(*) AS c FROM "` + b.table + `_limits" WHERE name LIKE 'p %' AND (starts > ` + b.nowMicrosSQL() + ` OR ` + b.ph(1) + `) GROUP BY ` + b.placeKeySQL("name") + `) s`
						m = max(m, b.queryN(t, q, false), b.queryN(t, q, true)) // held; every place made
					}
				}()
				g := drainLimitedBy(t, b, l, 600, func(i int) string {
					if i%10 == 9 {
						return ""
					}
					return fmt.Sprint("k", i%6)
				}, 2, inbox.SubscribeOptions{Workers: 6, Claimers: 2})
				close(stop)
				if m := <-most; m > 2 {
					t.Fatalf("the database had %d places of one key at once, limit 2", m)
				}
				for k, m := range g.keyMax {
					if k != "" && m > 2 {
						t.Fatalf("key %s had %d jobs in work at once, limit 2", k, m)
					}
				}
				if l.Concurrency > 0 && g.max > l.Concurrency {
					t.Fatalf("%d jobs in work at once, limit %d", g.max, l.Concurrency)
				}
				// The keys gone idle lose their places' rows: the lanes give back
				// the places of keys they find dry, and delete them.
				deadline := time.Now().Add(10 * time.Second)
				for n := int64(-1); n != 0; {
					if n = b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name LIKE 'p %'`); n != 0 && time.Now().After(deadline) {
						held := b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name LIKE 'p %' AND starts > `+b.nowMicrosSQL())
						t.Fatalf("%d places left of keys with no rows (%d held)", n, held)
					}
					time.Sleep(5 * time.Millisecond) // polling a table: no event to wait on
				}
			})
		})
	}
}

// Limits.PerPartition holds across a crash: an instance abandoned (as in a crash)
// while its handlers hold a key's 2 places keeps them until its leases end, so a
// second instance starts no job of that key before; then every job runs, at most
// 2 of the key at once.
func TestLimitsPerPartitionCrash(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		const n, limit = 20, 2
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for i := range n {
			if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		g := newGauge()
		o := inbox.SubscribeOptions{Workers: 4, Lease: 1500 * time.Millisecond, Limits: inbox.Limits{PerPartition: limit}, PollInterval: 10 * time.Millisecond}
		entered := make(chan struct{}, n)
		crashed, crash := context.WithCancel(context.Background())
		a, err := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}).Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			g.enter("k")
			defer g.leave("k")
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(crashed); err != nil {
			t.Fatal(err)
		}
		for range limit {
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the first instance did not fill the limit")
			}
		}
		crash()
		<-a.Done()
		// Where the crashed instance's holdings of the key end: its places'
		// leases, which hold the limit (they may end a little before its rows'
		// leases: the second instance then takes other rows of the key, never
		// the crashed one's).
		until := b.queryN(t, `SELECT min(starts) FROM "`+b.table+`_limits" WHERE name LIKE 'p %' AND starts > 0`)
		var first atomic.Int64
		done := newTally(n)
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			first.CompareAndSwap(0, time.Now().UnixMicro())
			g.enter("k")
			time.Sleep(2 * time.Millisecond)
			g.leave("k")
			done.add(j.Payload.N)
			return nil
		}, inbox.SubscribeOptions{Workers: 4, Limits: o.Limits, PollInterval: o.PollInterval})
		done.wait(t, 60*time.Second)
		if f := first.Load(); f < until {
			t.Fatalf("the second instance started a job %v before the crashed instance's holdings of the key ended", time.Duration(until-f)*time.Microsecond)
		}
		if g.keyMax["k"] > limit {
			t.Fatalf("%d jobs of the key in work at once, limit %d", g.keyMax["k"], limit)
		}
	})
}

// nowMicrosSQL is the database's time in microseconds since the epoch (the
// deadlines of TABLE_limits).
func (b *backend) nowMicrosSQL() string {
	if b.dialect == inbox.SQLite {
		return "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"
	}
	return "CAST(extract(epoch FROM now()) * 1000000 AS BIGINT)"
}

// placeKeySQL is the key of the place named by the SQL expression name
// ("p I KEY").
func (b *backend) placeKeySQL(name string) string {
	if b.dialect == inbox.SQLite {
		return "substr(" + name + ", instr(substr(" + name + ", 3), ' ') + 3)"
	}
	return "regexp_replace(" + name + ", '^p [0-9]+ ', '')"
}

// Limits.PerPartition holds across three instances of 8 workers and two claimers
// each with fast handlers that the default prefetch serves (a lane
// then holds more rows of a key than its places, and its workers' gate keeps the
// handlers to them): at most 2 handlers of a key run at once.
func TestLimitsPerPartitionThreeInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		g := drainLimitedBy(t, b, inbox.Limits{PerPartition: 2}, 600, func(i int) string { return fmt.Sprint("k", i%3) }, 3, inbox.SubscribeOptions{Workers: 8, Claimers: 2})
		for k, m := range g.keyMax {
			if m > 2 {
				t.Fatalf("key %s had %d jobs in work at once, limit 2", k, m)
			}
		}
	})
}

// Health shows the places of Limits held: while an instance's handlers fill a
// Concurrency limit of 2 and a PerPartition limit of 1 on two keys, LimitHeld
// counts its slots and its places, and LimitWaiting the jobs it
// holds that wait for one; both are 0 once it stops.
func TestLimitsHealth(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		q := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		for i := range 6 {
			if _, err := q.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: fmt.Sprint("k", i%2)}); err != nil {
				t.Fatal(err)
			}
		}
		entered := make(chan struct{}, 6)
		release := make(chan struct{})
		s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 4, PollInterval: 10 * time.Millisecond, Limits: inbox.Limits{Concurrency: 2, PerPartition: 1}})
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
		for range 2 {
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the limit was not filled")
			}
		}
		want := int64(4) // the slots and a place of each key
		deadline := time.Now().Add(10 * time.Second)
		for h := q.Health(); h.LimitHeld != want; h = q.Health() {
			if time.Now().After(deadline) {
				t.Fatalf("LimitHeld = %d, want %d", h.LimitHeld, want)
			}
			time.Sleep(5 * time.Millisecond) // polling a counter that has no event to wait on
		}
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if h := q.Health(); h.LimitHeld != 0 || h.LimitWaiting != 0 {
			t.Fatalf("after Stop: LimitHeld %d, LimitWaiting %d", h.LimitHeld, h.LimitWaiting)
		}
	})
}
