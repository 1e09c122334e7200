package inbox

import (
	"context"
	"time"
)

// RunDue runs one pass of p at now, as its loop does when a tick is due: tests of
// many instances drive their ticks with it instead of waiting for wall-clock minutes.
func RunDue[T any](ctx context.Context, p *Periodic[T], now time.Time) (int, error) {
	return p.runDue(ctx, now)
}

// Dispatched counts the rows a lease-form subscription has handed to its workers.
func Dispatched[T any](s *Subscription[T]) int64 { return s.dispatched.Load() }
