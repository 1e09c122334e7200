package gotp

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestBatchPendingStartIsCounted: a process a Batch has marked running is
// handled only after the batch's function returns, but from the moment it
// is marked, Stop's goroutine count includes what will handle it; else a
// Stop at that moment (the process killed, nothing counted) could return
// before the batch starts goroutines for the node.
func TestBatchPendingStartIsCounted(t *testing.T) {
	n := NewNode(Options{Logger: slog.New(slog.DiscardHandler)})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	for _, procs := range []int{1, 3, 100} {
		handled := make(chan struct{}, procs)
		pids := make([]PID, procs)
		for i := range pids {
			pid, err := n.SpawnHandler(HandlerFunc(func(p *Process, msg any) (bool, error) {
				handled <- struct{}{}
				return false, nil
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			pids[i] = pid
		}
		n.Batch(func(b *Batch) {
			for _, pid := range pids {
				b.Send(pid, "x")
			}
			if c := n.goroutines.n.Load(); c == 0 {
				t.Errorf("%d processes marked running by a batch, and no goroutine counted for them", procs)
			}
		})
		for range procs {
			select {
			case <-handled:
			case <-time.After(10 * time.Second):
				t.Fatal("batch's processes not handled")
			}
		}
	}
}
