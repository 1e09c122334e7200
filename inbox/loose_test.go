package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// RetryJob (the observer's retry) and Requeue of a job that gave its key up race
// a publish of the same key: the publish inserted its row, not yet committed, after
// the requeue's check that no row holds the key, so the requeue's write of the key
// waited for the publish and then met the unique index. It returned that
// unique_violation, untyped, and left the job cancelled. As Unique documents, the
// requeued job now runs without the key, which the published job keeps. Postgres
// only: SQLite's single writer cannot interleave them.
func TestRequeueRacingUniquePublishRunsWithoutKey(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	ctx := t.Context()
	u := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}}
	for _, op := range []string{"RetryJob", "Requeue"} {
		a, err := q.Publish(ctx, msg{N: 1}, u)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(ctx, a); err != nil { // the key is given up
			t.Fatal(err)
		}
		// The publish of the same key, held open in a transaction.
		tx, err := beginTx(ctx, b.newDB(t))
		if err != nil {
			t.Fatal(err)
		}
		c, err := q.PublishTx(ctx, tx.tx, msg{N: 2}, u)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			if op == "RetryJob" {
				done <- q.RetryJob(ctx, a)
				return
			}
			n, err := q.Requeue(ctx, a)
			if err == nil && n != 1 {
				err = fmt.Errorf("requeued %d jobs, want 1", n)
			}
			done <- err
		}()
		// The requeue waits for the publish's transaction on the unique index.
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE %`+b.table+`%'`) > 0
		}, op+" waiting for the publish")
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s racing a publish of its key: %v", op, err)
		}
		ja, err := q.Job(ctx, a)
		if err != nil || ja.State != inbox.StateReady {
			t.Fatalf("%s: job %d is %s (%v), want ready", op, a, ja.State, err)
		}
		id, inserted, err := q.PublishUnique(ctx, msg{N: 3}, u)
		if err != nil || inserted || id != c {
			t.Fatalf("%s: publish = %d, inserted %v, %v; want the racing publish's job %d to hold the key", op, id, inserted, err, c)
		}
		b.exec(t, `DELETE FROM "`+b.table+`"`)
	}
}

// Migrate of a table of the same name that gotp did not make (no version
// recorded, not the first release's columns) took it for version 0 and ran
// every step on it: ALTERs adding cancelled_at, unique_key and the rest to
// someone else's table, stopped only by a step that happened to name a missing
// column ("no such column: priority"). It is refused now, before any step,
// with an error matching ErrNotInboxTable that names the missing columns; the
// table and gotp_schema are as they were.
func TestMigrateRefusesForeignTable(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		id := "id INTEGER PRIMARY KEY"
		if b.dialect == inbox.Postgres {
			id = "id BIGSERIAL PRIMARY KEY"
		}
		b.exec(t, `CREATE TABLE "`+b.table+`" (`+id+`, customer TEXT NOT NULL, priority INTEGER, locked_until INTEGER)`)
		b.exec(t, `INSERT INTO "`+b.table+`" (customer) VALUES ('acme')`)
		cols := func() int64 {
			if b.dialect == inbox.Postgres {
				return b.queryN(t, `SELECT count(*) FROM information_schema.columns WHERE table_name = `+b.ph(1), b.table)
			}
			return b.queryN(t, `SELECT count(*) FROM pragma_table_info(`+b.ph(1)+`)`, b.table)
		}
		_, err := inbox.Migrate(t.Context(), dbOf(t, b), b.table)
		var me *inbox.MigrationError
		if !errors.Is(err, inbox.ErrNotInboxTable) || !errors.As(err, &me) || !strings.Contains(err.Error(), "claimed_at") {
			t.Fatalf("Migrate of a foreign table: %v, want ErrNotInboxTable naming the missing columns", err)
		}
		if n := cols(); n != 4 {
			t.Fatalf("the foreign table has %d columns after the refused migration, want its 4", n)
		}
		if v, err := inbox.SchemaVersionOf(t.Context(), dbOf(t, b), b.table); err != nil || v != 0 {
			t.Fatalf("version after the refusal: %d, %v", v, err)
		}
		// A table of the first release, with a column of the user's beside, is
		// still upgraded.
		b.exec(t, `DROP TABLE "`+b.table+`"`)
		for _, st := range schemaAt(b.dialect, 0) {
			b.exec(t, strings.ReplaceAll(st, "{T}", b.table))
		}
		b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN note TEXT`)
		if m, err := inbox.Migrate(t.Context(), dbOf(t, b), b.table); err != nil || m.From != 0 || m.To != inbox.SchemaVersion {
			t.Fatalf("Migrate of a first-release table: %+v, %v", m, err)
		}
	})
}

// Jobs (the observer's list) read every payload of the page whole and then cut
// it to ListPayloadLimit bytes: a page of 16 one-megabyte jobs allocated 16 MB
// and more to show 256 bytes of each (a page of MaxListLimit large jobs could
// take the process down). The database cuts them now, and reports the length.
func TestJobsListReadsPayloadPrefixOnly(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		big := strings.Repeat("é", 1<<19) // 1 MiB of UTF-8
		jobs := make([]msg, 16)
		for i := range jobs {
			jobs[i] = msg{N: i, Text: big}
		}
		if err := q.PublishBatch(t.Context(), jobs, nil); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(jobs[0])
		// What the database returns is checked, not the process's
		// allocations: TotalAlloc counts every parallel test's too.
		list, err := q.Jobs(t.Context(), inbox.ListOptions{Limit: 16})
		if err != nil || len(list) != 16 {
			t.Fatalf("Jobs: %d, %v", len(list), err)
		}
		for i, j := range list {
			whole, _ := json.Marshal(jobs[i])
			if len(j.Payload) != inbox.ListPayloadLimit || j.PayloadSize != len(whole) || !bytes.HasPrefix(whole, j.Payload) {
				t.Fatalf("job %d: %d bytes shown of %d, want %d of %d", j.ID, len(j.Payload), j.PayloadSize, inbox.ListPayloadLimit, len(whole))
			}
		}
		j, err := q.Job(t.Context(), list[0].ID)
		if err != nil || !bytes.Equal(j.Payload, want) {
			t.Fatalf("Job returns %d bytes, %v; want the payload whole", len(j.Payload), err)
		}
	})
}
