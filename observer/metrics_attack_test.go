package observer_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/observer"
)

// An inbox table whose counts cannot be read (its table is gone, its database
// down) was exported as gotp_inbox_jobs 0 in every state: a dashboard showed an
// empty queue, and an alert on the backlog went quiet, exactly when the
// database failed. Its depth gauges are now left out (absent, as Prometheus
// reads unknown), while its counters of this process's outcomes stay.
func TestInboxDepthAbsentWhenStatsFail(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	db, err := inbox.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q, err := inbox.NewSQLite(db, inbox.Config[invoice]{Table: "never_created", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Stats(context.Background()); err == nil {
		t.Fatal("Stats of a missing table succeeded")
	}
	o := observer.New(n, observer.Options{Sources: []observer.Source{observer.InboxSource(q)}})
	_, body := get(t, o, "/observer/metrics")
	if strings.Contains(body, `gotp_inbox_jobs{state="ready",table="never_created"}`) {
		t.Errorf("the depth of a table whose counts failed is exported:\n%s", grepLines(body, "gotp_inbox_jobs"))
	}
	if !strings.Contains(body, `gotp_inbox_outcomes_total{outcome="ack",table="never_created"} 0`) {
		t.Errorf("the outcome counters went with the depth:\n%s", grepLines(body, "gotp_inbox"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
