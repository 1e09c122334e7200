package inbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A run time at or after the lock deadline of finished rows (9999-01-01) would
// make a fresh job look dead: Stats counted it as a dead letter and Cancel refused
// it as dead. Such a RunAt is refused with a *ConfigError, by every publish, and
// nothing is inserted.
func TestPublishRefusesRunAtPastFarFuture(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		ctx := t.Context()
		for _, at := range []time.Time{
			time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(9999, 6, 1, 0, 0, 0, 0, time.UTC),
			time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			opts := &inbox.PublishOpts{RunAt: at}
			var ce *inbox.ConfigError
			if _, err := q.Publish(ctx, msg{N: 1}, opts); !errors.As(err, &ce) || ce.Field != "PublishOpts.RunAt" {
				t.Errorf("Publish at %v: err = %v, want a *ConfigError on PublishOpts.RunAt", at, err)
			}
			if err := q.PublishBatch(ctx, []msg{{N: 2}, {N: 3}}, opts); !errors.As(err, &ce) {
				t.Errorf("PublishBatch at %v: err = %v, want a *ConfigError", at, err)
			}
		}
		// The last moment before it is a delayed job like any other.
		id, err := q.Publish(ctx, msg{N: 4}, &inbox.PublishOpts{RunAt: time.Date(9998, 12, 31, 23, 59, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if st, err := q.Stats(ctx); err != nil || st != (inbox.Stats{Delayed: 1}) {
			t.Fatalf("stats = %+v, %v; want one delayed job", st, err)
		}
		if err := q.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel the delayed job: %v", err)
		}
	})
}

// Keys the database cannot store or index — a NUL byte or invalid UTF-8 (which
// Postgres text refuses), or a key longer than MaxKeyLen (a Postgres index entry
// has a size limit) — are refused with a *ConfigError on both databases, where
// Postgres answered with a bare SQL error and SQLite stored them. This holds for
// Unique.Key, Group and Partition.
func TestPublishRefusesKeysTheDatabaseCannotHold(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		ctx := t.Context()
		bad := map[string]string{
			"nul":      "a\x00b",
			"control":  "\x01k",
			"bad utf8": "a\xffb",
			"too long": strings.Repeat("k", inbox.MaxKeyLen+1),
		}
		for name, key := range bad {
			for field, opts := range map[string]*inbox.PublishOpts{
				"Unique.Key":            {Unique: &inbox.Unique{Key: key}},
				"PublishOpts.Group":     {Group: key},
				"PublishOpts.Partition": {Partition: key},
			} {
				var ce *inbox.ConfigError
				if _, err := q.Publish(ctx, msg{N: 1}, opts); !errors.As(err, &ce) || ce.Field != field {
					t.Errorf("%s %s: err = %v, want a *ConfigError on %s", field, name, err, field)
				}
			}
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 0 {
			t.Fatalf("%d rows inserted", n)
		}
		// A key of MaxKeyLen bytes, not repetitive enough to compress, is stored and
		// indexed on both.
		long := make([]byte, inbox.MaxKeyLen)
		for i := range long {
			long[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[(i*i*7+i*13+5)%36]
		}
		for _, opts := range []*inbox.PublishOpts{{Unique: &inbox.Unique{Key: string(long), Period: time.Hour}}, {Group: string(long)}, {Partition: string(long)}} {
			if _, err := q.Publish(ctx, msg{N: 2}, opts); err != nil {
				t.Fatalf("a key of MaxKeyLen bytes: %v", err)
			}
		}
	})
}
