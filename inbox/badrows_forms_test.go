package inbox_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// Garbage rows (NULL, empty, JSON null, not JSON, a wrong type, an attempts
// count at its type's limit) in the lock forms, which TestBadRowsNeverWedgeTheQueue
// does not run: each is dead-lettered, every good job handled once, no claim
// fails.
func TestBadRowsLockForms(t *testing.T) {
	pgURL(t) // skips without Postgres
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(form.String(), func(t *testing.T) {
			b := pgBackend(t)
			cols := userTable(t, b)
			const good = 40
			for i := range good {
				b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+b.ph(1)+`)`, []byte(`{"n":`+strconv.Itoa(i)+`}`))
			}
			bad := []string{"NULL", b.blob(""), b.blob("null"), b.blob("{oops"), b.blob(`{"n":"x"}`)}
			for _, p := range bad {
				b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+p+`)`)
			}
			b.exec(t, `INSERT INTO "`+b.table+`" (body, tries) VALUES (`+b.blob(`{"n":1000}`)+`, 2147483647)`)
			q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
			var mu sync.Mutex
			handled := map[int]int{}
			start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
				mu.Lock()
				handled[j.Payload.N]++
				mu.Unlock()
				return nil
			}, inbox.SubscribeOptions{Form: form, Workers: 3, MaxAttempts: 3, PollInterval: 20 * time.Millisecond})
			gotptest.Eventually(t, "every bad row dead-lettered", func() bool {
				st, err := q.Stats(t.Context())
				return err == nil && st.Dead == int64(len(bad))+1 && st.Ready == 0 && st.InWork == 0
			})
			mu.Lock()
			defer mu.Unlock()
			for i := range good {
				if handled[i] != 1 {
					t.Errorf("good job %d handled %d times", i, handled[i])
				}
			}
			if len(handled) != good {
				t.Errorf("%d distinct jobs handled, want %d", len(handled), good)
			}
			dead, err := q.DeadLetters(t.Context(), 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dead {
				if d.LastError == "" {
					t.Errorf("dead letter %d without its error", d.ID)
				}
			}
			if h := q.Health(); h.ClaimErrors != 0 || h.BadRows != 0 {
				t.Errorf("health %+v", h)
			}
		})
	}
}
