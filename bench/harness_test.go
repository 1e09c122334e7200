package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// system is one queue implementation on one database, on a fresh table or schema.
type system interface {
	// publishOne inserts job n (one statement, one transaction).
	publishOne(ctx context.Context, n int) error
	// publishBatch inserts jobs ns in one call.
	publishBatch(ctx context.Context, ns []int) error
	// startInstance starts one consumer instance, with its own pool, running up to
	// workers handlers at once; each handler calls fn with its job's n.
	startInstance(ctx context.Context, workers int, fn func(n int)) (stop func(), err error)
	close()
}

type factory func(b *testing.B, db string) system

var dbs = []string{"sqlite", "postgres"}

func pgURL(b *testing.B) string {
	u := os.Getenv("POSTGRES_TEST_URL")
	if u == "" {
		b.Skip("POSTGRES_TEST_URL not set")
	}
	return u
}

var runSeq atomic.Int64

// uniq names a fresh table or schema.
func uniq(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), runSeq.Add(1))
}

// counts tallies handled jobs by n and signals when every one was seen.
type counts struct {
	seen     []atomic.Int32
	distinct atomic.Int64
	dupes    atomic.Int64
	all      chan struct{}
	once     sync.Once
}

func newCounts(n int) *counts {
	return &counts{seen: make([]atomic.Int32, n), all: make(chan struct{})}
}

func (c *counts) add(n int) {
	if c.seen[n].Add(1) > 1 {
		c.dupes.Add(1)
		return
	}
	if c.distinct.Add(1) == int64(len(c.seen)) {
		c.once.Do(func() { close(c.all) })
	}
}

const (
	q1Jobs    = 20_000
	q2Jobs    = 20_000
	q3Publish = 200
)

// q2JobsFor shrinks the drain for configurations that poll slowly (River's defaults
// drain ~160 jobs/s, so 20,000 jobs would take two minutes): the figure is jobs/s.
func q2JobsFor(sysName string) int {
	if sysName == "river-default" {
		return 2_000
	}
	return q2Jobs
}

// q3PublishesFor shrinks Q3 for River's defaults (a 1 s fetch poll: ~100 ms to 1 s a
// job), so that a run stays short; p99 of 50 samples is their maximum.
func q3PublishesFor(sysName string) int {
	if sysName == "river-default" {
		return 50
	}
	return q3Publish
}

func runQ1Single(b *testing.B, mk factory, db string) {
	for b.Loop() {
		b.StopTimer()
		s := mk(b, db)
		ctx := context.Background()
		b.StartTimer()
		start := time.Now()
		for i := range q1Jobs {
			if err := s.publishOne(ctx, i); err != nil {
				b.Fatal(err)
			}
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(q1Jobs)/el.Seconds(), "jobs/s")
		s.close()
		b.StartTimer()
	}
}

func runQ1Batch(b *testing.B, mk factory, db string) {
	ns := make([]int, q1Jobs)
	for i := range ns {
		ns[i] = i
	}
	for b.Loop() {
		b.StopTimer()
		s := mk(b, db)
		ctx := context.Background()
		b.StartTimer()
		start := time.Now()
		if err := s.publishBatch(ctx, ns); err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(q1Jobs)/el.Seconds(), "jobs/s")
		s.close()
		b.StartTimer()
	}
}

func runQ2(b *testing.B, mk factory, db string, jobs int) {
	ns := make([]int, jobs)
	for i := range ns {
		ns[i] = i
	}
	for b.Loop() {
		b.StopTimer()
		s := mk(b, db)
		ctx := context.Background()
		for i := 0; i < jobs; i += 5000 {
			if err := s.publishBatch(ctx, ns[i:min(i+5000, jobs)]); err != nil {
				b.Fatal(err)
			}
		}
		c := newCounts(jobs)
		b.StartTimer()
		start := time.Now()
		var stops []func()
		for range 2 {
			stop, err := s.startInstance(ctx, 8, c.add)
			if err != nil {
				b.Fatal(err)
			}
			stops = append(stops, stop)
		}
		select {
		case <-c.all:
		case <-time.After(5 * time.Minute):
			b.Fatalf("drain incomplete: %d of %d", c.distinct.Load(), jobs)
		}
		el := time.Since(start)
		b.StopTimer()
		for _, stop := range stops {
			stop()
		}
		if d := c.dupes.Load(); d != 0 {
			b.Errorf("%d jobs handled more than once", d)
		}
		b.ReportMetric(float64(jobs)/el.Seconds(), "jobs/s")
		b.ReportMetric(float64(c.dupes.Load()), "dupes")
		s.close()
		b.StartTimer()
	}
}

