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

// KeyBookkeeping is the size of the PerPartition bookkeeping of s's lanes that
// the workers share (keySlots' gate: places, handlers and waits by key): it should
// stay within the lanes' workers whatever the keys. (The loop's own maps are not
// read: the loop runs.)
func KeyBookkeeping[T any](s *Subscription[T]) int {
	n := 0
	for _, l := range s.lanes {
		ks := l.keys
		if ks == nil {
			continue
		}
		ks.mu.Lock()
		n += len(ks.caps) + len(ks.run) + len(ks.running) + len(ks.wakes)
		ks.mu.Unlock()
	}
	return n
}

// ClaimHeads makes the claims of q, a Postgres queue, read the heads of its FIFO
// groups (on, looking for rows without a group at every claim) or the claim
// index in order (off), whatever its census says.
func ClaimHeads[T any](q *Queue[T], on bool) {
	if on {
		q.census.force.Store(1)
	} else {
		q.census.force.Store(2)
	}
}
