package inbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A schema-qualified table name ("main.jobs" on SQLite, "app.jobs" on
// Postgres), which every Queue statement takes, is migrated too: on SQLite the
// migration failed at its first index ("near \".\": syntax error": SQLite wants
// the schema on the index's name, not on its table); on Postgres a long one
// failed at version 2, its index names cut to 63 bytes and so the same. From scratch and from
// version 0, then a queue works on it: a unique publish, a group, a tick, a
// handled job.
func TestMigrateSchemaQualifiedTable(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		schema := "main"
		if b.dialect == inbox.Postgres {
			// Long enough that schema_table_suffix passes Postgres's 63 bytes,
			// where the cut names of the indexes were one ("relation already
			// exists" at version 2).
			schema = "app_schema_" + b.table
			b.exec(t, `CREATE SCHEMA IF NOT EXISTS `+schema)
			t.Cleanup(func() { b.exec(t, `DROP SCHEMA `+schema+` CASCADE`) })
		}
		for _, from := range []int{-1, 0} {
			table := b.table + strings.ReplaceAll(strings.TrimPrefix(time.Now().Format(".000000"), "."), ".", "")
			name := schema + "." + table
			if from == 0 {
				for _, s := range schemaAt(b.dialect, 0) {
					if strings.HasPrefix(s, "CREATE INDEX") {
						if b.dialect == inbox.SQLite {
							s = `CREATE INDEX main.old_claim ON "` + table + `" (priority, locked_until, id)`
						} else {
							s = `CREATE INDEX old_claim ON ` + name + ` (priority, locked_until, id)`
						}
					}
					b.exec(t, strings.ReplaceAll(s, "{T}", name))
				}
			}
			db := dbOf(t, b)
			m, err := inbox.Migrate(t.Context(), db, name)
			if err != nil {
				t.Fatalf("from %d: %v", from, err)
			}
			if m.To != inbox.SchemaVersion || m.Created != (from == -1) {
				t.Fatalf("from %d: %+v", from, m)
			}
			if v, err := inbox.SchemaVersionOf(t.Context(), db, name); err != nil || v != inbox.SchemaVersion {
				t.Fatalf("version %d, %v", v, err)
			}
			q := newQueue(t, b, inbox.Config[msg]{Table: name, Columns: inbox.GroupColumns()})
			for range 2 {
				if _, err := q.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}, Group: "g"}); err != nil {
					t.Fatal(err)
				}
			}
			p, err := q.Periodic([]inbox.PeriodicJob[msg]{{Kind: "k", Schedule: "* * * * *", Job: func(time.Time) msg { return msg{N: 2} }}}, inbox.PeriodicOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inbox.RunDue(t.Context(), p, time.Now()); err != nil {
				t.Fatal(err)
			}
			c := newTally(1)
			s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error { c.add(j.Payload.N); return nil }, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			run(t, s)
			c.wait(t, 10*time.Second)
			c.mu.Lock()
			if c.seen[1] != 1 || len(c.seen) != 1 {
				t.Errorf("handled %v, want the one unique job", c.seen)
			}
			c.mu.Unlock()
		}
	})
}

// A table name of 58 bytes: on Postgres the names of its indexes were cut to 63
// bytes, so "_group" and "_group_work" (and "_claim"/"_unique"... for longer
// ones) made one name, and the migration failed at version 4.
func TestMigrateLongTableName(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		name := (b.table + strings.Repeat("x", 58))[:58]
		if b.dialect == inbox.Postgres {
			t.Cleanup(func() {
				// The side tables' names are cut to 63 bytes as the server cuts them.
				for _, s := range []string{"", "_periodic", "_limits"} {
					b.exec(t, `DROP TABLE IF EXISTS "`+(name + s)[:min(len(name+s), 63)]+`"`)
				}
				b.exec(t, `DELETE FROM gotp_schema WHERE key = `+b.ph(1), "inbox:"+name)
			})
		}
		if _, err := inbox.Migrate(t.Context(), dbOf(t, b), name); err != nil {
			t.Fatal(err)
		}
		q := newQueue(t, b, inbox.Config[msg]{Table: name, Columns: inbox.GroupColumns()})
		if _, err := q.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}, Group: "g"}); err != nil {
			t.Fatal(err)
		}
	})
}

// Four migrators at once (each its own pool) on a table at version 0 with rows
// and a column of the user's own: one upgrades it, the others find it done; the
// rows and the user's column are kept.
func TestMigrateUpgradeConcurrentlyKeepsUserColumns(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, s := range schemaAt(b.dialect, 0) {
			b.exec(t, strings.ReplaceAll(s, "{T}", b.table))
		}
		b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN tenant TEXT NOT NULL DEFAULT 'acme'`)
		b.exec(t, `CREATE INDEX "`+b.table+`_tenant" ON "`+b.table+`" (tenant)`)
		for i := range 10 {
			b.exec(t, `INSERT INTO "`+b.table+`" (payload, tenant) VALUES (`+b.ph(1)+`, 'globex')`, []byte(`{"n":`+strings.Repeat("1", i+1)+`}`))
		}
		var wg sync.WaitGroup
		ms := make([]inbox.Migration, 4)
		errs := make([]error, 4)
		for i := range 4 {
			db := dbOf(t, b)
			wg.Go(func() { ms[i], errs[i] = inbox.Migrate(t.Context(), db, b.table) })
		}
		wg.Wait()
		upgraded := 0
		for i := range 4 {
			if errs[i] != nil {
				t.Fatalf("migrator %d: %v", i, errs[i])
			}
			switch ms[i] {
			case inbox.Migration{From: 0, To: inbox.SchemaVersion}:
				upgraded++
			case inbox.Migration{From: inbox.SchemaVersion, To: inbox.SchemaVersion}:
			default:
				t.Errorf("migrator %d: %+v", i, ms[i])
			}
		}
		if upgraded != 1 {
			t.Fatalf("%d migrators upgraded the table, want 1", upgraded)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE tenant = 'globex'`); n != 10 {
			t.Fatalf("%d rows with the user's column, want 10", n)
		}
		q := newQueue(t, b, inbox.Config[msg]{})
		if _, err := q.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}}); err != nil {
			t.Fatal(err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE tenant = 'acme'`); n != 1 {
			t.Fatalf("the user's default: %d rows", n)
		}
	})
}
