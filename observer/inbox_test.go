package observer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/observer"
)

type invoice struct {
	Number int    `json:"number"`
	Note   string `json:"note,omitempty"`
}

var inboxSeq atomic.Int64

// jobTable makes a fresh default inbox table on SQLite or, for "postgres",
// on the database of POSTGRES_TEST_URL (skipping without it).
func jobTable(t testing.TB, dialect string) *inbox.Queue[invoice] {
	t.Helper()
	name := fmt.Sprintf("obs_jobs_%d_%d", os.Getpid(), inboxSeq.Add(1))
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
		q, err = inbox.NewSQLite(db, inbox.Config[invoice]{Table: name, Logger: slog.New(slog.DiscardHandler)})
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
			for _, s := range []string{"", "_periodic", "_limits"} { // CreateTable makes the side tables too
				_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+name+s+`"`)
			}
			pool.Close()
		})
		q, err = inbox.NewPostgres(pool, inbox.Config[invoice]{Table: name, Logger: slog.New(slog.DiscardHandler)})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q
}

// deadLetters publishes n jobs and has a subscription dead-letter them all,
// then stops it; it returns their ids.
func deadLetters(t testing.TB, q *inbox.Queue[invoice], n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for i := range n {
		id, err := q.Publish(ctx, invoice{Number: i, Note: "<b>dear</b> customer"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	settled := make(chan struct{}, n)
	sub, err := q.Subscribe(func(context.Context, inbox.Job[invoice]) error {
		return inbox.DeadLetter(errors.New("no such customer <script>"))
	}, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond, Observe: func(inbox.Result) { settled <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		<-settled
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sub.Stop(stop); err != nil {
		t.Fatal(err)
	}
	return ids
}

func jobsJSON(t *testing.T, o http.Handler, query string) observer.InboxJobs {
	t.Helper()
	code, body := get(t, o, "/observer/api/inbox/jobs?token=s3cret&"+query)
	if code != 200 {
		t.Fatalf("jobs %s: %d %s", query, code, body)
	}
	var p observer.InboxJobs
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func eachInboxDB(t *testing.T, f func(t *testing.T, dialect string)) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) { f(t, d) })
	}
}

// The inbox page lists a table's jobs by state, paged; a job's page shows its
// payload and last error (escaped); retry and delete act on it.
func TestInboxJobPages(t *testing.T) {
	eachInboxDB(t, func(t *testing.T, dialect string) {
		n := gotptest.NewNode(t, gotptest.Name("obs"))
		q := jobTable(t, dialect)
		dead := deadLetters(t, q, 3)
		var ready []int64
		for i := range 2 {
			id, err := q.Publish(context.Background(), invoice{Number: 100 + i}, &inbox.PublishOpts{RunAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			ready = append(ready, id)
		}
		o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, MaxRows: 2, Sources: []observer.Source{observer.InboxSource(q)}})
		table := url.QueryEscape(q.Table())

		// The main page links the table and its counts.
		_, main := get(t, o, "/observer/?token=s3cret")
		if !strings.Contains(main, `class="inbox" href="inbox?table=`+table) {
			t.Fatalf("main page does not link the inbox table:\n%s", main)
		}

		// Dead letters, two a page.
		p := jobsJSON(t, o, "table="+table+"&state=dead")
		if len(p.Jobs) != 2 || p.Jobs[0].ID != dead[0] || p.Jobs[1].ID != dead[1] || p.Next != dead[1] || p.Counts["dead"] != 3 || p.Counts["delayed"] != 2 {
			t.Fatalf("first page %+v", p)
		}
		if j := p.Jobs[0]; j.State != "dead" || j.Attempts != 1 || !strings.Contains(j.LastError, "no such customer") || !strings.Contains(j.Payload, `"number":0`) {
			t.Fatalf("dead job %+v", j)
		}
		p2 := jobsJSON(t, o, "table="+table+"&state=dead&after="+strconv.FormatInt(p.Next, 10))
		if len(p2.Jobs) != 1 || p2.Jobs[0].ID != dead[2] || p2.Next != 0 {
			t.Fatalf("second page %+v", p2)
		}
		if all := jobsJSON(t, o, "table="+table); len(all.Jobs) != 2 || all.Next == 0 {
			t.Fatalf("every state, first page %+v", all)
		}

		code, page := get(t, o, "/observer/inbox?token=s3cret&table="+table+"&state=dead")
		if code != 200 || !strings.Contains(page, `id="next"`) || !strings.Contains(page, `data-action="retry"`) ||
			!strings.Contains(page, "no such customer &lt;script&gt;") || strings.Contains(page, "<script>\"") {
			t.Fatalf("inbox page %d:\n%s", code, page)
		}
		code, page = get(t, o, "/observer/job?token=s3cret&table="+table+"&id="+strconv.FormatInt(dead[0], 10))
		if code != 200 || !strings.Contains(page, `id="last-error"`) || !strings.Contains(page, "dear") || strings.Contains(page, "<b>dear") ||
			!strings.Contains(page, `data-action="delete"`) || !strings.Contains(page, `data-action="retry"`) || strings.Contains(page, `data-action="cancel"`) {
			t.Fatalf("job page %d:\n%s", code, page)
		}

		// Retry makes the dead letter ready, its attempts reset.
		action := func(act string, id int64) (int, string) {
			rec := postJSON(o, "/observer/api/inbox/"+act+"?token=s3cret", fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), id))
			return rec.Code, rec.Body.String()
		}
		if code, body := action("retry", dead[0]); code != 200 {
			t.Fatalf("retry: %d %s", code, body)
		}
		if j, err := q.Job(context.Background(), dead[0]); err != nil || j.State != inbox.StateReady || j.Attempts != 0 {
			t.Fatalf("retried job %+v %v", j, err)
		}
		if code, body := action("retry", ready[0]); code != 200 {
			t.Fatalf("retry of a delayed job: %d %s", code, body)
		}
		if j, _ := q.Job(context.Background(), ready[0]); j.State != inbox.StateReady {
			t.Fatalf("retried delayed job %+v", j)
		}
		if code, body := action("delete", dead[1]); code != 200 {
			t.Fatalf("delete: %d %s", code, body)
		}
		if _, err := q.Job(context.Background(), dead[1]); !errors.Is(err, inbox.ErrNoJob) {
			t.Fatalf("deleted job still there: %v", err)
		}
		if code, body := action("delete", dead[1]); code != http.StatusNotFound || !strings.Contains(body, "no such job") {
			t.Fatalf("delete of a deleted job: %d %s", code, body)
		}
		// Cancel: the delayed job left is cancelled (and then retried back);
		// a dead letter cannot be.
		if code, body := action("cancel", ready[1]); code != 200 {
			t.Fatalf("cancel of a delayed job: %d %s", code, body)
		}
		if j, _ := q.Job(context.Background(), ready[1]); j.State != inbox.StateCancelled {
			t.Fatalf("cancelled job %+v", j)
		}
		if p := jobsJSON(t, o, "table="+table+"&state=cancelled"); len(p.Jobs) != 1 || p.Jobs[0].ID != ready[1] || p.Counts["cancelled"] != 1 || !p.Cancel {
			t.Fatalf("cancelled list %+v", p)
		}
		if code, body := action("cancel", dead[2]); code != http.StatusConflict || !strings.Contains(body, "dead") {
			t.Fatalf("cancel of a dead letter: %d %s", code, body)
		}
		if code, body := action("cancel", 424242); code != http.StatusNotFound {
			t.Fatalf("cancel of an unknown id: %d %s", code, body)
		}
		if code, body := action("retry", ready[1]); code != 200 {
			t.Fatalf("retry of a cancelled job: %d %s", code, body)
		}
		if j, _ := q.Job(context.Background(), ready[1]); j.State != inbox.StateReady {
			t.Fatalf("retried cancelled job %+v", j)
		}
	})
}

