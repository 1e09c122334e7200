package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A Periodic whose ticks table is missing (dropped by hand, or a TicksTable not
// made yet) used to start, and then log a WARN every second, forever: Start now
// refuses it with a *StatementError naming the table, as Subscription.Start
// refuses a table missing a column, and starts nothing. Once the table exists,
// Start succeeds.
func TestPeriodicStartRefusesMissingTicksTable(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		b.exec(t, `DROP TABLE "`+b.table+`_periodic"`)
		p := periodic(t, q, "* * * * *")
		var se *inbox.StatementError
		if err := p.Start(t.Context()); !errors.As(err, &se) || se.Table != `"`+b.table+`_periodic"` {
			t.Fatalf("Start with no ticks table: %v, want a *StatementError on %s_periodic", err, b.table)
		}
		// A custom TicksTable that does not exist, on a table that does not either.
		missing := newQueue(t, b, inbox.Config[msg]{Table: b.table + "_nothere"})
		p2, err := missing.Periodic([]inbox.PeriodicJob[msg]{{Kind: "k", Schedule: "@hourly", Job: func(time.Time) msg { return msg{} }}},
			inbox.PeriodicOptions{TicksTable: "no_such_ticks"})
		if err != nil {
			t.Fatal(err)
		}
		if err := p2.Start(t.Context()); !errors.As(err, &se) {
			t.Fatalf("Start with no tables: %v, want a *StatementError", err)
		}
		// Made again (by hand: the version recorded is the latest, so Migrate
		// has nothing to do), the refused Periodic starts.
		ts := "INTEGER"
		if b.dialect == inbox.Postgres {
			ts = "TIMESTAMPTZ"
		}
		b.exec(t, `CREATE TABLE IF NOT EXISTS "`+b.table+`_periodic" (kind TEXT PRIMARY KEY, last_tick `+ts+` NOT NULL)`)
		if err := p.Start(t.Context()); err != nil {
			t.Fatalf("Start once the table exists: %v", err)
		}
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`_periodic"`) == 1
		}, "the kind recorded")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p2.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