func runQ3(b *testing.B, mk factory, db string, publishes int) {
	for b.Loop() {
		b.StopTimer()
		s := mk(b, db)
		ctx := context.Background()
		started := make(chan time.Time, 1)
		stop, err := s.startInstance(ctx, 8, func(int) { started <- time.Now() })
		if err != nil {
			b.Fatal(err)
		}
		// Let the instance settle into idle (its first fetches done).
		time.Sleep(300 * time.Millisecond)
		lat := make([]time.Duration, 0, publishes)
		pub := make([]time.Duration, 0, publishes)
		b.StartTimer()
		for i := range publishes {
			t0 := time.Now()
			if err := s.publishOne(ctx, i); err != nil {
				b.Fatal(err)
			}
			pub = append(pub, time.Since(t0))
			select {
			case at := <-started:
				lat = append(lat, at.Sub(t0))
			case <-time.After(30 * time.Second):
				b.Fatalf("publish %d never started", i)
			}
		}
		b.StopTimer()
		stop()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		// The publish call alone (its commit), which the latency above includes.
		slices.Sort(pub)
		b.ReportMetric(float64(pub[len(pub)/2].Microseconds())/1000, "pub-p50-ms")
		b.ReportMetric(float64(pub[len(pub)*99/100].Microseconds())/1000, "pub-p99-ms")
		s.close()
		b.StartTimer()
	}
}

type variant struct {
	name string
	mk   factory
}

func BenchmarkQ1SinglePublish(b *testing.B) {
	for _, db := range dbs {
		for _, v := range []variant{{"gotp", newGotp}, {"river", riverInsertOnly}} {
			b.Run("db="+db+"/sys="+v.name, func(b *testing.B) { runQ1Single(b, v.mk, db) })
		}
	}
}

func BenchmarkQ1BatchPublish(b *testing.B) {
	for _, db := range dbs {
		for _, v := range []variant{{"gotp", newGotp}, {"river-InsertMany", riverInsertOnly}, {"river-InsertManyFast", riverInsertFast}} {
			b.Run("db="+db+"/sys="+v.name, func(b *testing.B) { runQ1Batch(b, v.mk, db) })
		}
	}
}

func BenchmarkQ2Drain(b *testing.B) {
	for _, db := range dbs {
		for _, v := range []variant{{"gotp", newGotp}, {"gotp-tuned", newGotpTuned}, {"gotp-noprefetch", newGotpNoPrefetch}, {"gotp-batch16", newGotpBatch16}, {"river-tuned", riverTuned}, {"river-tuned-100w", riverTuned100}, {"river-default", riverDefault}} {
			b.Run("db="+db+"/sys="+v.name, func(b *testing.B) { runQ2(b, v.mk, db, q2JobsFor(v.name)) })
		}
	}
}

func BenchmarkQ3Latency(b *testing.B) {
	for _, db := range dbs {
		vs := []variant{{"gotp", newGotp}, {"river-tuned", riverTuned}, {"river-default", riverDefault}}
		if db == "postgres" {
			vs = slices.Insert(vs, 1, variant{"gotp-async", newGotpAsync}, variant{"gotp-notify", newGotpNotify})
		}
		for _, v := range vs {
			b.Run("db="+db+"/sys="+v.name, func(b *testing.B) { runQ3(b, v.mk, db, q3PublishesFor(v.name)) })
		}
	}
}