// Cancel from the observer cancels a job in work: its handler's context ends,
// and the job is kept, cancelled.
func TestInboxCancelJobInWork(t *testing.T) {
	eachInboxDB(t, func(t *testing.T, dialect string) {
		n := gotptest.NewNode(t, gotptest.Name("obs"))
		q := jobTable(t, dialect)
		id, err := q.Publish(context.Background(), invoice{Number: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		started, ended := make(chan struct{}), make(chan error, 1)
		sub, err := q.Subscribe(func(ctx context.Context, _ inbox.Job[invoice]) error {
			close(started)
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return ctx.Err()
		}, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sub.Stop(ctx)
		})
		<-started
		o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: []observer.Source{observer.InboxSource(q)}})
		_, page := get(t, o, "/observer/job?token=s3cret&table="+q.Table()+"&id="+strconv.FormatInt(id, 10))
		if !strings.Contains(page, `data-action="cancel"`) {
			t.Fatalf("a job in work offers no cancel:\n%s", page)
		}
		rec := postJSON(o, "/observer/api/inbox/cancel?token=s3cret", fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), id))
		if rec.Code != 200 {
			t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
		}
		select {
		case cause := <-ended:
			if !errors.Is(cause, inbox.ErrJobCancelled) {
				t.Fatalf("handler cancelled by %v", cause)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the handler was not cancelled")
		}
		gotptest.Eventually(t, "the job kept, cancelled", func() bool {
			j, err := q.Job(context.Background(), id)
			return err == nil && j.State == inbox.StateCancelled
		})
	})
}

