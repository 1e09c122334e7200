package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// TestBatchRowLockBackendKilled: when the Postgres backend holding a RowLock batch
// is terminated while the handler runs, the handler's context ends with
// ErrLeaseLost, the transaction is gone, so nothing of the batch commits: every job
// of it is reported lost (never a success, whatever the handler returned) and is
// claimed again, and every job of the table is acked exactly once. The jobs of the
// killed batch ran twice (at least once), every other job once.
func TestBatchRowLockBackendKilled(t *testing.T) {
	b := pgBackend(t)
	q, app := appQueue(t, b)
	const jobs, size = 40, 8
	publishN(t, q, jobs)
	var mu sync.Mutex
	runs := map[int64]int{}
	var killedBatch []int64
	inBatch := make(chan struct{}, 1)
	causes := make(chan error, 1)
	res := startBatchRowLock(t, q, size, func(ctx context.Context, js []inbox.Job[msg]) error {
		mu.Lock()
		for _, j := range js {
			runs[j.ID]++
		}
		first := killedBatch == nil && len(js) == size
		if first {
			for _, j := range js {
				killedBatch = append(killedBatch, j.ID)
			}
		}
		mu.Unlock()
		if !first {
			return nil
		}
		inBatch <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // would ack the batch, if its transaction were still there
	}, inbox.SubscribeOptions{Workers: 1})
	gotptest.Recv(t, inBatch)
	if n := terminate(t, b, app); n == 0 {
		t.Fatal("no backend terminated")
	}
	if cause := gotptest.Recv(t, causes); !errors.Is(cause, inbox.ErrLeaseLost) {
		t.Fatalf("the handler's context ended with %v, want ErrLeaseLost", cause)
	}
	lost := map[int64]bool{}
	acked := map[int64]int{}
	for _, r := range collect(t, res, jobs+size) {
		switch {
		case errors.Is(r.SettleErr, inbox.ErrLeaseLost):
			lost[r.ID] = true
		case r.SettleErr == nil && r.Outcome == inbox.Acked:
			acked[r.ID]++
		default:
			t.Errorf("result %+v, want acked or lost", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) != size {
		t.Errorf("%d jobs reported lost, want the %d of the killed batch", len(lost), size)
	}
	for _, id := range killedBatch {
		if !lost[id] || runs[id] != 2 {
			t.Errorf("job %d of the killed batch: lost %v, ran %d times; want lost and run twice", id, lost[id], runs[id])
		}
	}
	if len(acked) != jobs {
		t.Errorf("%d jobs acked, want %d", len(acked), jobs)
	}
	for id, n := range acked {
		if n != 1 {
			t.Errorf("job %d acked %d times", id, n)
		}
		if !lost[id] && runs[id] != 1 {
			t.Errorf("job %d ran %d times, want once", id, runs[id])
		}
	}
	if st, err := q.Stats(t.Context()); err != nil || st.Ready+st.InWork+st.Delayed+st.Dead != 0 {
		t.Fatalf("stats %+v, %v: want nothing left", st, err)
	}
	if o := q.Outcomes(); o["ack"] != jobs || o["lease_lost"] != size {
		t.Fatalf("outcomes %v, want %d acks and %d lost", o, jobs, size)
	}
}

// TestBatchRowLockTwoInstances: two instances, each with its own pool and two
// workers, take RowLock batches from one table: every job is handled and acked
// exactly once, no job is ever in two batches at once, and both instances work.
func TestBatchRowLockTwoInstances(t *testing.T) {
	b := pgBackend(t)
	defaultTable(t, b)
	const jobs = 200
	var mu sync.Mutex
	inWork := map[int64]int{} // job id -> the instance whose batch holds it
	handled := map[int]int{}
	batches := [2]int{}
	done := newTally(jobs)
	results := make(chan inbox.Result, 2*jobs)
	for inst := range 2 {
		q := newQueue(t, b, inbox.Config[msg]{})
		s, err := q.SubscribeBatch(func(ctx context.Context, js []inbox.Job[msg]) error {
			mu.Lock()
			batches[inst]++
			for _, j := range js {
				if other, busy := inWork[j.ID]; busy {
					t.Errorf("job %d in a batch of instance %d while in one of instance %d", j.ID, inst, other)
				}
				inWork[j.ID] = inst
				handled[j.Payload.N]++
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // the batch's work, so that batches run side by side
			mu.Lock()
			for _, j := range js {
				delete(inWork, j.ID)
			}
			mu.Unlock()
			for _, j := range js {
				done.add(j.Payload.N)
			}
			return nil
		}, 8, inbox.SubscribeOptions{Form: inbox.RowLock, Workers: 2, PollInterval: 20 * time.Millisecond,
			Observe: func(r inbox.Result) { results <- r }})
		if err != nil {
			t.Fatal(err)
		}
		run(t, s)
	}
	publishN(t, newQueue(t, b, inbox.Config[msg]{}), jobs)
	done.wait(t, 60*time.Second)
	for _, r := range collect(t, results, jobs) {
		if r.Outcome != inbox.Acked || r.SettleErr != nil {
			t.Fatalf("result %+v, want acked", r)
		}
	}
	done.exactlyOnce(t)
	mu.Lock()
	defer mu.Unlock()
	for n, c := range handled {
		if c != 1 {
			t.Errorf("job %d handled %d times", n, c)
		}
	}
	if batches[0] == 0 || batches[1] == 0 {
		t.Errorf("batches per instance %v: want both instances to work", batches)
	}
	if st, err := newQueue(t, b, inbox.Config[msg]{}).Stats(t.Context()); err != nil || st.Ready+st.InWork+st.Delayed+st.Dead != 0 {
		t.Fatalf("stats %+v, %v: want nothing left", st, err)
	}
}
