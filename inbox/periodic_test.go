package inbox_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

func periodic(t *testing.T, q *inbox.Queue[msg], schedule string) *inbox.Periodic[msg] {
	t.Helper()
	p, err := q.Periodic([]inbox.PeriodicJob[msg]{{
		Kind: "report", Schedule: schedule,
		Job: func(tick time.Time) msg { return msg{N: int(tick.Unix() / 60), Text: tick.Format(time.RFC3339)} },
	}}, inbox.PeriodicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Three instances (each its own pool and Queue) run the same schedule over an hour
// of ticks, their clocks apart by seconds, all at once: each tick is inserted once.
func TestPeriodicOneInsertPerTickThreeInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		qs := []*inbox.Queue[msg]{defaultTable(t, b), newQueue(t, b, inbox.Config[msg]{}), newQueue(t, b, inbox.Config[msg]{})}
		var ps []*inbox.Periodic[msg]
		for _, q := range qs {
			ps = append(ps, periodic(t, q, "*/5 * * * *"))
		}
		t0 := time.Date(2026, 3, 4, 10, 0, 30, 0, time.UTC)
		total := 0
		for m := 0; m <= 60; m++ {
			var wg sync.WaitGroup
			got := make([]int, 3)
			errs := make([]error, 3)
			for i, p := range ps {
				now := t0.Add(time.Duration(m)*time.Minute + time.Duration(i)*7*time.Second)
				wg.Go(func() { got[i], errs[i] = inbox.RunDue(t.Context(), p, now) })
			}
			wg.Wait()
			for i := range 3 {
				if errs[i] != nil {
					t.Fatalf("minute %d, instance %d: %v", m, i, errs[i])
				}
				total += got[i]
			}
		}
		// 10:00 is the first tick seen: the schedule starts after it, 10:05 .. 11:00.
		if total != 12 {
			t.Fatalf("%d jobs published, want 12", total)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 12 {
			t.Fatalf("%d rows, want 12", n)
		}
		jobs, err := qs[0].Jobs(t.Context(), inbox.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, j := range jobs {
			seen[string(j.Payload)] = true
		}
		if len(seen) != 12 {
			t.Fatalf("%d distinct ticks in %d jobs", len(seen), len(jobs))
		}
	})
}

// Ticks missed while no instance ran are coalesced into one job, for the latest.
func TestPeriodicMissedTicksCoalesce(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		p := periodic(t, q, "*/5 * * * *")
		t0 := time.Date(2026, 3, 4, 10, 1, 0, 0, time.UTC)
		for _, c := range []struct {
			now  time.Time
			want int
		}{
			{t0, 0},                       // first sight of the kind: starts after 10:00
			{t0.Add(2 * time.Minute), 0},  // 10:03: no new tick
			{t0.Add(17 * time.Minute), 1}, // 10:18: 10:05, 10:10, 10:15 missed: one job, for 10:15
			{t0.Add(17 * time.Minute), 0}, // again: taken
			{t0.Add(19 * time.Minute), 1}, // 10:20
			{t0.Add(-time.Hour), 0},       // a clock behind: nothing
		} {
			n, err := inbox.RunDue(t.Context(), p, c.now)
			if err != nil || n != c.want {
				t.Fatalf("at %s: %d published, %v; want %d", c.now.Format("15:04"), n, err, c.want)
			}
		}
		jobs, err := q.Jobs(t.Context(), inbox.ListOptions{Limit: 10})
		if err != nil || len(jobs) != 2 {
			t.Fatalf("jobs %v, %v", jobs, err)
		}
		if want := `{"n":` + strconv.Itoa(int(t0.Add(14*time.Minute).Unix()/60)) + `,"text":"2026-03-04T10:15:00Z"}`; string(jobs[0].Payload) != want {
			t.Fatalf("first job %s, want %s", jobs[0].Payload, want)
		}
	})
}

func TestPeriodicRefusesBadInput(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		job := func(time.Time) msg { return msg{} }
		var ce *inbox.CronError
		if _, err := q.Periodic([]inbox.PeriodicJob[msg]{{Kind: "a", Schedule: "61 * * * *", Job: job}}, inbox.PeriodicOptions{}); !errors.As(err, &ce) || ce.Field != "minute" {
			t.Fatalf("bad schedule: %v", err)
		}
		var cfg *inbox.ConfigError
		for _, jobs := range [][]inbox.PeriodicJob[msg]{
			{{Kind: "", Schedule: "* * * * *", Job: job}},
			{{Kind: "a", Schedule: "* * * * *"}},
			{{Kind: "a", Schedule: "* * * * *", Job: job}, {Kind: "a", Schedule: "@daily", Job: job}},
			{{Kind: "a", Schedule: "* * * * *", Job: job, Opts: &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}}}},
		} {
			if _, err := q.Periodic(jobs, inbox.PeriodicOptions{}); !errors.As(err, &cfg) {
				t.Fatalf("%+v: %v", jobs, err)
			}
		}
		if _, err := q.Periodic(nil, inbox.PeriodicOptions{TicksTable: "a b"}); !errors.As(err, &cfg) {
			t.Fatalf("bad ticks table: %v", err)
		}
		// A ticks table that does not exist: the tick fails, nothing is published.
		p, err := q.Periodic([]inbox.PeriodicJob[msg]{{Kind: "a", Schedule: "* * * * *", Job: job}}, inbox.PeriodicOptions{TicksTable: "no_such_ticks"})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := inbox.RunDue(t.Context(), p, time.Now()); err == nil || n != 0 {
			t.Fatalf("missing ticks table: %d, %v", n, err)
		}
	})
}

// Start runs the loop and Stop ends it at once (the goroutine leak check of the
// package's TestMain makes sure); a second Start is refused.
func TestPeriodicStartStop(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		p := periodic(t, q, "* * * * *")
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(t.Context()); !errors.Is(err, inbox.ErrStopped) {
			t.Fatalf("second start: %v", err)
		}
		// The first pass records the kind (its first sight), then sleeps.
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`_periodic"`) == 1
		}, "the kind recorded")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