// A job in work cannot be retried or deleted: 409, and the job is untouched.
func TestInboxJobInWorkConflict(t *testing.T) {
	eachInboxDB(t, func(t *testing.T, dialect string) {
		n := gotptest.NewNode(t, gotptest.Name("obs"))
		q := jobTable(t, dialect)
		id, err := q.Publish(context.Background(), invoice{Number: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		sub, err := q.Subscribe(func(ctx context.Context, _ inbox.Job[invoice]) error {
			close(started)
			<-release
			return nil
		}, inbox.SubscribeOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sub.Stop(ctx)
		})
		<-started
		o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: []observer.Source{observer.InboxSource(q)}})
		for _, act := range []string{"retry", "delete"} {
			rec := postJSON(o, "/observer/api/inbox/"+act+"?token=s3cret", fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), id))
			if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "in_work") {
				t.Fatalf("%s of a job in work: %d %s", act, rec.Code, rec.Body)
			}
		}
		_, page := get(t, o, "/observer/job?token=s3cret&table="+q.Table()+"&id="+strconv.FormatInt(id, 10))
		if strings.Contains(page, `data-action="delete"`) || strings.Contains(page, `data-action="retry"`) {
			t.Fatalf("a job in work offers retry or delete:\n%s", page)
		}
		close(release)
	})
}

