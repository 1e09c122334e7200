package observer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/observer"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type idle struct{ server.Defaults }

// tree starts a real tree: root (one_for_one) over a worker "w1", a worker
// "w2" and a dynamic supervisor "conns" with two children.
func tree(t *testing.T) (*gotp.Node, gotp.PID) {
	t.Helper()
	n := gotp.NewNode(gotp.Options{Name: "obs", Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Stop(ctx)
	})
	ctx := context.Background()
	newIdle := func() server.Behaviour { return idle{} }
	conns := supervisor.DynamicSpec[int]{
		Restart: supervisor.Temporary,
		Start: func(ctx context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
			return server.StartLink(ctx, sup, idle{})
		},
	}
	root, err := supervisor.Start(ctx, n, supervisor.Spec{
		Intensity: 10,
		Children: []supervisor.ChildSpec{
			supervisor.Server("w1", newIdle),
			supervisor.Server("w2", newIdle),
			conns.ChildSpec("conns", server.Named("conns")),
		},
	}, server.Named("root"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := supervisor.StartDynamicChild(ctx, n, gotp.Name("conns"), 0); err != nil {
			t.Fatal(err)
		}
	}
	return n, root
}

func get(t *testing.T, h http.Handler, target string, hdr ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestPageShowsTreeAndProcesses(t *testing.T) {
	n, root := tree(t)
	o := observer.New(n, observer.Options{})
	code, body := get(t, o, "/observer/")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{"root", html.EscapeString(root.String()), `data-id="w1"`, `data-id="w2"`, `data-id="conns"`, "one_for_one", "dynamic", "<table id=\"processes\">"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, `class="kill"`) {
		t.Error("kill buttons shown without AllowKill")
	}
	code, part := get(t, o, "/observer/?partial=1")
	if code != 200 || strings.Contains(part, "<html>") || !strings.Contains(part, `data-id="conns"`) {
		t.Errorf("partial refresh: %d, %.200s", code, part)
	}
}

func TestSnapshotJSON(t *testing.T) {
	n, root := tree(t)
	// A process with a long mailbox must come first in the default order.
	busy, _ := n.Spawn(func(p *gotp.Process) error { <-p.Context().Done(); return nil })
	for range 5 {
		n.Send(busy, "x")
	}
	o := observer.New(n, observer.Options{})
	code, body := get(t, o, "/observer/api/snapshot")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var s observer.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if s.Node != "obs" || len(s.Processes) != n.ProcessCount() {
		t.Fatalf("node %q with %d processes, want obs with %d", s.Node, len(s.Processes), n.ProcessCount())
	}
	if s.Processes[0].PID != busy.String() || s.Processes[0].MailboxLen != 5 {
		t.Fatalf("first row %+v, want %v with mailbox 5", s.Processes[0], busy)
	}
	if len(s.Supervisors) != 1 || s.Supervisors[0].PID != root.String() {
		t.Fatalf("supervisors %+v, want one root %v", s.Supervisors, root)
	}
	kids := s.Supervisors[0].Children
	if len(kids) != 3 || kids[0].ID != "w1" || kids[2].Sub == nil || len(kids[2].Sub.Children) != 2 {
		t.Fatalf("root children %+v", kids)
	}
	_, body = get(t, o, "/observer/api/snapshot?filter=conns")
	json.Unmarshal([]byte(body), &s)
	if len(s.Processes) != 1 || s.Processes[0].Name != "conns" {
		t.Fatalf("filter=conns gave %+v", s.Processes)
	}
}

func TestToken(t *testing.T) {
	n, _ := tree(t)
	o := observer.New(n, observer.Options{Token: "s3cret"})
	for _, path := range []string{"/observer/", "/observer/api/snapshot", "/observer/metrics"} {
		if code, _ := get(t, o, path); code != http.StatusUnauthorized {
			t.Errorf("%s without token: %d", path, code)
		}
		if code, _ := get(t, o, path+"?token=wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d", path, code)
		}
		if code, _ := get(t, o, path+"?token=s3cret"); code != 200 {
			t.Errorf("%s with ?token: %d", path, code)
		}
		if code, _ := get(t, o, path, "Authorization", "Bearer s3cret"); code != 200 {
			t.Errorf("%s with a bearer token: %d", path, code)
		}
	}
}

func post(h http.Handler, target string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestKill(t *testing.T) {
	n, _ := tree(t)
	info, _ := supervisor.Inspect(n, gotp.Name("conns"))
	victim := info.Children[0].PID

	ro := observer.New(n, observer.Options{})
	if rec := post(ro, "/observer/api/kill", url.Values{"pid": {victim.String()}}); rec.Code != http.StatusForbidden {
		t.Fatalf("kill on a read-only observer: %d", rec.Code)
	}
	if !n.IsAlive(victim) {
		t.Fatal("read-only observer killed a process")
	}

	o := observer.New(n, observer.Options{AllowKill: true})
	if code, _ := get(t, o, "/observer/api/kill?pid="+victim.String()); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET kill: %d", code)
	}
	if rec := post(o, "/observer/api/kill", url.Values{"pid": {"garbage"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad pid: %d", rec.Code)
	}
	if _, body := get(t, o, "/observer/"); !strings.Contains(body, `class="kill"`) {
		t.Fatal("no kill buttons with AllowKill")
	}
	if rec := post(o, "/observer/api/kill", url.Values{"pid": {victim.String()}}); rec.Code != 200 {
		t.Fatalf("kill: %d %s", rec.Code, rec.Body)
	}
	if n.IsAlive(victim) {
		t.Fatal("victim alive after kill")
	}
	if rec := post(o, "/observer/api/kill", url.Values{"pid": {victim.String()}}); rec.Code != http.StatusNotFound {
		t.Fatalf("kill of a dead process: %d", rec.Code)
	}
}

func TestMetrics(t *testing.T) {
	n, _ := tree(t)
	extra := observer.SourceFunc(func(_ context.Context, s *observer.Snapshot) {
		s.Registries = append(s.Registries, observer.Registry{Name: "online", Kind: "unique", Partitions: 2, Entries: 3, Keys: []int{1, 2}})
		s.Scopes = append(s.Scopes, observer.Scope{ID: "chat", Groups: []observer.Group{{Name: "room:lobby", Size: 4}}})
		s.Inboxes = append(s.Inboxes, observer.InboxTable{Name: "jobs", Ready: 7, Outcomes: map[string]int64{"ack": 9},
			Health: &observer.InboxHealth{ClaimErrors: 3, PermanentErrors: 1, Failing: 1}})
		s.Cluster = append(s.Cluster, observer.ClusterPeer{Node: "b", Up: true, MessagesIn: 5, MessagesOut: 6})
	})
	// Restart one child so the restart counter is not zero.
	info, _ := supervisor.Inspect(n, gotp.Name("root"))
	n.Exit(info.Children[0].PID, gotp.ErrKill)
	for {
		in, _ := supervisor.Inspect(n, gotp.Name("root"))
		if in.Children[0].Restarts == 1 && in.Children[0].State == supervisor.ChildRunning {
			break
		}
		time.Sleep(time.Millisecond) // the supervisor has no event to wait on
	}
	o := observer.New(n, observer.Options{Sources: []observer.Source{extra}})
	code, body := get(t, o, "/observer/metrics")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.NopCloser(strings.NewReader(body)))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	want := map[string]float64{
		"gotp_processes":                 float64(n.ProcessCount()),
		"gotp_registry_entries":          3,
		"gotp_pg_group_members":          4,
		"gotp_cluster_messages_total":    0, // checked below
		"gotp_inbox_jobs":                0,
		"gotp_inbox_outcomes_total":      9,
		"gotp_inbox_errors_total":        3,
		"gotp_inbox_failing_claimers":    1,
		"gotp_mailbox_length":            0,
		"gotp_supervisor_restarts_total": 0,
	}
	for name := range want {
		if fams[name] == nil {
			t.Errorf("missing metric family %s", name)
		}
	}
	for _, m := range fams["gotp_inbox_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == "claim" && m.GetCounter().GetValue() != 3 {
				t.Errorf("gotp_inbox_errors_total{kind=claim} = %v, want 3", m.GetCounter().GetValue())
			}
		}
	}
	if v := fams["gotp_processes"].GetMetric()[0].GetGauge().GetValue(); v != want["gotp_processes"] {
		t.Errorf("gotp_processes = %v, want %v", v, want["gotp_processes"])
	}
	h := fams["gotp_mailbox_length"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != uint64(n.ProcessCount()) {
		t.Errorf("mailbox histogram counts %d processes, want %d", h.GetSampleCount(), n.ProcessCount())
	}
	var w1 float64 = -1
	for _, m := range fams["gotp_supervisor_restarts_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "child" && l.GetValue() == "w1" {
				w1 = m.GetCounter().GetValue()
			}
		}
	}
	if w1 != 1 {
		t.Errorf("restarts of w1 = %v, want 1", w1)
	}
}

