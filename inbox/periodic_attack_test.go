package inbox_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A PeriodicJob.Job that panics crashed the process: the panic ran up the
// Periodic's goroutine (and RunDue's caller). It is now the tick's error, a
// *PanicError: the tick's transaction rolls back, so the tick is not lost, and
// the next pass publishes it.
func TestPeriodicJobPanicIsATickError(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		var calls atomic.Int32
		p, err := q.Periodic([]inbox.PeriodicJob[msg]{{
			Kind: "report", Schedule: "*/5 * * * *",
			Job: func(tick time.Time) msg {
				if calls.Add(1) == 1 {
					panic("no report today")
				}
				return msg{N: int(tick.Unix() / 60)}
			},
		}}, inbox.PeriodicOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Date(2026, 3, 4, 10, 1, 0, 0, time.UTC)
		if n, err := inbox.RunDue(t.Context(), p, t0); n != 0 || err != nil {
			t.Fatalf("first sight: %d, %v", n, err)
		}
		at := t0.Add(5 * time.Minute) // 10:06: the 10:05 tick is due
		n, err := inbox.RunDue(t.Context(), p, at)
		var pe *inbox.PanicError
		if n != 0 || !errors.As(err, &pe) || pe.Value != "no report today" {
			t.Fatalf("panicking job: %d, %v; want 0 and a *PanicError", n, err)
		}
		if c := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); c != 0 {
			t.Fatalf("%d rows after the panic", c)
		}
		if n, err := inbox.RunDue(t.Context(), p, at); n != 1 || err != nil {
			t.Fatalf("the tick after the panic: %d, %v; want it published", n, err)
		}
	})
}

// A kind the ticks table cannot hold (a NUL byte, invalid UTF-8) failed every tick
// on Postgres with a bare SQL error; it is refused by Periodic.
func TestPeriodicRefusesKindsTheDatabaseCannotHold(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		job := func(time.Time) msg { return msg{} }
		for _, kind := range []string{"a\x00b", "a\xffb"} {
			var ce *inbox.ConfigError
			if _, err := q.Periodic([]inbox.PeriodicJob[msg]{{Kind: kind, Schedule: "* * * * *", Job: job}}, inbox.PeriodicOptions{}); !errors.As(err, &ce) || ce.Field != "PeriodicJob.Kind" {
				t.Errorf("kind %q: err = %v, want a *ConfigError on PeriodicJob.Kind", kind, err)
			}
		}
	})
}

// On Postgres an instance whose clock runs ahead of the database's by more than
// a minute (a clock jump, a VM resumed with a stale clock) claimed a tick of its
// future: every other instance then skipped each tick up to it, since a tick is
// taken only past the last one. Such a tick is now refused (an error, logged by
// the loop) and the ticks table left as it was, so the instances with a right
// clock go on publishing each tick.
func TestPeriodicClockAheadOfDatabaseTakesNoTick(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	ahead := periodic(t, q, "* * * * *")
	right := periodic(t, newQueue(t, b, inbox.Config[msg]{}), "* * * * *")
	now := time.Now()
	if n, err := inbox.RunDue(t.Context(), right, now); n != 0 || err != nil {
		t.Fatalf("first sight: %d, %v", n, err)
	}
	n, err := inbox.RunDue(t.Context(), ahead, now.Add(time.Hour))
	if n != 0 || err == nil {
		t.Fatalf("a clock an hour ahead: %d published, %v; want none and an error", n, err)
	}
	if c := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); c != 0 {
		t.Fatalf("%d rows published by the clock ahead", c)
	}
	if c := b.queryN(t, `SELECT count(*) FROM "`+b.table+`_periodic" WHERE last_tick > now() + interval '1 minute'`); c != 0 {
		t.Fatal("the ticks table holds a tick of the future")
	}
	// A clock seconds ahead is no jump: its tick is taken (and runs at its
	// time, the job's RunAt).
	if _, err := inbox.RunDue(t.Context(), ahead, now.Add(30*time.Second)); err != nil {
		t.Fatalf("a clock 30 s ahead: %v", err)
	}
}

// Three instances run their Periodic loops in real time on a schedule of every
// minute for a bit over two minutes, one of them stopped and a new one started
// in its place midway (a restart): every tick after the first sight is inserted
// exactly once. Long (two minutes and more): behind INBOX_FAULT=1.
func TestPeriodicLoopsThreeInstancesRealTime(t *testing.T) {
	if os.Getenv("INBOX_FAULT") == "" {
		t.Skip("a run of two minutes and more: set INBOX_FAULT=1")
	}
	eachDB(t, func(t *testing.T, b *backend) {
		qs := []*inbox.Queue[msg]{defaultTable(t, b), newQueue(t, b, inbox.Config[msg]{}), newQueue(t, b, inbox.Config[msg]{})}
		var ps []*inbox.Periodic[msg]
		stop := func(p *inbox.Periodic[msg]) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
		for _, q := range qs {
			p := periodic(t, q, "* * * * *")
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		began := time.Now()
		time.Sleep(70 * time.Second)
		stop(ps[1])
		ps[1] = periodic(t, newQueue(t, b, inbox.Config[msg]{}), "* * * * *")
		if err := ps[1].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(began.Truncate(time.Minute).Add(3*time.Minute + 5*time.Second)))
		for _, p := range ps {
			stop(p)
		}
		jobs, err := qs[0].Jobs(t.Context(), inbox.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		ticks := map[string]int{}
		for _, j := range jobs {
			ticks[string(j.Payload)]++
		}
		// The minutes after the first sight, up to the last: two or three.
		if len(jobs) < 2 || len(jobs) > 3 || len(ticks) != len(jobs) {
			t.Fatalf("%d jobs for %d distinct ticks: %v", len(jobs), len(ticks), ticks)
		}
	})
}

// PeriodicJob.Opts with a Group or a Partition: the tick's job was published
// without them (only Priority was kept), so a schedule meant to run in a FIFO
// group ran outside it. They are kept now, and a queue without the column
// refuses them when the Periodic is made (a *ConfigError), not at every tick.
func TestPeriodicKeepsGroupAndPartition(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		p, err := q.Periodic([]inbox.PeriodicJob[msg]{{
			Kind: "report", Schedule: "*/5 * * * *",
			Job:  func(tick time.Time) msg { return msg{N: 1} },
			Opts: &inbox.PublishOpts{Priority: 3, Group: "ledger", Partition: "acme"},
		}}, inbox.PeriodicOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Date(2026, 3, 4, 10, 1, 0, 0, time.UTC)
		if _, err := inbox.RunDue(t.Context(), p, t0); err != nil {
			t.Fatal(err)
		}
		if n, err := inbox.RunDue(t.Context(), p, t0.Add(5*time.Minute)); n != 1 || err != nil {
			t.Fatalf("tick: %d, %v", n, err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE fifo_group = 'ledger' AND partition_key = 'acme' AND priority = 3`); n != 1 {
			t.Fatalf("%d jobs in the group and partition, with the priority; want 1", n)
		}
		plain := newQueue(t, b, inbox.Config[msg]{})
		var ce *inbox.ConfigError
		for _, opts := range []*inbox.PublishOpts{{Group: "ledger"}, {Partition: "acme"}} {
			if _, err := plain.Periodic([]inbox.PeriodicJob[msg]{{Kind: "k", Schedule: "* * * * *", Job: func(time.Time) msg { return msg{} }, Opts: opts}}, inbox.PeriodicOptions{}); !errors.As(err, &ce) {
				t.Errorf("%+v on a queue without the column: %v, want a *ConfigError", opts, err)
			}
		}
	})
}