// The job actions are refused without the token, from another site, as a
// form, as a GET, and when AllowKill is off; the job is untouched.
func TestInboxJobActionsGuarded(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	q := jobTable(t, "sqlite")
	dead := deadLetters(t, q, 1)
	body := fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), dead[0])
	src := []observer.Source{observer.InboxSource(q)}
	o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: src})
	readOnly := observer.New(n, observer.Options{Token: "s3cret", Sources: src})
	noToken := observer.New(n, observer.Options{AllowKill: true, Sources: src})
	for _, act := range []string{"retry", "delete", "cancel"} {
		path := "/observer/api/inbox/" + act + "?token=s3cret"
		for _, c := range []struct {
			what string
			h    http.Handler
			path string
			hdr  []string
			want int
		}{
			{"without the token", o, "/observer/api/inbox/" + act, nil, http.StatusUnauthorized},
			{"with a wrong token", o, "/observer/api/inbox/" + act + "?token=guess", nil, http.StatusUnauthorized},
			{"from another origin", o, path, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
			{"from another site", o, path, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
			{"as a form", o, path, []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
			{"as text", o, path, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
			{"without AllowKill", readOnly, path, nil, http.StatusForbidden},
			{"without a Token", noToken, "/observer/api/inbox/" + act, nil, http.StatusForbidden},
		} {
			if rec := postJSON(c.h, c.path, body, c.hdr...); rec.Code != c.want {
				t.Errorf("%s %s: %d %s, want %d", act, c.what, rec.Code, rec.Body, c.want)
			}
		}
		if code, _ := get(t, o, path+"&table="+q.Table()+"&id="+strconv.FormatInt(dead[0], 10)); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d", act, code)
		}
	}
	if j, err := q.Job(context.Background(), dead[0]); err != nil || j.State != inbox.StateDead || j.Attempts != 1 {
		t.Fatalf("a refused action touched the job: %+v %v", j, err)
	}
	// A read-only observer shows the jobs, without buttons.
	code, page := get(t, readOnly, "/observer/inbox?token=s3cret&table="+q.Table()+"&state=dead")
	if code != 200 || !strings.Contains(page, strconv.FormatInt(dead[0], 10)) || strings.Contains(page, `class="job" data-action`) {
		t.Fatalf("read-only inbox page %d:\n%s", code, page)
	}
	// From the observer's own page: same origin, allowed.
	if rec := postJSON(o, "/observer/api/inbox/retry?token=s3cret", body, "Origin", "http://example.com", "Sec-Fetch-Site", "same-origin"); rec.Code != 200 {
		t.Fatalf("same-origin retry: %d %s", rec.Code, rec.Body)
	}
}

// Bad parameters get a 400 naming the parameter; an unknown table or id a 404.
func TestInboxJobBadInput(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	q := jobTable(t, "sqlite")
	dead := deadLetters(t, q, 1)
	o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: []observer.Source{observer.InboxSource(q)}})
	tbl := q.Table()
	for _, c := range []struct {
		path string
		want int
		says string
	}{
		{"api/inbox/jobs?table=" + tbl + "&state=running", 400, `state "running"`},
		{"api/inbox/jobs?table=" + tbl + "&after=x", 400, `after "x"`},
		{"api/inbox/jobs?table=" + tbl + "&after=-1", 400, `after "-1"`},
		{"api/inbox/jobs?table=nope", 404, `no such inbox table: "nope"`},
		{"api/inbox/jobs?state=dead", 400, "table"},
		{"api/inbox/job?table=" + tbl + "&id=abc", 400, `id "abc": not a job id`},
		{"api/inbox/job?table=" + tbl + "&id=0", 400, `id "0"`},
		{"api/inbox/job?table=" + tbl + "&id=99999999999999999999", 400, "not a job id"},
		{"api/inbox/job?table=" + tbl + "&id=424242", 404, "no such job"},
		{"api/inbox/job?table=nope&id=1", 404, "no such inbox table"},
		{"job?table=" + tbl + "&id=abc", 400, "not a job id"},
		{"job?table=" + tbl + "&id=424242", 404, "no such job"},
		{"inbox?table=nope", 404, "no such inbox table"},
		{"inbox?table=" + tbl + "&state=x", 400, `state &#34;x&#34;`},
	} {
		code, body := get(t, o, "/observer/"+c.path+"&token=s3cret")
		if code != c.want || !strings.Contains(body, c.says) {
			t.Errorf("GET %s: %d %q, want %d saying %q", c.path, code, body, c.want, c.says)
		}
	}
	for _, c := range []struct {
		body string
		want int
		says string
	}{
		{`{"table":"` + tbl + `","id":"abc"}`, 400, "not a job id"},
		{`{"table":"` + tbl + `","id":1.5}`, 400, "not a job id"},
		{`{"table":"` + tbl + `","id":-3}`, 400, "not a job id"},
		{`{"table":"` + tbl + `"}`, 400, "id"},
		{`{"id":1}`, 400, "table"},
		{`not json`, 400, "body"},
		{`{"table":"nope","id":1}`, 404, "no such inbox table"},
		{`{"table":"` + tbl + `","id":424242}`, 404, "no such job"},
	} {
		rec := postJSON(o, "/observer/api/inbox/delete?token=s3cret", c.body)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("POST %s: %d %q, want %d saying %q", c.body, rec.Code, rec.Body, c.want, c.says)
		}
	}
	if j, err := q.Job(context.Background(), dead[0]); err != nil || j.State != inbox.StateDead {
		t.Fatalf("bad requests touched the job: %+v %v", j, err)
	}
	// The id may come as a string too.
	if rec := postJSON(o, "/observer/api/inbox/delete?token=s3cret", fmt.Sprintf(`{"table":%q,"id":"%d"}`, tbl, dead[0])); rec.Code != 200 {
		t.Fatalf("delete with the id as a string: %d %s", rec.Code, rec.Body)
	}
}

