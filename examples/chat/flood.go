package chat

import (
	"context"
	"time"
)

// commandBucket is a connection's flood control (Config.CommandRate): a
// token bucket of burst commands, refilled at rate a second. It belongs
// to the connection's reader goroutine, which waits in wait before it
// hands on a command that finds the bucket empty: the reader reads no
// more meanwhile, so the client's further commands wait in the kernel's
// buffers and then in the client (TCP's flow control), as when the
// connection's MaxPending commands are taken.
type commandBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newCommandBucket(rate float64, burst int) *commandBucket {
	if rate <= 0 {
		return nil
	}
	b := float64(max(burst, 1))
	return &commandBucket{rate: rate, burst: b, tokens: b}
}

// delay takes a token at now and returns how long to wait for it (0: it
// was there).
func (b *commandBucket) delay(now time.Time) time.Duration {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait takes a token, waiting for it if the bucket is empty; it returns
// whether it waited, and false for ok if ctx ended first.
func (b *commandBucket) wait(ctx context.Context) (waited, ok bool) {
	d := b.delay(time.Now())
	if d <= 0 {
		return false, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, true
	case <-ctx.Done():
		return true, false
	}
}
