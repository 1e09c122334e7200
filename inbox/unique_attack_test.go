package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A unique publish racing another instance's transaction that holds the same
// key uncommitted (Postgres: the insert waits for it): when that transaction
// rolls back, the waiting publish inserts the job; when it commits, the waiting
// publish returns its id and inserts nothing. One live job per key either way.
func TestUniqueRacingAnUncommittedHolder(t *testing.T) {
	b := pgBackend(t)
	q := defaultTable(t, b)
	other := newQueue(t, b, inbox.Config[msg]{})
	u := func(key string) *inbox.PublishOpts { return &inbox.PublishOpts{Unique: &inbox.Unique{Key: key}} }
	for _, commit := range []bool{false, true} {
		key := "rollback"
		if commit {
			key = "commit"
		}
		tx, err := beginTx(t.Context(), b.newDB(t))
		if err != nil {
			t.Fatal(err)
		}
		held, err := q.PublishTx(t.Context(), tx.tx, msg{N: 1}, u(key))
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			id       int64
			inserted bool
			err      error
		}
		done := make(chan res, 1)
		go func() {
			id, ins, err := other.PublishUnique(t.Context(), msg{N: 2}, u(key))
			done <- res{id, ins, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("%s: the publish did not wait for the holder: %+v", key, r)
		case <-time.After(200 * time.Millisecond):
		}
		if commit {
			err = tx.commit()
		} else {
			err = tx.rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		var r res
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the publish still waits", key)
		}
		switch {
		case r.err != nil:
			t.Fatalf("%s: %v", key, r.err)
		case commit && (r.inserted || r.id != held):
			t.Fatalf("after the holder committed: %+v, want id %d, not inserted", r, held)
		case !commit && (!r.inserted || r.id == held):
			t.Fatalf("after the holder rolled back: %+v, want a new job", r)
		}
		if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE unique_key = $1`, key); n != 1 {
			t.Fatalf("%s: %d rows hold the key", key, n)
		}
	}
}

// A finished job that does not keep its key (Unique.States) gave it up for
// good: requeued (Requeue, RetryJob: the observer's retry) it was a ready job
// without a key, and a unique publish of the same key inserted a second ready
// job beside it. A requeued job now takes its key back, so the publish returns
// its id; if another job holds the key by then, the requeued one runs without it
// (and that other job keeps it).
func TestUniqueKeyComesBackOnRequeue(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		ctx := t.Context()
		u := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k", Period: time.Hour}}
		a, err := q.Publish(ctx, msg{N: 1}, &inbox.PublishOpts{Unique: u.Unique, RunAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		same := func(what string, want int64) {
			t.Helper()
			id, inserted, err := q.PublishUnique(ctx, msg{N: 2}, u)
			if err != nil || inserted || id != want {
				t.Fatalf("%s: publish = %d, inserted %v, %v; want job %d", what, id, inserted, err, want)
			}
		}
		// Cancelled (the key is given up), then retried as the observer does.
		if err := q.Cancel(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := q.RetryJob(ctx, a); err != nil {
			t.Fatal(err)
		}
		same("after RetryJob of the cancelled job", a)
		// Cancelled again, then requeued.
		if err := q.Cancel(ctx, a); err != nil {
			t.Fatal(err)
		}
		if n, err := q.Requeue(ctx, a); err != nil || n != 1 {
			t.Fatalf("requeue = %d, %v", n, err)
		}
		same("after Requeue of the cancelled job", a)
		// Cancelled, a new job takes the key, then the old one is requeued: it
		// runs without the key, which stays with the new job.
		if err := q.Cancel(ctx, a); err != nil {
			t.Fatal(err)
		}
		c, inserted, err := q.PublishUnique(ctx, msg{N: 3}, u)
		if err != nil || !inserted {
			t.Fatalf("publish with the key given up: %d, %v, %v", c, inserted, err)
		}
		if n, err := q.Requeue(ctx, a); err != nil || n != 1 {
			t.Fatalf("requeue with the key taken = %d, %v", n, err)
		}
		same("after the requeue, the key taken", c)
		if st, err := q.Stats(ctx); err != nil || st.Ready+st.Delayed != 2 {
			t.Fatalf("stats %+v, %v", st, err)
		}
		// Dead letters too: the handler dead-letters a, and the requeue gives it
		// its key back once c is gone.
		if err := q.DeleteJob(ctx, c); err != nil {
			t.Fatal(err)
		}
		res := newResults()
		s := start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			return inbox.DeadLetter(errors.New("no"))
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		if r := res.next(t); r.Outcome != inbox.DeadLettered {
			t.Fatalf("outcome %v", r.Outcome)
		}
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.Stop(stop); err != nil {
			t.Fatal(err)
		}
		if id, inserted, err := q.PublishUnique(ctx, msg{N: 4}, u); err != nil || !inserted {
			t.Fatalf("publish beside the dead letter: %d, %v, %v", id, inserted, err)
		} else if err := q.DeleteJob(ctx, id); err != nil {
			t.Fatal(err)
		}
		if n, err := q.Requeue(ctx, a); err != nil || n != 1 {
			t.Fatalf("requeue the dead letter = %d, %v", n, err)
		}
		same("after Requeue of the dead letter", a)
	})
}

// On a table with a ProcessedAt column an acked unique job keeps its key only
// if its States say processed; otherwise a new job may take it. Every form,
// both databases (the lease form acks in batches).
func TestUniqueProcessedKeepsOrGivesUpTheKey(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		forms := []inbox.Form{inbox.Lease}
		if b.dialect == inbox.Postgres {
			forms = append(forms, inbox.RowLock, inbox.AdvisoryLock)
		}
		for _, form := range forms {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				defaultTable(t, b)
				ts := "INTEGER"
				if b.dialect == inbox.Postgres {
					ts = "TIMESTAMPTZ"
				}
				b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN processed_at `+ts)
				cols := inbox.DefaultColumns()
				cols.ProcessedAt = "processed_at"
				q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
				res := newResults()
				start(t, q, func(ctx context.Context, j inbox.Job[msg]) error { return nil },
					inbox.SubscribeOptions{Form: form, PollInterval: 20 * time.Millisecond, Observe: res.observe})
				keep := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "keep", States: inbox.UniqueProcessed}}
				free := &inbox.PublishOpts{Unique: &inbox.Unique{Key: "free"}}
				k, err := q.Publish(t.Context(), msg{N: 1}, keep)
				if err != nil {
					t.Fatal(err)
				}
				f, err := q.Publish(t.Context(), msg{N: 2}, free)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if r := res.next(t); r.Outcome != inbox.Acked || r.SettleErr != nil {
						t.Fatalf("settlement %+v", r)
					}
				}
				if id, inserted, err := q.PublishUnique(t.Context(), msg{N: 3}, keep); err != nil || inserted || id != k {
					t.Fatalf("processed, States processed: %d, %v, %v; want job %d", id, inserted, err, k)
				}
				if id, inserted, err := q.PublishUnique(t.Context(), msg{N: 4}, free); err != nil || !inserted || id == f {
					t.Fatalf("processed, no States: %d, %v, %v; want a new job", id, inserted, err)
				}
				if r := res.next(t); r.Outcome != inbox.Acked || r.SettleErr != nil {
					t.Fatalf("settlement %+v", r)
				}
			})
		}
	})
}

// A mapped UniqueKey column with a length limit (varchar(n) on Postgres): a
// finished job that gives its key up keeps it released, a few bytes longer, so
// a key near the limit would fail its settlement. Start refuses such a column
// with a *ColumnError, as it does a LastError with a limit.
func TestUniqueKeyColumnWithALengthLimitRefused(t *testing.T) {
	b := pgBackend(t)
	defaultTable(t, b)
	b.exec(t, `ALTER TABLE "`+b.table+`" ALTER COLUMN unique_key TYPE varchar(64)`)
	q := newQueue(t, b, inbox.Config[msg]{})
	s, err := q.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	var ce *inbox.ColumnError
	if !errors.As(err, &ce) || ce.Column != "unique_key" {
		if err == nil {
			stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Stop(stop)
		}
		t.Fatalf("start: %v, want a *ColumnError on unique_key", err)
	}
}