// FuzzInboxJobAction: whatever is posted to a job action, the answer is a
// clear 4xx or the action on a job named by a valid id, never a panic or a
// 5xx; nothing but the named job is deleted.
func FuzzInboxJobAction(f *testing.F) {
	for _, s := range []string{`{"table":"T","id":1}`, `{"table":"T","id":"1"}`, `{"table":"T","id":1e3}`, `{"table":"T","id":null}`,
		`{"table":"","id":1}`, `{}`, `null`, `[`, "\x00", `{"table":"T","id":"0x1"}`, `{"table":"T","id":9223372036854775808}`} {
		f.Add(s)
	}
	n := gotptest.NewNode(f, gotptest.Name("fz"), gotptest.Logger(slog.New(slog.DiscardHandler)))
	q := jobTable(f, "sqlite")
	o := observer.New(n, observer.Options{AllowKill: true, Token: "t", Sources: []observer.Source{observer.InboxSource(q)}})
	f.Fuzz(func(t *testing.T, body string) {
		body = strings.ReplaceAll(body, `"T"`, strconv.Quote(q.Table()))
		id, err := q.Publish(context.Background(), invoice{Number: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer q.DeleteJob(context.Background(), id)
		rec := postJSON(o, "/observer/api/inbox/delete?token=t", body)
		_, gone := q.Job(context.Background(), id)
		switch rec.Code {
		case http.StatusOK:
			if !errors.Is(gone, inbox.ErrNoJob) && !strings.Contains(body, strconv.FormatInt(id, 10)) {
				t.Fatalf("200 for %q", body)
			}
		case http.StatusBadRequest, http.StatusNotFound:
			if gone != nil {
				t.Fatalf("%d for %q, yet job %d is gone: %v", rec.Code, body, id, gone)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}

// FuzzInboxJobsQuery: whatever the query of a job list or job page, the
// answer is 200, 400 or 404, never a panic or a 5xx.
func FuzzInboxJobsQuery(f *testing.F) {
	for _, s := range []string{"table=T", "table=T&state=dead", "table=T&after=5", "table=T&after=-1", "table=T&state=%00",
		"table=x", "", "table=T&id=1", "table=T&id=abc", "table=T&id=1&id=2", "table=T&state=all&after=99999999999999999999"} {
		f.Add(s)
	}
	n := gotptest.NewNode(f, gotptest.Name("fz"), gotptest.Logger(slog.New(slog.DiscardHandler)))
	q := jobTable(f, "sqlite")
	deadLetters(f, q, 2)
	o := observer.New(n, observer.Options{Sources: []observer.Source{observer.InboxSource(q)}})
	f.Fuzz(func(t *testing.T, query string) {
		query = strings.ReplaceAll(query, "table=T", "table="+q.Table())
		for _, path := range []string{"api/inbox/jobs", "api/inbox/job", "inbox", "job"} {
			req := httptest.NewRequest(http.MethodGet, "/observer/"+path, nil)
			req.URL.RawQuery = query
			rec := httptest.NewRecorder()
			o.ServeHTTP(rec, req)
			switch rec.Code {
			case 200, 400, 404:
			default:
				t.Fatalf("GET %s?%s: %d %s", path, query, rec.Code, rec.Body)
			}
		}
	})
}

// The inbox's histograms are on the metrics: handler duration by table and
// outcome, and the delay from publish to start by table; no other label.
func TestInboxTimingMetrics(t *testing.T) {
	eachInboxDB(t, func(t *testing.T, dialect string) {
		n := gotptest.NewNode(t, gotptest.Name("obs"))
		q := jobTable(t, dialect)
		deadLetters(t, q, 2) // two attempts, both dead-lettered
		o := observer.New(n, observer.Options{Sources: []observer.Source{observer.InboxSource(q)}})
		_, body := get(t, o, "/observer/metrics")
		tbl := q.Table()
		for _, want := range []string{
			`gotp_inbox_handle_seconds_count{outcome="dead",table="` + tbl + `"} 2`,
			`gotp_inbox_handle_seconds_count{outcome="ack",table="` + tbl + `"} 0`,
			`gotp_inbox_handle_seconds_bucket{outcome="dead",table="` + tbl + `",le="+Inf"} 2`,
			`gotp_inbox_start_delay_seconds_count{table="` + tbl + `"} 2`,
			`gotp_inbox_jobs{state="dead",table="` + tbl + `"} 2`,
			`gotp_inbox_outcomes_total{outcome="dead",table="` + tbl + `"} 2`,
			"# TYPE gotp_inbox_handle_seconds histogram",
			"# TYPE gotp_inbox_start_delay_seconds histogram",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "gotp_inbox_handle_seconds") || strings.HasPrefix(line, "gotp_inbox_start_delay_seconds") {
				labels := line[strings.Index(line, "{")+1 : strings.Index(line, "}")]
				for _, kv := range strings.Split(labels, ",") {
					if k := kv[:strings.Index(kv, "=")]; k != "table" && k != "outcome" && k != "le" {
						t.Errorf("label %s in %s", k, line)
					}
				}
			}
		}
	})
}
