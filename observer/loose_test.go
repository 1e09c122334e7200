package observer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/observer"
)

// groupTable is jobTable with FIFO groups (inbox.GroupColumns).
func groupTable(t testing.TB, dialect string) *inbox.Queue[invoice] {
	t.Helper()
	name := fmt.Sprintf("obs_groups_%d_%d", os.Getpid(), inboxSeq.Add(1))
	cfg := inbox.Config[invoice]{Table: name, Columns: inbox.GroupColumns(), Logger: slog.New(slog.DiscardHandler)}
	var q *inbox.Queue[invoice]
	var err error
	switch dialect {
	case "sqlite":
		var db *sql.DB
		db, err = inbox.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		q, err = inbox.NewSQLite(db, cfg)
	case "postgres":
		u := os.Getenv("POSTGRES_TEST_URL")
		if u == "" {
			t.Skip("POSTGRES_TEST_URL not set")
		}
		var pool *pgxpool.Pool
		pool, err = pgxpool.New(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, s := range []string{"", "_periodic", "_limits"} {
				_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+name+s+`"`)
			}
			_, _ = pool.Exec(context.Background(), `DELETE FROM gotp_schema WHERE key = $1`, "inbox:"+name)
			pool.Close()
		})
		q, err = inbox.NewPostgres(pool, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q
}

// The observer's delete of a FIFO group's job cancelled in work, whose handler
// has seen its context cancelled but not yet returned, went through: the row was
// gone, the group's next job started beside the cancelled handler (two of one
// group at once), and the settlement found nothing to write. It is refused now,
// 409 as for a job in work, and succeeds once the handler has returned and its
// settlement is written; the group's next job starts only then.
func TestInboxDeleteCancelledJobStillRunning(t *testing.T) {
	eachInboxDB(t, func(t *testing.T, dialect string) {
		n := gotptest.NewNode(t, gotptest.Name("obs"))
		q := groupTable(t, dialect)
		ctx := context.Background()
		g := &inbox.PublishOpts{Group: "g"}
		a, err := q.Publish(ctx, invoice{Number: 1}, g)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Publish(ctx, invoice{Number: 2}, g); err != nil {
			t.Fatal(err)
		}
		startedA, cancelled, release, startedB := make(chan struct{}), make(chan error, 1), make(chan struct{}), make(chan struct{})
		settled := make(chan inbox.Result, 2)
		sub, err := q.Subscribe(func(ctx context.Context, j inbox.Job[invoice]) error {
			if j.Payload.Number == 2 {
				close(startedB)
				return nil
			}
			close(startedA)
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			<-release // a handler slow to stop
			return nil
		}, inbox.SubscribeOptions{Workers: 2, PollInterval: 10 * time.Millisecond, Observe: func(r inbox.Result) { settled <- r }})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sub.Stop(ctx)
		})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the Stop above, on a failure
		<-startedA
		o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: []observer.Source{observer.InboxSource(q)}})
		act := func(action string) (int, string) {
			rec := postJSON(o, "/observer/api/inbox/"+action+"?token=s3cret", fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), a))
			return rec.Code, rec.Body.String()
		}
		if code, body := act("cancel"); code != http.StatusOK {
			t.Fatalf("cancel: %d %s", code, body)
		}
		if cause := <-cancelled; !errors.Is(cause, inbox.ErrJobCancelled) {
			t.Fatalf("handler cancelled by %v", cause)
		}
		for _, action := range []string{"delete", "retry"} {
			if code, body := act(action); code != http.StatusConflict || !strings.Contains(body, "cancelled in work") {
				t.Fatalf("%s of a cancelled job whose handler still runs: %d %s, want 409", action, code, body)
			}
		}
		if j, err := q.Job(ctx, a); err != nil || j.State != inbox.StateCancelled {
			t.Fatalf("job %d after the refused delete: %+v, %v", a, j, err)
		}
		select {
		case <-startedB:
			t.Fatal("the group's next job started while the cancelled one's handler ran")
		default:
		}
		once.Do(func() { close(release) })
		if r := <-settled; r.ID != a || r.Outcome != inbox.Cancelled {
			t.Fatalf("first settlement %+v, want job %d cancelled", r, a)
		}
		<-startedB
		gotptest.Eventually(t, "the settled cancelled job deleted", func() bool {
			code, _ := act("delete")
			return code == http.StatusOK
		})
		if _, err := q.Job(ctx, a); !errors.Is(err, inbox.ErrNoJob) {
			t.Fatalf("job %d after delete: %v", a, err)
		}
	})
}

