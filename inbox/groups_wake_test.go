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
// through its settlement. Every form: in the advisory form the cancel marks the
// row its holder's advisory lock holds and the ack settles it as Cancelled, as
// in the lease form; in the RowLock form the cancel waits for the row lock of
// the handler's transaction, so the ack wins (the cancel finds no job) and the
// group's next job starts at once all the same.
func TestFIFOGroupAckRacingCancel(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range groupForms(b) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				ackRacingCancel(t, b, form)
			})
		}
	})
}

// ackRacingCancel is TestFIFOGroupAckRacingCancel in one form. In the lease and
// advisory forms Cancel marks the row at once and the handler returns after it;
// in the RowLock form Cancel waits for the row lock the handler's transaction
// holds, so it is sent from the handler without waiting, and the ack wins (the
// cancel finds the row gone, before or while it waits): the group's next job must
// start all the same.
func ackRacingCancel(t *testing.T, b *backend, form inbox.Form) {
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
	cancelled := make(chan error, 1)
	start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
		if j.Payload.N == 0 {
			if form == inbox.RowLock {
				go func() { cancelled <- other.Cancel(context.Background(), j.ID) }()
				return nil
			}
			// Not on ctx: the cancel it sends may reach this handler (a
			// notification) and end ctx before Cancel itself has returned.
			cancelled <- other.Cancel(context.WithoutCancel(ctx), j.ID)
			return nil
		}
		close(second)
		return nil
	}, inbox.SubscribeOptions{Workers: 2, Form: form, Lease: time.Minute, PollInterval: time.Hour, Observe: func(r inbox.Result) {
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
	cerr := <-cancelled
	mu.Lock()
	defer mu.Unlock()
	r := results[ids[0]]
	st, err := q.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: head settled as %v (err %v, settle err %v), cancel returned %v, stats %+v", form, r.Outcome, r.Err, r.SettleErr, cerr, st)
	if form == inbox.RowLock {
		if r.Outcome != inbox.Acked || r.SettleErr != nil {
			t.Fatalf("head settled as %v (settle err %v), want Acked: the cancel waits for the row lock", r.Outcome, r.SettleErr)
		}
		var nj *inbox.NoJobError
		var se *inbox.JobStateError
		gone := errors.As(cerr, &nj) || (errors.As(cerr, &se) && se.State == inbox.StateProcessed)
		if cerr != nil && !gone {
			t.Fatalf("cancel: %v, want nil, a *NoJobError or a *JobStateError of a processed job (the ack deleted the row)", cerr)
		}
		return
	}
	if cerr != nil {
		t.Fatalf("cancel: %v", cerr)
	}
	if r.Outcome != inbox.Cancelled || r.SettleErr != nil || !errors.Is(r.Err, inbox.ErrJobCancelled) {
		t.Fatalf("head settled as %v (err %v, settle err %v), want Cancelled with ErrJobCancelled", r.Outcome, r.Err, r.SettleErr)
	}
	if st.Cancelled != 1 {
		t.Fatalf("stats %+v: want the head counted cancelled", st)
	}
}
