package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Cancelling the head of a FIFO group while its handler runs (a handler that
// ignores its context) must not let the group's next job start before that
// handler returns: at most one job of a group in work, across every instance. Two
// instances claim; a third queue cancels.
func TestFIFOGroupCancelledHeadHoldsGroup(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range groupForms(b) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				groupTable(t, b)
				pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
				head, err := pub.Publish(t.Context(), msg{N: 0}, &inbox.PublishOpts{Group: "a"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := pub.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Group: "a"}); err != nil {
					t.Fatal(err)
				}
				headStarted, release, nextStarted := make(chan struct{}), make(chan struct{}), make(chan struct{})
				var headRunning atomic.Bool
				var releaseOnce sync.Once
				h := func(ctx context.Context, j inbox.Job[msg]) error {
					switch j.Payload.N {
					case 0:
						headRunning.Store(true)
						close(headStarted)
						<-release // ignores ctx
						headRunning.Store(false)
					case 1:
						if headRunning.Load() {
							t.Errorf("job 1 of group a started while its cancelled head's handler still runs")
						}
						close(nextStarted)
					}
					return nil
				}
				for range 2 {
					start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), h,
						inbox.SubscribeOptions{Workers: 2, Form: form, PollInterval: 20 * time.Millisecond})
				}
				t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // runs before the Stops
				select {
				case <-headStarted:
				case <-time.After(10 * time.Second):
					t.Fatal("the head never started")
				}
				cancelled := make(chan error, 1)
				go func() { cancelled <- pub.Cancel(context.Background(), head) }() // RowLock: returns once the handler has
				// The group's next job must not start while the head's handler runs:
				// many polls of both instances pass in this window.
				select {
				case <-nextStarted:
					t.Fatal("job 1 started while the cancelled head's handler still runs")
				case <-time.After(1500 * time.Millisecond): // longer than the lock forms' heartbeat
				}
				releaseOnce.Do(func() { close(release) })
				select {
				case <-nextStarted:
				case <-time.After(10 * time.Second):
					t.Fatal("job 1 never started after the cancelled head returned")
				}
				if err := <-cancelled; err != nil {
					t.Fatalf("cancel: %v", err)
				}
				within(t, 10*time.Second, func() bool {
					st, err := pub.Stats(t.Context())
					return err == nil && st.Cancelled == 1 && st.Ready+st.InWork+st.Delayed == 0
				}, "the head settled as cancelled, job 1 done")
			})
		}
	})
}

// An instance that dies with a FIFO group's head in work, cancelled while its
// lease is live, holds the group until that lease runs out; then the head is
// finalised as Cancelled (never run again) and the group's next job runs. In the
// advisory form the head is cancelled while its holder lives, and finalised once
// the holder dies (its lock goes with its connection).
func TestFIFOGroupCancelledHeadOfDeadInstance(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		fs := []inbox.Form{inbox.Lease}
		if b.dialect == inbox.Postgres {
			fs = append(fs, inbox.AdvisoryLock)
		}
		for _, form := range fs {
			t.Run(form.String(), func(t *testing.T) { cancelledHeadOfDeadInstance(t, b, form) })
		}
	})
}

func cancelledHeadOfDeadInstance(t *testing.T, b *backend, form inbox.Form) {
	b = freshBackend(t, b.dialect)
	groupTable(t, b)
	pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	head, err := pub.Publish(t.Context(), msg{N: 0}, &inbox.PublishOpts{Group: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(t.Context(), msg{N: 1}, &inbox.PublishOpts{Group: "a"}); err != nil {
		t.Fatal(err)
	}
	inWork := make(chan struct{})
	crashCtx, crash := context.WithCancel(context.Background())
	const lease = 600 * time.Millisecond
	dying, err := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}).Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
		close(inWork)
		<-ctx.Done()
		return ctx.Err()
	}, inbox.SubscribeOptions{Workers: 1, Lease: lease, Form: form})
	if err != nil {
		t.Fatal(err)
	}
	if err := dying.Start(crashCtx); err != nil {
		t.Fatal(err)
	}
	<-inWork
	cancel := func() {
		if err := pub.Cancel(t.Context(), head); err != nil {
			t.Fatal(err)
		}
	}
	if form == inbox.AdvisoryLock {
		cancel() // the holder's handler returns at once; its crash settles nothing
	}
	crash() // nothing is settled, as in a crash: the lease is still live
	<-dying.Done()
	crashedAt := time.Now()
	if form == inbox.Lease {
		cancel()
	}
	ran := make(chan int, 2)
	start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
		ran <- j.Payload.N
		return nil
	}, inbox.SubscribeOptions{Workers: 2, PollInterval: 20 * time.Millisecond})
	select {
	case n := <-ran:
		if n != 1 {
			t.Fatalf("job %d ran; the cancelled head must never run again", n)
		}
		if d := time.Since(crashedAt); form == inbox.Lease && d < lease/2 {
			t.Errorf("job 1 ran %v after the crash, before the head's lease could have run out", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the group did not move on after the cancelled head's lease ran out")
	}
	within(t, 10*time.Second, func() bool {
		st, err := pub.Stats(t.Context())
		return err == nil && st.Cancelled == 1 && st.Ready+st.InWork+st.Delayed == 0
	}, "the head finalised as cancelled")
	if n, err := pub.Requeue(t.Context(), head); err != nil || n != 1 {
		t.Fatalf("requeue of the finalised head = %d, %v", n, err)
	}
	select {
	case n := <-ran:
		if n != 0 {
			t.Fatalf("job %d ran, want the requeued head", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the requeued head did not run")
	}
}
