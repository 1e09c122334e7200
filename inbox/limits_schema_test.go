package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// TABLE_limits has had one shape since version 4 made it (the schemas before had
// none). A table at version 3 is upgraded by Migrate to one whose Limits work: a
// drain under Concurrency, PerPartition and Rate at once keeps to them. A table of
// that name that gotp did not make (its own columns), found by the step that
// would make TABLE_limits or TABLE_periodic, is refused with an error matching
// ErrNotInboxTable and left as it was, the version unchanged: before, CREATE
// TABLE IF NOT EXISTS kept it and Migrate reported success. A subscription under
// Limits on a table whose TABLE_limits is someone else's is refused at Start with
// a *StatementError naming it.
func TestLimitsTableSchema(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		lt := `"` + b.table + `_limits"`
		t.Run("upgraded from 3", func(t *testing.T) {
			for _, s := range schemaAt(b.dialect, 3) {
				b.exec(t, strings.ReplaceAll(s, "{T}", b.table))
			}
			if m, err := inbox.Migrate(t.Context(), dbOf(t, b), b.table); err != nil || m != (inbox.Migration{From: 3, To: inbox.SchemaVersion}) {
				t.Fatalf("Migrate = %+v, %v", m, err)
			}
			l := inbox.Limits{Concurrency: 3, PerPartition: 2, Rate: 20, Per: 100 * time.Millisecond}
			g := drainLimitedBy(t, b, l, 60, func(i int) string { return fmt.Sprint("k", i%4) }, 2, inbox.SubscribeOptions{Workers: 4})
			if g.max > 3 {
				t.Errorf("%d jobs in work at once, Concurrency 3", g.max)
			}
			for k, m := range g.keyMax {
				if m > 2 {
					t.Errorf("key %s: %d in work at once, PerPartition 2", k, m)
				}
			}
			if n := b.queryN(t, `SELECT count(*) FROM `+lt+` WHERE name = 'starts' OR name LIKE 'slot %'`); n != 4 {
				t.Errorf("%d rows of Rate and Concurrency in TABLE_limits, want 4", n)
			}
		})
		for _, side := range []string{"_limits", "_periodic"} {
			t.Run("foreign "+side, func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				from := 3 // the version before the step that makes the table
				if side == "_periodic" {
					from = 2
				}
				for _, s := range schemaAt(b.dialect, from) {
					b.exec(t, strings.ReplaceAll(s, "{T}", b.table))
				}
				foreign := `CREATE TABLE "` + b.table + side + `" (name TEXT PRIMARY KEY, qty INTEGER)`
				b.exec(t, foreign)
				_, err := inbox.Migrate(t.Context(), dbOf(t, b), b.table)
				if !errors.Is(err, inbox.ErrNotInboxTable) || !strings.Contains(err.Error(), b.table+side) {
					t.Fatalf("Migrate with a foreign %s = %v, want ErrNotInboxTable naming it", side, err)
				}
				if v, err := inbox.SchemaVersionOf(t.Context(), dbOf(t, b), b.table); err != nil || v != from {
					t.Errorf("version after the refusal = %d, %v; want %d", v, err, from)
				}
				b.exec(t, `INSERT INTO "`+b.table+side+`" (name, qty) VALUES ('x', 1)`) // its columns are as they were
			})
		}
		t.Run("foreign at Start", func(t *testing.T) {
			b := freshBackend(t, b.dialect)
			q := groupTable(t, b)
			b.exec(t, `DROP TABLE "`+b.table+`_limits"`)
			b.exec(t, `CREATE TABLE "`+b.table+`_limits" (name TEXT PRIMARY KEY, qty INTEGER)`)
			for _, l := range []inbox.Limits{{Concurrency: 2}, {PerPartition: 1}, {Rate: 1, Per: time.Second}} {
				s, err := q.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{Limits: l})
				if err != nil {
					t.Fatal(err)
				}
				var se *inbox.StatementError
				if err := s.Start(t.Context()); !errors.As(err, &se) || !strings.Contains(se.Table, b.table+"_limits") {
					if err == nil {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_ = s.Stop(ctx)
						cancel()
					}
					t.Errorf("%+v: Start with a foreign TABLE_limits = %v, want a *StatementError naming it", l, err)
				}
			}
		})
	})
}