func TestSources(t *testing.T) {
	n, _ := tree(t)
	ctx := context.Background()
	reg, err := registry.Start[string, int](ctx, n, registry.Options{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	scope, err := pg.Start(ctx, n, "obs", pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	n.Spawn(func(p *gotp.Process) error {
		reg.Register(p, "k1", 1)
		reg.Register(p, "k2", 2)
		inst, err := scope.Open(p)
		if err != nil {
			return err
		}
		inst.Join("room")
		close(ready)
		<-p.Context().Done()
		return nil
	})
	<-ready
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := inbox.NewSQLite[string](db, inbox.Config[string]{Table: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := q.Publish(ctx, "job", nil); err != nil {
			t.Fatal(err)
		}
	}
	o := observer.New(n, observer.Options{Sources: []observer.Source{
		observer.RegistrySource("names", reg),
		observer.ScopeSource(n, "obs"),
		observer.InboxSource(q),
	}})
	_, body := get(t, o, "/observer/api/snapshot")
	var s observer.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Registries) != 1 || s.Registries[0].Entries != 2 || s.Registries[0].Partitions != 2 || s.Registries[0].Kind != "unique" {
		t.Fatalf("registries %+v", s.Registries)
	}
	if len(s.Scopes) != 1 || len(s.Scopes[0].Groups) != 1 || s.Scopes[0].Groups[0].Size != 1 || len(s.Scopes[0].Groups[0].Members["obs"]) != 1 {
		t.Fatalf("scopes %+v", s.Scopes)
	}
	if len(s.Inboxes) != 1 || s.Inboxes[0].Name != "jobs" || s.Inboxes[0].Ready != 3 ||
		s.Inboxes[0].Health == nil || s.Inboxes[0].Health.ClaimErrors != 0 {
		t.Fatalf("inboxes %+v", s.Inboxes)
	}
	_, page := get(t, o, "/observer/")
	for _, want := range []string{"names", "scope obs", "room", "jobs"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
