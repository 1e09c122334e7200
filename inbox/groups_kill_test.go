package inbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// FIFO groups with two instances, one a real OS process that SIGKILLs itself
// with the head of group a in work (nothing of it settles, its connections go
// with it): the other instance takes no job of group a while the dead one's
// claim lasts, then takes the head again first (its second attempt) and the
// rest of a in order; group b goes on meanwhile, in order. Every job is handled
// once by the live instance, none of a group overlaps another, and the group
// is not wedged after the claim ends (lease expiry, or the connection's end in
// the lock forms). Each form the groups work in, on each database.
func TestFIFOGroupsKilledProcess(t *testing.T) {
	for _, c := range dbForms {
		t.Run(c.db+"/"+strings.ReplaceAll(c.form.String(), " ", "-"), func(t *testing.T) {
			t.Parallel()
			var b *backend
			cfg := childConfig{DB: c.db, Form: c.form, StopIn: 2 * time.Second, Workers: 1, Work: 20 * time.Millisecond,
				Lease: 600 * time.Millisecond, Crash: "crash", MaxAttempts: 5, Groups: true}
			b = childBackend(t, c.db, &cfg)
			q := groupTable(t, b)
			ctx := t.Context()
			type pub struct {
				n     int
				group string
				text  string
			}
			jobs := []pub{{0, "a", "crash"}, {1, "a", ""}, {2, "a", ""}, {3, "a", ""}, {10, "b", ""}, {11, "b", ""}, {12, "b", ""}}
			groupOf := map[int]string{}
			var crashID int64
			for _, j := range jobs {
				id, err := q.Publish(ctx, msg{N: j.n, Text: j.text}, &inbox.PublishOpts{Group: j.group})
				if err != nil {
					t.Fatal(err)
				}
				groupOf[j.n] = j.group
				if j.text != "" {
					crashID = id
				}
			}
			f := spawner(t, b, "groupkill", &cfg)
			ch := f.spawn(cfg)
			// Wait until the child has started the head of group a.
			within(t, 30*time.Second, func() bool {
				b, _ := os.ReadFile(cfg.Log)
				return strings.Contains(string(b), fmt.Sprintf("S %d 1 ", crashID))
			}, "the child starts the head of group a")

			var mu sync.Mutex
			var died time.Time
			inWork := map[string]int{}
			order := map[string][]int{}
			starts := map[int]int{}
			attemptOfHead := 0
			var firstA time.Time
			var errs []string
			done := newTally(len(jobs))
			// The second instance, in this process; on Postgres its claims read the
			// groups' heads (the child's read the claim index in order), so that the
			// claim the child left is taken again through the heads' list of
			// claimed rows.
			live := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
			if b.dialect == inbox.Postgres {
				inbox.ClaimHeads(live, true)
			}
			start(t, live, func(ctx context.Context, j inbox.Job[msg]) error {
				g := groupOf[j.Payload.N]
				mu.Lock()
				inWork[g]++
				if inWork[g] > 1 {
					errs = append(errs, fmt.Sprintf("two jobs of group %s in work at once (job %d)", g, j.Payload.N))
				}
				if g == "a" && firstA.IsZero() {
					firstA = time.Now()
				}
				if j.ID == crashID {
					attemptOfHead = j.Attempt
				}
				order[g] = append(order[g], j.Payload.N)
				starts[j.Payload.N]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				inWork[g]--
				mu.Unlock()
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 4, Form: c.form, Lease: 600 * time.Millisecond, PollInterval: 20 * time.Millisecond})

			select {
			case <-ch.done:
				mu.Lock()
				died = time.Now()
				mu.Unlock()
			case <-time.After(30 * time.Second):
				t.Fatalf("the child did not kill itself:\n%s", tail(ch.stderr))
			}
			if !strings.Contains(fmt.Sprint(ch.err), "killed") {
				t.Fatalf("the child ended with %v, not SIGKILL:\n%s", ch.err, tail(ch.stderr))
			}
			done.wait(t, 60*time.Second)
			mu.Lock()
			defer mu.Unlock()
			for _, e := range errs {
				t.Error(e)
			}
			if firstA.Before(died) {
				t.Errorf("a job of group a started %v before the instance holding its head died", died.Sub(firstA))
			}
			if fmt.Sprint(order["a"]) != "[0 1 2 3]" || fmt.Sprint(order["b"]) != "[10 11 12]" {
				t.Errorf("order a %v, b %v; want [0 1 2 3] and [10 11 12]", order["a"], order["b"])
			}
			for n, k := range starts {
				if k != 1 {
					t.Errorf("job %d started %d times here", n, k)
				}
			}
			if attemptOfHead != 2 {
				t.Errorf("the head was taken again at attempt %d, want 2", attemptOfHead)
			}
			// The child started nothing but the head (its one worker was in it).
			lf, err := os.Open(cfg.Log)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			sc := bufio.NewScanner(lf)
			for sc.Scan() {
				w := strings.Fields(sc.Text())
				if len(w) >= 2 && w[0] == "S" {
					if id, _ := strconv.ParseInt(w[1], 10, 64); id != crashID {
						t.Errorf("the child started job id %d", id)
					}
				}
			}
		})
	}
}

// FIFO groups across real OS processes killed with SIGKILL mid-drain and, on
// Postgres, every instance's backends terminated (see faultproc_test.go), with
// claims that read the groups' heads on Postgres: the others finish every job,
// none acked twice, every re-run explained by a fault, and the execution log
// never has two handlers of a group in work at once across the instances, nor a
// group's job first started before an earlier one of its group. Short here; with
// INBOX_FAULT=1, 4,000 jobs in 40 groups, 3 instances and 6 kills.
func TestFIFOGroupsFaultRun(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var b *backend
			cfg := childConfig{DB: db, Form: inbox.Lease, StopIn: 2 * time.Second, Workers: 4, Work: 10 * time.Millisecond,
				Lease: 2 * time.Second, Groups: true, Heads: true}
			b = childBackend(t, db, &cfg)
			f := &faultRun{t: t, b: b, cfg: cfg, jobs: 300, size: 2, kills: 2, groups: 10, timeout: 2 * time.Minute}
			if db == "postgres" {
				f.terms = 1
			}
			if os.Getenv("INBOX_FAULT") != "" {
				f.jobs, f.size, f.kills, f.groups, f.timeout = 4000, 3, 6, 40, 10*time.Minute
				f.cfg.Workers, f.cfg.Lease = 8, 5*time.Second
				if db == "postgres" {
					f.terms = 3
				}
			}
			s := f.run()
			if s.MostInWork < 2 {
				t.Errorf("at most %d handlers in work at once: the groups never ran side by side", s.MostInWork)
			}
			t.Logf("%s: %s; most in work %d, of a group %d", db, s, s.MostInWork, s.MostOfKey)
		})
	}
}
