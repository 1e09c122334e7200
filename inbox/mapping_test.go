package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// An existing table is mapped by naming its columns: here a nullable lock column
// that outside writers leave NULL, no priority, and a processed column, so that an
// ack keeps the row marked processed instead of deleting it.
func TestMappedTableWithProcessedColumn(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		if b.dialect == inbox.SQLite {
			b.exec(t, `CREATE TABLE "`+b.table+`" (job_id INTEGER PRIMARY KEY AUTOINCREMENT, run_after INTEGER, body BLOB NOT NULL, tries INTEGER NOT NULL DEFAULT 0, err TEXT, done_at INTEGER)`)
		} else {
			b.exec(t, `CREATE TABLE "`+b.table+`" (job_id BIGSERIAL PRIMARY KEY, run_after TIMESTAMPTZ, body BYTEA NOT NULL, tries INTEGER NOT NULL DEFAULT 0, err TEXT, done_at TIMESTAMPTZ)`)
		}
		cols := inbox.Columns{ID: "job_id", LockedUntil: "run_after", LockedUntilNullable: true, Payload: "body",
			Attempts: "tries", LastError: "err", ProcessedAt: "done_at"}
		q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
		if err := q.CreateTable(t.Context()); err == nil {
			t.Fatal("CreateTable on a mapped queue must refuse (it makes the default schema only)")
		}
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Payload.N == 2 && j.Attempt == 1 {
				return errors.New("first try fails")
			}
			return nil
		}, inbox.SubscribeOptions{Backoff: noBackoff, PollInterval: 20 * time.Millisecond, Observe: res.observe})
		b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+b.ph(1)+`)`, []byte(`{"n":1}`)) // run_after NULL
		if _, err := q.Publish(t.Context(), msg{N: 2}, nil); err != nil {
			t.Fatal(err)
		}
		got := map[inbox.Outcome]int{}
		for range 3 {
			r := res.next(t)
			if r.SettleErr != nil {
				t.Fatalf("settlement %+v", r)
			}
			got[r.Outcome]++
		}
		if got[inbox.Acked] != 2 || got[inbox.Retried] != 1 {
			t.Fatalf("outcomes %v", got)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE done_at IS NOT NULL`); n != 2 {
			t.Fatalf("%d rows marked processed, want 2 (kept, not deleted)", n)
		}
		if n := b.queryN(t, `SELECT max(tries) FROM "`+b.table+`"`); n != 2 {
			t.Fatalf("max tries = %d, want 2", n)
		}
		st, err := q.Stats(t.Context())
		if err != nil || st != (inbox.Stats{Processed: 2}) {
			t.Fatalf("stats %+v, %v; want 2 processed and nothing else", st, err)
		}
		if dead, err := q.DeadLetters(t.Context(), 5); err != nil || len(dead) != 0 {
			t.Fatalf("processed rows listed as dead letters: %+v, %v", dead, err)
		}
	})
}

// Prefetched rows wait leased, not in work; Stop hands them back at once.
func TestPrefetchedJobsReleasedAtStop(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		inJob := make(chan struct{}, 1)
		unblock := make(chan struct{})
		s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
			inJob <- struct{}{}
			<-unblock
			return nil
		}, inbox.SubscribeOptions{Workers: 1, Prefetch: 3, Observe: res.observe})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.PublishBatch(t.Context(), []msg{{N: 1}, {N: 2}, {N: 3}, {N: 4}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-inJob
		st, err := q.Stats(t.Context())
		if err != nil || st.InWork != 4 {
			t.Fatalf("stats %+v, %v; want 1 job in work and 3 prefetched (leased)", st, err)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- s.Stop(context.Background()) }()
		// The single worker is still in its job: the three prefetched rows go back
		// without waiting for it.
		for range 3 {
			if r := res.next(t); r.Outcome != inbox.Released {
				t.Fatalf("while the worker is busy: %+v, want released", r)
			}
		}
		close(unblock)
		if r := res.next(t); r.Outcome != inbox.Acked {
			t.Fatalf("the job in work: %+v, want acked", r)
		}
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if st, err := q.Stats(t.Context()); err != nil || st != (inbox.Stats{Ready: 3}) {
			t.Fatalf("stats after stop %+v, %v; want 3 ready", st, err)
		}
	})
}

// upper is a Codec that stores a string upper-cased, to show codecs are pluggable.
type upper struct{}

func (upper) Encode(v string) ([]byte, error) { return []byte(strings.ToUpper(v)), nil }
func (upper) Decode(b []byte) (string, error) { return string(b), nil }

func TestPluggableCodec(t *testing.T) {
	b := sqliteBackend(t)
	db := b.newDB(t).(*sql.DB)
	q, err := inbox.NewSQLite(db, inbox.Config[string]{Table: b.table, Codec: upper{}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	s, err := q.Subscribe(func(_ context.Context, j inbox.Job[string]) error {
		got <- j.Payload
		return nil
	}, inbox.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	if _, err := q.Publish(t.Context(), "olá, mundo", nil); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "OLÁ, MUNDO" {
		t.Fatalf("payload %q, want it through the codec", p)
	}
}

// PerPartition works whatever type the payload column has (text or jsonb here, as
// well as bytea): on Postgres a take of places rides with the claim, and the
// take's rows share the claim's result (a bytea in them would not mix with a text
// or jsonb payload).
func TestPerPartitionWithTextAndJSONPayloads(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		types := []string{"TEXT"}
		if b.dialect == inbox.Postgres {
			types = []string{"text", "jsonb"}
		}
		for i, typ := range types {
			t.Run(typ, func(t *testing.T) {
				table := b.table + "_" + strconv.Itoa(i)
				drop := func() {
					for _, s := range []string{"", "_limits", "_periodic"} {
						b.exec(t, `DROP TABLE IF EXISTS "`+table+s+`"`)
					}
				}
				drop() // left by a run that was cut short
				t.Cleanup(drop)
				q := newQueue(t, b, inbox.Config[msg]{Table: table, Columns: inbox.GroupColumns()})
				if err := q.CreateTable(t.Context()); err != nil {
					t.Fatal(err)
				}
				if b.dialect == inbox.Postgres {
					b.exec(t, `ALTER TABLE "`+table+`" ALTER COLUMN payload TYPE `+typ+` USING convert_from(payload, 'UTF8')::`+typ)
				} else {
					b.exec(t, `DROP TABLE "`+table+`"`)
					b.exec(t, `CREATE TABLE "`+table+`" (id INTEGER PRIMARY KEY AUTOINCREMENT, locked_until INTEGER NOT NULL DEFAULT 0, payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, claimed_at INTEGER, last_error TEXT, dead_at INTEGER, cancelled_at INTEGER, created_at INTEGER, unique_key TEXT, unique_states INTEGER, fifo_group TEXT, partition_key TEXT)`)
				}
				for k := range 3 {
					for n := range 2 {
						if _, err := q.Publish(t.Context(), msg{N: 10*k + n}, &inbox.PublishOpts{Partition: "k" + strconv.Itoa(k)}); err != nil {
							t.Fatal(err)
						}
					}
				}
				res := newResults()
				start(t, q, func(ctx context.Context, j inbox.Job[msg]) error { return nil },
					inbox.SubscribeOptions{Limits: inbox.Limits{PerPartition: 1}, PollInterval: 20 * time.Millisecond, Observe: res.observe})
				seen := map[int]bool{}
				for range 6 {
					r := res.next(t)
					if r.Outcome != inbox.Acked || r.SettleErr != nil {
						t.Fatalf("result %+v, want an ack", r)
					}
					seen[int(r.ID)] = true
				}
				if len(seen) != 6 {
					t.Fatalf("acked %d jobs, want 6", len(seen))
				}
			})
		}
	})
}
