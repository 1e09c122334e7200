package inbox_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// Garbage rows mixed into batches: NULL, empty, JSON null, not JSON, a wrong
// type. In every batch form each good job reaches the handler once, each bad
// row is dead-lettered at its first attempt with its decode error and never
// passed to the handler, and the rest of its batch settles as the handler says
// (in the row lock form a bad row does not roll its batch back).
func TestBatchBadRowsDeadLetteredNotWedged(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, form := range batchForms(b.dialect) {
			t.Run(form.String(), func(t *testing.T) {
				b := freshBackend(t, b.dialect)
				cols := userTable(t, b)
				const good = 60
				bad := []string{"NULL", b.blob(""), b.blob("null"), b.blob("{oops"), b.blob(`{"n":"x"}`)}
				for i := range good {
					b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+b.ph(1)+`)`, []byte(`{"n":`+strconv.Itoa(i)+`}`))
					if i%12 == 5 {
						b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+bad[i/12]+`)`)
					}
				}
				q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
				var mu sync.Mutex
				handled := map[int]int{}
				batches := 0
				startBatch(t, q, func(ctx context.Context, jobs []inbox.Job[msg]) error {
					mu.Lock()
					defer mu.Unlock()
					batches++
					for _, j := range jobs {
						handled[j.Payload.N]++
					}
					return nil
				}, 8, inbox.SubscribeOptions{Form: form, Workers: 2, MaxAttempts: 3, PollInterval: 20 * time.Millisecond})
				gotptest.Eventually(t, "every row settled", func() bool {
					st, err := q.Stats(t.Context())
					return err == nil && st.Dead == int64(len(bad)) && st.Ready == 0 && st.InWork == 0 && st.Delayed == 0
				})
				mu.Lock()
				for i := range good {
					if handled[i] != 1 {
						t.Errorf("good job %d handled %d times", i, handled[i])
					}
				}
				if len(handled) != good {
					t.Errorf("%d distinct payloads handled, want %d (a bad row reached the handler?)", len(handled), good)
				}
				mu.Unlock()
				dead, err := q.DeadLetters(t.Context(), 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range dead {
					if d.Attempts != 1 || !(strings.Contains(d.LastError, "decode") || strings.Contains(d.LastError, "null") || strings.Contains(d.LastError, "invalid character") || strings.Contains(d.LastError, "unmarshal")) {
						t.Errorf("dead letter %d: attempts %d, last error %q", d.ID, d.Attempts, d.LastError)
					}
				}
				if h := q.Health(); h.ClaimErrors != 0 || h.BadRows != 0 {
					t.Errorf("health %+v: bad rows must not fail claims", h)
				}
				if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); n != int64(len(bad)) {
					t.Errorf("%d rows left, want the %d dead letters", n, len(bad))
				}
			})
		}
	})
}
