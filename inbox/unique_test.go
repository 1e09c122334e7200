package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Two instances (each its own pool and Queue) publishing the same key at once
// insert one job, and every publish returns its id.
func TestUniqueAcrossInstancesUnderConcurrentPublish(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		qs := []*inbox.Queue[msg]{defaultTable(t, b), newQueue(t, b, inbox.Config[msg]{})}
		const per = 16
		ids := make([]int64, 2*per)
		inserted := make([]bool, 2*per)
		errs := make([]error, 2*per)
		startLine := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 * per {
			q := qs[i%2]
			wg.Go(func() {
				<-startLine
				ids[i], inserted[i], errs[i] = q.PublishUnique(t.Context(), msg{N: i}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "invoice-7"}})
			})
		}
		close(startLine)
		wg.Wait()
		n := 0
		for i := range ids {
			if errs[i] != nil {
				t.Fatalf("publish %d: %v", i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("publish %d returned id %d, publish 0 id %d", i, ids[i], ids[0])
			}
			if inserted[i] {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d publishes inserted, want 1", n)
		}
		if got := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); got != 1 {
			t.Fatalf("%d rows", got)
		}
		// Another key, and no key, are not duplicates.
		other, err := qs[1].Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "invoice-8"}})
		if err != nil || other == ids[0] {
			t.Fatalf("other key: %d, %v", other, err)
		}
		if _, err := qs[0].Publish(t.Context(), msg{N: 2}, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// A key is held while its job waits or runs, and after it finishes only in the
// states asked for.
func TestUniqueHeldInTheGivenStates(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Payload.N == 1 {
				return inbox.DeadLetter(errors.New("no"))
			}
			return nil
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		pub := func(n int, u inbox.Unique) (int64, bool) {
			t.Helper()
			id, ins, err := q.PublishUnique(t.Context(), msg{N: n}, &inbox.PublishOpts{Unique: &u})
			if err != nil {
				t.Fatal(err)
			}
			return id, ins
		}
		// Acked: the row (and key) is gone.
		a, _ := pub(0, inbox.Unique{Key: "a"})
		if r := res.next(t); r.ID != a || r.Outcome != inbox.Acked {
			t.Fatalf("%+v", r)
		}
		if a2, ins := pub(0, inbox.Unique{Key: "a"}); !ins || a2 == a {
			t.Fatalf("after ack: %d %v", a2, ins)
		}
		res.next(t)
		// Dead, with UniqueDead: held; without: free.
		d, _ := pub(1, inbox.Unique{Key: "d", States: inbox.UniqueDead})
		if r := res.next(t); r.ID != d || r.Outcome != inbox.DeadLettered {
			t.Fatalf("%+v", r)
		}
		if d2, ins := pub(1, inbox.Unique{Key: "d", States: inbox.UniqueDead}); ins || d2 != d {
			t.Fatalf("dead and held: %d %v", d2, ins)
		}
		e, _ := pub(1, inbox.Unique{Key: "e"})
		if r := res.next(t); r.ID != e || r.Outcome != inbox.DeadLettered {
			t.Fatalf("%+v", r)
		}
		if e2, ins := pub(1, inbox.Unique{Key: "e"}); !ins || e2 == e {
			t.Fatalf("dead and free: %d %v", e2, ins)
		}
		res.next(t)
		// Delayed: held. Cancelled without UniqueCancelled: free.
		f, _ := pub(0, inbox.Unique{Key: "f"})
		if r := res.next(t); r.ID != f {
			t.Fatalf("%+v", r)
		}
		later := &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour), Unique: &inbox.Unique{Key: "g"}}
		g, _, err := q.PublishUnique(t.Context(), msg{N: 0}, later)
		if err != nil {
			t.Fatal(err)
		}
		if g2, ins, err := q.PublishUnique(t.Context(), msg{N: 0}, later); err != nil || ins || g2 != g {
			t.Fatalf("delayed: %d %v %v", g2, ins, err)
		}
		if err := q.Cancel(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		if g3, ins, err := q.PublishUnique(t.Context(), msg{N: 0}, later); err != nil || !ins || g3 == g {
			t.Fatalf("after cancel: %d %v %v", g3, ins, err)
		}
		// A period: the same key in the same day is a duplicate.
		day := inbox.Unique{Key: "p", Period: 24 * time.Hour}
		p1, _, err := q.PublishUnique(t.Context(), msg{N: 0}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour), Unique: &day})
		if err != nil {
			t.Fatal(err)
		}
		if p2, ins, err := q.PublishUnique(t.Context(), msg{N: 0}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour), Unique: &day}); err != nil || ins || p2 != p1 {
			t.Fatalf("period: %d %v %v", p2, ins, err)
		}
	})
}

// Inside a caller's transaction, a unique publish sees the jobs of committed
// transactions and inserts one job at most.
func TestUniquePublishTx(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		id, err := q.Publish(t.Context(), msg{N: 0}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour), Unique: &inbox.Unique{Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := beginTx(t.Context(), b.newDB(t))
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.PublishTx(t.Context(), tx.tx, msg{N: 0}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}})
		if err != nil || got != id {
			t.Fatalf("in tx: %d, %v; want %d", got, err, id)
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 1 {
			t.Fatalf("%d rows", n)
		}
	})
}

// A uniqueness key on a queue or table without the uniqueness columns (or their
// unique index) is a typed error, and nothing is inserted.
func TestUniqueOnMissingColumnIsTypedError(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		defaultTable(t, b)
		u := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}}
		var ce *inbox.ColumnError
		// The queue maps no uniqueness columns.
		c := inbox.DefaultColumns()
		c.UniqueKey, c.UniqueStates = "", ""
		if _, err := newQueue(t, b, inbox.Config[msg]{Columns: c}).Publish(t.Context(), msg{}, u); !errors.As(err, &ce) || ce.Column != "UniqueKey" {
			t.Fatalf("no columns mapped: %v", err)
		}
		// The queue maps a column the table does not have.
		c = inbox.DefaultColumns()
		c.UniqueKey = "dedupe_key"
		if _, err := newQueue(t, b, inbox.Config[msg]{Columns: c}).Publish(t.Context(), msg{}, u); !errors.As(err, &ce) || ce.Column != "dedupe_key" {
			t.Fatalf("missing column: %v", err)
		}
		// The column exists without a unique index.
		b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN other_key TEXT`)
		c.UniqueKey = "other_key"
		if _, err := newQueue(t, b, inbox.Config[msg]{Columns: c}).Publish(t.Context(), msg{}, u); !errors.As(err, &ce) || ce.Column != "other_key" {
			t.Fatalf("no unique index: %v", err)
		}
		var cfg *inbox.ConfigError
		q := newQueue(t, b, inbox.Config[msg]{})
		if _, err := q.Publish(t.Context(), msg{}, &inbox.PublishOpts{Unique: &inbox.Unique{}}); !errors.As(err, &cfg) {
			t.Fatalf("empty key: %v", err)
		}
		if err := q.PublishBatch(t.Context(), []msg{{}}, u); !errors.As(err, &cfg) {
			t.Fatalf("unique batch: %v", err)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 0 {
			t.Fatalf("%d rows inserted", n)
		}
	})
}
