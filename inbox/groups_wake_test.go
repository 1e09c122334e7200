package inbox_test

import (
	"context"
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