// gotp_inbox_jobs had no processed state: on a table that keeps acked rows (a
// ProcessedAt column, pruned by retention) they were in no series, so the
// states did not add up to the table's rows. The family has a processed series
// now (labels table and state only).
func TestInboxDepthCountsProcessed(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	db, err := inbox.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	plain, err := inbox.NewSQLite(db, inbox.Config[invoice]{Table: "kept", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`ALTER TABLE kept ADD COLUMN processed_at INTEGER`); err != nil {
		t.Fatal(err)
	}
	cols := inbox.DefaultColumns()
	cols.ProcessedAt = "processed_at"
	q, err := inbox.NewSQLite(db, inbox.Config[invoice]{Table: "kept", Columns: cols, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := q.Publish(context.Background(), invoice{Number: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	acked := make(chan struct{}, 2)
	sub, err := q.Subscribe(func(_ context.Context, j inbox.Job[invoice]) error {
		if j.Payload.Number == 2 {
			return inbox.DeadLetter(errors.New("no"))
		}
		return nil
	}, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond, Observe: func(inbox.Result) { acked <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-acked
	}
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Stop(stop); err != nil {
		t.Fatal(err)
	}
	o := observer.New(n, observer.Options{Sources: []observer.Source{observer.InboxSource(q)}})
	_, body := get(t, o, "/observer/metrics")
	for _, want := range []string{`gotp_inbox_jobs{state="processed",table="kept"} 2`, `gotp_inbox_jobs{state="dead",table="kept"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("no %s:\n%s", want, grepLines(body, "gotp_inbox_jobs"))
		}
	}
}

// A job's page and api/inbox/job showed its payload whole: a 4 MiB payload made
// a 4 MiB page (and a binary one 5.3 MiB of base64). Both cut it to
// MaxPayloadShown now, say so, and give the full size.
func TestInboxJobHugePayloadCut(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	q := jobTable(t, "sqlite")
	id, err := q.Publish(context.Background(), invoice{Number: 1, Note: strings.Repeat("x", 4<<20)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := observer.New(n, observer.Options{Token: "s3cret", Sources: []observer.Source{observer.InboxSource(q)}})
	q1 := "table=" + q.Table() + "&id=" + strconv.FormatInt(id, 10)
	code, body := get(t, o, "/observer/api/inbox/job?token=s3cret&"+q1)
	var j observer.InboxJob
	if err := json.Unmarshal([]byte(body), &j); code != 200 || err != nil {
		t.Fatalf("job: %d %v", code, err)
	}
	if len(body) > 2*observer.MaxPayloadShown || !j.PayloadCut || j.PayloadSize < 4<<20 || len(j.Payload) != observer.MaxPayloadShown {
		t.Fatalf("api/inbox/job of a 4 MiB payload: %d bytes, cut %v, size %d, %d shown", len(body), j.PayloadCut, j.PayloadSize, len(j.Payload))
	}
	code, page := get(t, o, "/observer/job?token=s3cret&"+q1)
	if code != 200 || len(page) > 2*observer.MaxPayloadShown || !strings.Contains(page, `id="payload-cut"`) {
		t.Fatalf("job page of a 4 MiB payload: %d, %d bytes", code, len(page))
	}
}

// An operator's "Authorization: bearer TOKEN" (the scheme in lower case, as
// curl users and some clients write it) was taken for no token at all: 401 for
// the right token. The scheme is case-insensitive; a wrong token is still 401,
// and, for an action, logged at ERROR (TestRefusedActionsAreLoggedAtError).
func TestTokenBearerSchemeCaseInsensitive(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	o := observer.New(n, observer.Options{Token: "s3cret"})
	for hdr, want := range map[string]int{"Bearer s3cret": 200, "bearer s3cret": 200, "BEARER  s3cret": 200, "bearer wrong": 401, "Basic s3cret": 401, "bearer": 401} {
		if code, _ := get(t, o, "/observer/api/snapshot", "Authorization", hdr); code != want {
			t.Errorf("Authorization %q: %d, want %d", hdr, code, want)
		}
	}
}

// Careless and hostile job actions: a body with a second object after the first
// acted on the first (which did the sender mean?), an id "+5" was job 5, and a
// POST with a wrong token to a path that names no action (a trailing slash, a
// typo) was refused in silence. Now the first two are 400, and the last is
// logged at ERROR.
func TestInboxJobActionAmbiguousAndUnlogged(t *testing.T) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Name("obs"), gotptest.Logger(logs.Logger()))
	q := jobTable(t, "sqlite")
	dead := deadLetters(t, q, 1)
	o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: []observer.Source{observer.InboxSource(q)}})
	for _, body := range []string{
		fmt.Sprintf(`{"table":%q,"id":%d} {"table":%q,"id":%d}`, q.Table(), dead[0], q.Table(), dead[0]+1),
		fmt.Sprintf(`{"table":%q,"id":"+%d"}`, q.Table(), dead[0]),
	} {
		if rec := postJSON(o, "/observer/api/inbox/delete?token=s3cret", body); rec.Code != http.StatusBadRequest {
			t.Errorf("delete %s: %d %s, want 400", body, rec.Code, rec.Body)
		}
	}
	if _, err := q.Job(context.Background(), dead[0]); err != nil {
		t.Fatalf("the job after refused deletes: %v", err)
	}
	for _, path := range []string{"/observer/api/inbox/delete/", "/observer//api/inbox/retry"} {
		before := len(logs.Find("observer: action refused"))
		if rec := postJSON(o, path+"?token=guess", `{}`); rec.Code != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token: %d, want 401", path, rec.Code)
		}
		if got := len(logs.Find("observer: action refused")) - before; got != 1 {
			t.Errorf("POST %s with a wrong token: %d ERROR records, want 1", path, got)
		}
	}
}
