package inbox_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// A batch size meant as "as many as there are" (1<<30, math.MaxInt) made Start
// allocate the lane's channels for Workers × n rows: the process died, out of
// memory (or makechan panicked on the overflowed size). n is bounded by
// MaxBatch; past it SubscribeBatch refuses with a *ConfigError, and MaxBatch
// itself works.
func TestSubscribeBatchBoundsN(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := defaultTable(t, b)
		h := func(context.Context, []inbox.Job[msg]) error { return nil }
		for _, n := range []int{inbox.MaxBatch + 1, 1 << 30, math.MaxInt} {
			var ce *inbox.ConfigError
			if _, err := q.SubscribeBatch(h, n, inbox.SubscribeOptions{Workers: 2}); !errors.As(err, &ce) || ce.Field != "n" {
				t.Errorf("n = %d: err = %v; want a *ConfigError on n", n, err)
			}
		}
		publishN(t, q, 50)
		got := make(chan int, 50)
		startBatch(t, q, func(ctx context.Context, jobs []inbox.Job[msg]) error {
			for range jobs {
				got <- 1
			}
			return nil
		}, inbox.MaxBatch, inbox.SubscribeOptions{Workers: 2, PollInterval: 20 * time.Millisecond})
		for range 50 {
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("jobs not handled with n = MaxBatch")
			}
		}
	})
}

// Workers or a Prefetch past MaxHeld (Prefetch: math.MaxInt made Start's
// makechan panic on the overflowed size; 1<<40 ran out of memory) is refused
// with a *ConfigError by Subscribe and SubscribeBatch.
func TestSubscribeBoundsRowsHeld(t *testing.T) {
	b := sqliteBackend(t)
	q := defaultTable(t, b)
	h := func(context.Context, inbox.Job[msg]) error { return nil }
	bh := func(context.Context, []inbox.Job[msg]) error { return nil }
	for _, o := range []inbox.SubscribeOptions{
		{Prefetch: math.MaxInt},
		{Prefetch: 1 << 40},
		{Workers: inbox.MaxHeld + 1},
		{Workers: math.MaxInt},
		{Workers: 1000, Prefetch: inbox.MaxHeld},
	} {
		var ce *inbox.ConfigError
		if _, err := q.Subscribe(h, o); !errors.As(err, &ce) {
			t.Errorf("Subscribe(Workers %d, Prefetch %d): %v, want a *ConfigError", o.Workers, o.Prefetch, err)
		}
	}
	var ce *inbox.ConfigError
	if _, err := q.SubscribeBatch(bh, inbox.MaxBatch, inbox.SubscribeOptions{Workers: inbox.MaxHeld/inbox.MaxBatch + 1}); !errors.As(err, &ce) {
		t.Errorf("SubscribeBatch past MaxHeld: %v, want a *ConfigError", err)
	}
	if _, err := q.SubscribeBatch(bh, inbox.MaxBatch, inbox.SubscribeOptions{Workers: 8}); err != nil {
		t.Errorf("SubscribeBatch of 8 x MaxBatch: %v", err)
	}
}
