package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// The settlement of a group's head lets the group's next job start at once, not a
// PollInterval later: a claim that comes back short because heads of groups are in
// work (here one group, two workers: the claim gets the head alone) is no sign
// that the table is dry, and the ack that frees the group claims with it. With an
// hour's poll and no publish to wake the subscription, the second and third jobs
// start only if the acks claim them.
func TestFIFOGroupNextStartsOnAck(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		for n := range 3 {
			if _, err := q.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: "a"}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var order []int
		done := make(chan struct{})
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, j.Payload.N)
			if len(order) == 3 {
				close(done)
			}
			return nil
		}, inbox.SubscribeOptions{Workers: 2, PollInterval: time.Hour})
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after 20 s only %v ran: the group's next job waits for the poll", order)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(order); got != "[0 1 2]" {
			t.Fatalf("order %s, want [0 1 2]", got)
		}
	})
}

// An ack racing Queue.Cancel of its group's head (the handler returned before the
// cancel reached it) settles the job as Cancelled at once, as Cancel promises, and
// the group's next job starts: before, the ack passed the cancelled row by and
// left it in work until its lease ran out (a minute here), with the group waiting.
// The cancel comes from another Queue value (another instance), inside the
// handler just before it returns nil, so that the handler's context is not
// cancelled: with an hour's PollInterval the subscription hears of it only
// through its settlement.
func TestFIFOGroupAckRacingCancel(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		q := groupTable(t, b)
		var ids []int64
		for n := range 2 {
			id, err := q.Publish(t.Context(), msg{N: n}, &inbox.PublishOpts{Group: "a"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		other := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
		var mu sync.Mutex
		results := map[int64]inbox.Result{}
		second := make(chan struct{})
		settled := make(chan struct{})
		start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
			if j.Payload.N == 0 {
				if err := other.Cancel(ctx, j.ID); err != nil {
					t.Errorf("cancel: %v", err)
				}
				return nil
			}
			close(second)
			return nil
		}, inbox.SubscribeOptions{Workers: 2, Lease: time.Minute, PollInterval: time.Hour, Observe: func(r inbox.Result) {
			mu.Lock()
			defer mu.Unlock()
			results[r.ID] = r
			if len(results) == 2 {
				close(settled)
			}
		}})
		for _, c := range []chan struct{}{second, settled} {
			select {
			case <-c:
			case <-time.After(20 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("after 20 s the group's second job has not run (settled: %v): the cancelled head holds its group until its lease ends", results)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if r := results[ids[0]]; r.Outcome != inbox.Cancelled || r.SettleErr != nil || !errors.Is(r.Err, inbox.ErrJobCancelled) {
			t.Fatalf("head settled as %v (err %v, settle err %v), want Cancelled with ErrJobCancelled", r.Outcome, r.Err, r.SettleErr)
		}
		st, err := q.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Cancelled != 1 {
			t.Fatalf("stats %+v: want the head counted cancelled", st)
		}
	})
}
