package inbox_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// TestRescueKilledProcess: a job whose handler kills its own OS process (SIGKILL)
// every time is run MaxAttempts times, one process each, and then dead-lettered by
// the next claim with an *ExhaustedError as its last error, in every form; the other
// jobs, some of them in work beside it when a process died, are all acked; nothing
// loops.
func TestRescueKilledProcess(t *testing.T) {
	for _, c := range dbForms {
		t.Run(c.db+"/"+strings.ReplaceAll(c.form.String(), " ", "-"), func(t *testing.T) {
			t.Parallel()
			var b *backend
			cfg := childConfig{DB: c.db, Form: c.form, StopIn: 2 * time.Second, Workers: 2, Work: 2 * time.Millisecond,
				Lease: 400 * time.Millisecond, Crash: "crash", MaxAttempts: 3}
			b = childBackend(t, c.db, &cfg)
			q := defaultTable(t, b)
			ctx := t.Context()
			crashID, err := q.Publish(ctx, msg{N: -1, Text: "crash"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			const others = 20
			batch := make([]msg, others)
			for i := range batch {
				batch[i] = msg{N: i}
			}
			if err := q.PublishBatch(ctx, batch, nil); err != nil {
				t.Fatal(err)
			}
			f := spawner(t, b, "rescue", &cfg)
			settled := func() bool {
				st, err := q.Stats(ctx)
				return err == nil && st.Dead == 1 && st.Ready+st.InWork+st.Delayed == 0
			}
			crashed := 0
			for !settled() {
				if len(f.all) > cfg.MaxAttempts+1 {
					t.Fatalf("%d instances started and the queue is not settled: the crashing job loops", len(f.all))
				}
				ch := f.spawn(cfg)
				deadline := time.After(60 * time.Second)
			wait:
				for {
					select {
					case <-ch.done:
						crashed++
						break wait
					case <-time.After(20 * time.Millisecond):
						if settled() {
							_ = ch.cmd.Process.Kill()
							<-ch.done
							break wait
						}
					case <-deadline:
						t.Fatalf("instance %s: neither crashed nor settled the queue in 60s:\n%s", ch.name, tail(ch.stderr))
					}
				}
			}
			if crashed != cfg.MaxAttempts {
				t.Errorf("%d instances crashed; want MaxAttempts = %d", crashed, cfg.MaxAttempts)
			}
			starts, acked := map[int64]int{}, map[int64]bool{}
			lf, err := os.Open(cfg.Log)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			sc := bufio.NewScanner(lf)
			for sc.Scan() {
				w := strings.Fields(sc.Text())
				if len(w) < 2 {
					continue
				}
				id, _ := strconv.ParseInt(w[1], 10, 64)
				switch {
				case w[0] == "S":
					starts[id]++
				case w[0] == "E" && len(w) >= 7 && w[5] == "acked" && w[6] == "ok":
					acked[id] = true
				}
			}
			if starts[crashID] != cfg.MaxAttempts {
				t.Errorf("the crashing job started %d times; want %d", starts[crashID], cfg.MaxAttempts)
			}
			// Acked: deleted from the table (an ack's record may be lost with a
			// process killed right after the ack committed, but not the row's end).
			if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != 1 || acked[crashID] {
				t.Errorf("%d rows left (crashing job acked: %v); want only the dead letter", n, acked[crashID])
			}
			if len(acked) < others-cfg.MaxAttempts {
				t.Errorf("%d acks recorded of %d jobs", len(acked), others)
			}
			dead, err := q.DeadLetters(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(dead) != 1 || dead[0].ID != crashID || !strings.Contains(dead[0].LastError, "exhausted its attempts without settling") {
				t.Fatalf("dead letters %+v; want job %d, exhausted", dead, crashID)
			}
			if dead[0].Attempts != cfg.MaxAttempts+1 {
				t.Errorf("dead letter's attempts %d; want %d (the claim that found it exhausted counts itself)", dead[0].Attempts, cfg.MaxAttempts+1)
			}
		})
	}
}

// TestRescueAbandoned: in-process, a subscription abandoned while its handler runs
// (its Start context ended: a crash, as far as the table can tell) leaves the row in
// work; after MaxAttempts such runs the next claim dead-letters it with an
// *ExhaustedError reported to Observe, without running the handler.
func TestRescueAbandoned(t *testing.T) {
	for _, c := range dbForms {
		form := c.form
		t.Run(c.db+"/"+strings.ReplaceAll(form.String(), " ", "-"), func(t *testing.T) {
			t.Parallel()
			var b *backend
			if c.db == "sqlite" {
				b = sqliteBackend(t)
			} else {
				b = pgBackend(t)
			}
			q := defaultTable(t, b)
			ctx := t.Context()
			id, err := q.Publish(ctx, msg{N: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			const maxAttempts = 2
			var runs atomic.Int32
			results := make(chan inbox.Result, 16)
			for round := 0; ; round++ {
				if round > maxAttempts+1 {
					t.Fatalf("%d rounds without the job dead-lettered", round)
				}
				sctx, crash := context.WithCancel(ctx)
				running := make(chan struct{}, 1)
				s, err := q.Subscribe(func(hctx context.Context, j inbox.Job[msg]) error {
					runs.Add(1)
					running <- struct{}{}
					<-hctx.Done()
					return hctx.Err()
				}, inbox.SubscribeOptions{Form: form, Lease: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond,
					MaxAttempts: maxAttempts, Observe: func(r inbox.Result) { results <- r }})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Start(sctx); err != nil {
					t.Fatal(err)
				}
				var r inbox.Result
				select {
				case <-running:
					crash() // abandoned mid-handler, as in a crash: nothing settles
					<-s.Done()
					continue
				case r = <-results:
				case <-time.After(20 * time.Second):
					t.Fatal("neither a run nor a settlement in 20s")
				}
				crash()
				<-s.Done()
				var xe *inbox.ExhaustedError
				if r.Outcome != inbox.DeadLettered || r.SettleErr != nil || !errors.As(r.Err, &xe) || xe.ID != id || xe.MaxAttempts != maxAttempts {
					t.Fatalf("result %+v; want a dead letter with an *ExhaustedError", r)
				}
				break
			}
			if n := runs.Load(); n != maxAttempts {
				t.Errorf("handler ran %d times; want %d", n, maxAttempts)
			}
			dead, err := q.DeadLetters(ctx, 10)
			if err != nil || len(dead) != 1 || dead[0].ID != id {
				t.Fatalf("dead letters %+v, %v", dead, err)
			}
		})
	}
}
