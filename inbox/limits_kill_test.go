package inbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// Limits across real OS processes killed with SIGKILL mid-drain (see
// faultproc_test.go): instances holding Concurrency slots and PerPartition places
// die with handlers in work; the others finish every job, none acked twice, every
// re-run explained by a kill, and the execution log (each handler's start and
// return) never has more handlers in work at once than the limits allow, across
// the instances. Short here; with INBOX_FAULT=1, 4,000 jobs, 3 instances and 6
// kills.
func TestLimitsFaultRun(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var b *backend
			cfg := childConfig{DB: db, Form: inbox.Lease, StopIn: 2 * time.Second, Workers: 4, Work: 20 * time.Millisecond,
				Lease: 2 * time.Second, Limits: inbox.Limits{Concurrency: 5, PerPartition: 2}}
			b = childBackend(t, db, &cfg)
			f := &faultRun{t: t, b: b, cfg: cfg, jobs: 300, size: 2, kills: 2, keys: 6, timeout: 2 * time.Minute}
			if os.Getenv("INBOX_FAULT") != "" {
				f.jobs, f.size, f.kills, f.keys, f.timeout = 4000, 3, 6, 40, 10*time.Minute
				// As TestFaultRun's full run: a lease long enough that four loaded
				// processes on one SQLite file do not lose leases by themselves (at
				// 2 s, 5 runs of 4,000 lost theirs with no fault, 1 run in 1).
				f.cfg.Workers, f.cfg.Lease = 8, 5*time.Second
				f.cfg.Limits = inbox.Limits{Concurrency: 12, PerPartition: 2}
			}
			s := f.run()
			if s.MostInWork < 2 {
				t.Errorf("at most %d handlers in work at once: the limits were never approached", s.MostInWork)
			}
			t.Logf("%s: %s; most in work %d, of a key %d", db, s, s.MostInWork, s.MostOfKey)
		})
	}
}

// An instance, a real OS process, killed with SIGKILL while its handlers fill
// both limits (Concurrency 2: both slots; PerPartition 2 on the one key: both of
// its places): another instance runs no job before the dead one's holdings'
// lease ends, then runs every job, the two the dead one had in work again
// (attempt 2), each acked once; it runs 2 handlers at once (which it can only
// with both slots and both places: the dead instance's came back), and once it
// has, no row of TABLE_limits is held under the dead instance's tags.
func TestLimitsKilledProcessHoldingsComeBack(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var b *backend
			limits := inbox.Limits{Concurrency: 2, PerPartition: 2}
			cfg := childConfig{DB: db, Form: inbox.Lease, StopIn: 2 * time.Second, Workers: 4, Lease: 1500 * time.Millisecond,
				Limits: limits, Block: true}
			b = childBackend(t, db, &cfg)
			q := groupTable(t, b)
			const n = 20
			for i := range n {
				if _, err := q.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			f := spawner(t, b, "limitkill", &cfg)
			ch := f.spawn(cfg)
			within(t, 30*time.Second, func() bool {
				b, _ := os.ReadFile(cfg.Log)
				return strings.Count(string(b), "S ") == 2
			}, "the child fills the limits")
			lt := `"` + b.table + `_limits"`
			held := func(cond string) int64 {
				return b.queryN(t, `SELECT count(*) FROM `+lt+` WHERE starts > `+b.nowMicrosSQL()+` AND `+cond)
			}
			// The child's holdings: both slots and both places of k (its lanes
			// may have taken them a moment after the handlers started).
			within(t, 10*time.Second, func() bool {
				return held(`name LIKE 'slot %'`) == 2 && held(`name LIKE 'p %'`) == 2
			}, "the child holds both slots and both places")
			// The dead instance's tags (one per lane), kept aside.
			dead := `"` + b.table + `_deadtags"`
			b.exec(t, `CREATE TABLE `+dead+` AS SELECT DISTINCT window_start AS tag FROM `+lt+` WHERE starts > `+b.nowMicrosSQL())
			t.Cleanup(func() { b.exec(t, `DROP TABLE IF EXISTS `+dead) })
			until := b.queryN(t, `SELECT min(starts) FROM `+lt+` WHERE starts > `+b.nowMicrosSQL())
			if err := ch.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-ch.done
			var childRan []int64
			if log, err := os.ReadFile(cfg.Log); err == nil {
				for line := range strings.Lines(string(log)) {
					var id int64
					if _, err := fmt.Sscanf(line, "S %d 1 ", &id); err == nil {
						childRan = append(childRan, id)
					}
				}
			}

			var mu sync.Mutex
			inWork, most := 0, 0
			first := int64(0)
			attempts := map[int64][]int{}
			acked := map[int64]int{}
			barrier := make(chan struct{})
			var once sync.Once
			done := newTally(n)
			start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				mu.Lock()
				if first == 0 {
					first = time.Now().UnixMicro()
				}
				inWork++
				most = max(most, inWork)
				attempts[j.ID] = append(attempts[j.ID], j.Attempt)
				if inWork == 2 {
					once.Do(func() { close(barrier) })
				}
				mu.Unlock()
				// The first handlers wait until two run at once: both slots and
				// both places of k are held here.
				select {
				case <-barrier:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				mu.Lock()
				inWork--
				mu.Unlock()
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 4, Lease: 1500 * time.Millisecond, PollInterval: 20 * time.Millisecond, Limits: limits,
				Observe: func(r inbox.Result) {
					if r.Outcome == inbox.Acked {
						mu.Lock()
						acked[r.ID]++
						mu.Unlock()
					}
				}})
			select {
			case <-barrier:
			case <-time.After(30 * time.Second):
				t.Fatal("the live instance never ran 2 handlers at once: the dead instance's slots or places did not come back")
			}
			// Two handlers of k run here: this instance holds both slots and
			// both places of k, so no row is left under a dead tag.
			if n := b.queryN(t, `SELECT count(*) FROM `+lt+` WHERE window_start IN (SELECT tag FROM `+dead+`)`); n != 0 {
				t.Errorf("%d rows of TABLE_limits still under the dead instance's tags once this one holds both slots and places", n)
			}
			done.wait(t, 60*time.Second)
			within(t, 10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(acked) == n
			}, "every job's ack observed")
			mu.Lock()
			defer mu.Unlock()
			if first < until {
				t.Errorf("the live instance started a job %v before the dead instance's holdings' lease ended", time.Duration(until-first)*time.Microsecond)
			}
			if most > 2 {
				t.Errorf("%d handlers in work at once, limits 2", most)
			}
			for _, id := range childRan {
				if fmt.Sprint(attempts[id]) != "[2]" {
					t.Errorf("job %d, in work in the dead instance: attempts here %v, want [2]", id, attempts[id])
				}
			}
			for id, k := range acked {
				if k != 1 {
					t.Errorf("job %d acked %d times", id, k)
				}
			}
			if len(acked) != n {
				t.Errorf("%d jobs acked, want %d", len(acked), n)
			}
		})
	}
}
