package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// RustStream's first test of an inbox on several instances: two instances, each with its own pool, on one table of
// twenty jobs handle every job exactly once.
func TestTwoInstancesHandleEachJobOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q1 := defaultTable(t, b)
		q2 := newQueue(t, b, inbox.Config[msg]{})
		for i := range 20 {
			if _, err := q1.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
		}
		c := newTally(20)
		var by [2]atomic.Int64
		for i, q := range []*inbox.Queue[msg]{q1, q2} {
			start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
				by[i].Add(1)
				time.Sleep(5 * time.Millisecond) // some work, so both instances take part
				c.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 4, PollInterval: 50 * time.Millisecond})
		}
		c.wait(t, 20*time.Second)
		c.exactlyOnce(t)
		within(t, 5*time.Second, func() bool {
			st, err := q1.Stats(t.Context())
			return err == nil && st == (inbox.Stats{})
		}, "table empty after acks")
		t.Logf("instance 1 handled %d, instance 2 handled %d", by[0].Load(), by[1].Load())
	})
}

// RustStream's second test: a row another program writes with plain SQL is seen
// within the poll interval.
func TestOutsideRowSeenWithinPollInterval(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		const poll = 250 * time.Millisecond
		started := make(chan time.Time, 1)
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			started <- time.Now()
			return nil
		}, inbox.SubscribeOptions{PollInterval: poll})
		// Time is the subject here: insert while the subscription is between polls,
		// after its first (empty) claim, so that only the poll can find the row.
		time.Sleep(poll / 2)
		inserted := time.Now()
		b.exec(t, `INSERT INTO "`+b.table+`" (payload) VALUES (`+b.ph(1)+`)`, []byte(`{"n":7}`))
		select {
		case at := <-started:
			// The poll interval plus scheduling slack on a shared 2-core machine.
			if d := at.Sub(inserted); d > poll+750*time.Millisecond {
				t.Fatalf("outside row handled after %v; poll interval is %v", d, poll)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("outside row never handled")
		}
	})
}

// RustStream's third test: a broker publish reaches its own instance at once, on the
// real clock, with a poll interval far longer than the test.
func TestPublishWakesOwnInstanceAtOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		started := make(chan time.Time, 4)
		ready := make(chan struct{})
		var once sync.Once
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Payload.N == 0 {
				once.Do(func() { close(ready) })
				return nil
			}
			started <- time.Now()
			return nil
		}, inbox.SubscribeOptions{PollInterval: time.Hour, Workers: 2})
		// A first job proves the subscription is up and has made its claims.
		if _, err := q.Publish(t.Context(), msg{N: 0}, nil); err != nil {
			t.Fatal(err)
		}
		<-ready
		for i := 1; i <= 3; i++ {
			sent := time.Now()
			if _, err := q.Publish(t.Context(), msg{N: i}, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case at := <-started:
				if d := at.Sub(sent); d > 500*time.Millisecond {
					t.Fatalf("publish %d reached its handler after %v", i, d)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("publish %d never reached its handler (poll is an hour)", i)
			}
		}
	})
}

func TestPublishTxExistsOnlyIfCommitted(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		db := b.newDB(t)
		ctx := t.Context()
		publishIn := func(n int, commit bool) {
			t.Helper()
			if tx, err := beginTx(ctx, db); err != nil {
				t.Fatal(err)
			} else {
				if _, err := q.PublishTx(ctx, tx.tx, msg{N: n}, nil); err != nil {
					t.Fatal(err)
				}
				if commit {
					err = tx.commit()
				} else {
					err = tx.rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		publishIn(1, false)
		publishIn(2, true)
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ready != 1 {
			t.Fatalf("ready = %d after one rolled back and one committed publish, want 1", st.Ready)
		}
		// The wrong kind of transaction is a typed error.
		var wrong inbox.Tx
		if b.dialect == inbox.SQLite {
			wrong = inbox.PgxTx(nil)
		} else {
			wrong = inbox.SQLTx(nil)
		}
		_, err = q.PublishTx(ctx, wrong, msg{}, nil)
		if _, ok := errors.AsType[*inbox.DialectError](err); !ok {
			t.Fatalf("PublishTx with the wrong transaction kind: %v, want *DialectError", err)
		}
	})
}
