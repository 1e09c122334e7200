package inbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// TestLimitsRateWindows pins down what the fixed windows of Limits.Rate promise
// and what they do not. Jobs are published halfway through a window, with two
// instances waiting: the rest of that window starts Rate of them and the next
// window another Rate as it opens, so 2 × Rate start within less than Per (the
// burst Limits.Rate documents); but no 2 × Rate + 1 starts ever fall within one Per
// (they span at least three windows), allowing for the delay from a claim to its
// handler.
func TestLimitsRateWindows(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		groupTable(t, b)
		const rate, per, n = 4, 600 * time.Millisecond, 12
		const slack = per / 4 // from a claim to its handler's start, under -race on a loaded machine
		st := startRated(t, b, n, 2*rate, inbox.Limits{Rate: rate, Per: per})
		// Halfway through a window (windows count from the Unix epoch).
		now := time.Now()
		window := time.Unix(0, now.UnixNano()/int64(per)*int64(per))
		if !window.Add(per / 2).After(now) {
			window = window.Add(per)
		}
		time.Sleep(time.Until(window.Add(per / 2))) // to a phase of the clock, not to wait for an event
		pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		jobs := make([]msg, n)
		if err := pub.PublishBatch(t.Context(), jobs, nil); err != nil {
			t.Fatal(err)
		}
		starts := st.wait(t)
		for i := 0; i+2*rate < n; i++ {
			if span := starts[i+2*rate].Sub(starts[i]); span <= per-slack {
				t.Errorf("starts %d..%d (%d of them) within %v: more than 2 × Rate in less than Per", i, i+2*rate, 2*rate+1, span)
			}
		}
		// The burst: the first window's Rate and the next one's, within less than Per
		// (when the first claims came in the first window at all: a machine too slow
		// for that shows nothing).
		if starts[0].Before(window.Add(per - slack)) {
			if span := starts[2*rate-1].Sub(starts[0]); span >= per {
				t.Errorf("2 × Rate starts spanned %v: the window edge burst documented did not show", span)
			} else {
				t.Logf("2 × Rate = %d starts within %v across a window edge (Per %v)", 2*rate, span, per)
			}
		} else {
			t.Logf("first start %v after the window opened: no burst to see", starts[0].Sub(window))
		}
	})
}

// rateStarts records when handlers started, until n have.
type rateStarts struct {
	mu     sync.Mutex
	starts []time.Time
	n      int
	all    chan struct{}
}

// startRated starts two instances on b's grouped table, each with workers and
// limits, whose handlers record their starts.
func startRated(t *testing.T, b *backend, n, workers int, l inbox.Limits) *rateStarts {
	t.Helper()
	st := &rateStarts{n: n, all: make(chan struct{})}
	for range 2 {
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.starts = append(st.starts, time.Now())
			if len(st.starts) == st.n {
				close(st.all)
			}
			return nil
		}, inbox.SubscribeOptions{Workers: workers, Limits: l, PollInterval: 20 * time.Millisecond})
	}
	return st
}

// wait returns the starts once n have been recorded.
func (st *rateStarts) wait(t *testing.T) []time.Time {
	t.Helper()
	select {
	case <-st.all:
	case <-time.After(30 * time.Second):
		t.Fatal("jobs not done")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Clone(st.starts)
}
