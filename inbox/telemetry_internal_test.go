package inbox

import (
	"context"
	"testing"
	"time"
)

// BenchmarkTimedAttempt is what the timing adds to each attempt: two clock reads
// and the histogram updates of Subscription.timed, for an acked job on the default
// schema (start delay too).
func BenchmarkTimedAttempt(b *testing.B) {
	q := &Queue[int]{c: DefaultColumns()}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	s := &Subscription[int]{q: q, workCtx: ctx}
	m := jobMeta{created: time.Now().Add(-time.Millisecond)}
	for b.Loop() {
		start := time.Now()
		s.timed(ctx, start, 1, m, nil)
	}
	if q.timings.handle[Acked].count.Load() == 0 {
		b.Fatal("not timed")
	}
}
