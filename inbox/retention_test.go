package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Processed rows, dead letters and cancelled jobs older than their retention are
// deleted; younger ones, and live jobs, are kept.
func TestPruneByRetention(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		defaultTable(t, b)
		ts := "INTEGER"
		if b.dialect == inbox.Postgres {
			ts = "TIMESTAMPTZ"
		}
		b.exec(t, `ALTER TABLE "`+b.table+`" ADD COLUMN processed_at `+ts)
		c := inbox.DefaultColumns()
		c.ProcessedAt = "processed_at"
		q := newQueue(t, b, inbox.Config[msg]{Columns: c})
		res := newResults()
		start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Payload.N == 1 {
				return inbox.DeadLetter(errors.New("no"))
			}
			return nil
		}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond, Observe: res.observe})
		for n := range 2 {
			if _, err := q.Publish(t.Context(), msg{N: n}, nil); err != nil {
				t.Fatal(err)
			}
		}
		res.next(t)
		res.next(t)
		cancelled, err := q.Publish(t.Context(), msg{N: 2}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(t.Context(), cancelled); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Publish(t.Context(), msg{N: 3}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		long := inbox.Retention{Processed: time.Hour, Dead: time.Hour, Cancelled: time.Hour}
		if n, err := q.Prune(t.Context(), long); err != nil || n != 0 {
			t.Fatalf("prune with an hour's retention: %d, %v", n, err)
		}
		time.Sleep(2 * time.Millisecond) // time is the subject: the rows must be older than the retention
		short := inbox.Retention{Processed: time.Millisecond, Dead: time.Millisecond, Cancelled: time.Millisecond}
		if n, err := q.Prune(t.Context(), short); err != nil || n != 3 {
			t.Fatalf("prune: %d, %v; want 3", n, err)
		}
		if st, err := q.Stats(t.Context()); err != nil || st != (inbox.Stats{Delayed: 1}) {
			t.Fatalf("stats after prune %+v, %v", st, err)
		}
		var ce *inbox.ConfigError
		if _, err := newQueue(t, b, inbox.Config[msg]{}).Prune(t.Context(), inbox.Retention{Processed: time.Hour}); !errors.As(err, &ce) {
			t.Fatalf("no ProcessedAt column: %v", err)
		}
	})
}
