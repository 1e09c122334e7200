package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/supervisor"
)

// A subscription runs as a supervised process: killed, it is restarted by its
// supervisor and its abandoned job is taken again after the lease; the node's stop
// shuts it down gracefully.
func TestSubscriptionUnderSupervisor(t *testing.T) {
	b := sqliteBackend(t)
	q := defaultTable(t, b)
	ctx := t.Context()
	n := gotp.NewNode(gotp.Options{Logger: slog.New(slog.DiscardHandler)})
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = n.Stop(context.Background())
		}
	})
	starts := make(chan inbox.Job[msg], 8)
	block := make(chan struct{})
	h := func(ctx context.Context, j inbox.Job[msg]) error {
		starts <- j
		if j.Payload.Text == "block" && j.Attempt == 1 {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		return nil
	}
	sup, err := supervisor.Start(ctx, n, supervisor.Spec{
		Intensity: 5,
		Children: []supervisor.ChildSpec{
			inbox.ChildSpec("invoices", q, h, inbox.SubscribeOptions{Lease: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	which, err := supervisor.WhichChildren(ctx, n, sup)
	if err != nil || len(which) != 1 {
		t.Fatalf("children %+v, %v", which, err)
	}
	first := which[0].PID
	if _, err := q.Publish(ctx, msg{Text: "block"}, nil); err != nil {
		t.Fatal(err)
	}
	if j := <-starts; j.Attempt != 1 {
		t.Fatalf("first start %+v", j)
	}
	n.Exit(first, gotp.ErrKill)
	// The restarted subscription takes the abandoned job once its lease expires.
	select {
	case j := <-starts:
		if j.Attempt != 2 || j.Payload.Text != "block" {
			t.Fatalf("after the kill: %+v, want attempt 2 of the blocked job", j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("abandoned job not taken again by the restarted subscription")
	}
	which, err = supervisor.WhichChildren(ctx, n, sup)
	if err != nil || len(which) != 1 || which[0].PID == first {
		t.Fatalf("children after kill %+v, %v: want a restarted child", which, err)
	}
	within(t, 5*time.Second, func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st == inbox.Stats{}
	}, "job acked by the restarted subscription")
	stopped = true
	if err := n.Stop(context.Background()); err != nil {
		t.Fatalf("node stop: %v", err)
	}
}

func TestSpawnChecksTableFirst(t *testing.T) {
	b := sqliteBackend(t)
	q := newQueue(t, b, inbox.Config[msg]{}) // no table
	n := gotp.NewNode(gotp.Options{Logger: slog.New(slog.DiscardHandler)})
	defer n.Stop(context.Background())
	_, err := inbox.Spawn(t.Context(), n, q, func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{}, time.Second)
	if _, ok := errors.AsType[*inbox.StatementError](err); !ok {
		t.Fatalf("Spawn on a missing table = %v, want *StatementError", err)
	}
	if err := q.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	pid, err := inbox.Spawn(t.Context(), n, q, func(_ context.Context, j inbox.Job[msg]) error {
		done <- j.Payload.N
		return nil
	}, inbox.SubscribeOptions{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Publish(t.Context(), msg{N: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != 4 {
		t.Fatalf("handled %d", got)
	}
	n.Exit(pid, gotp.ErrShutdown)
	within(t, 5*time.Second, func() bool { return !n.IsAlive(pid) }, "process ended after shutdown")
	if o := q.Outcomes(); o["ack"] != 1 {
		t.Fatalf("outcomes %v", o)
	}
}
