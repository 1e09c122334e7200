package inbox_test

import (
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
