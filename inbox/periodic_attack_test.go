package inbox_test

import (
	"errors"
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
