package observer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"html"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
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

// postJSON posts body as JSON, with the headers hdr (pairs).
func postJSON(h http.Handler, target, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestKill(t *testing.T) {
	n, _ := tree(t)
	info, _ := supervisor.Inspect(n, gotp.Name("conns"))
	victim := info.Children[0].PID
	kill := `{"pid":"` + victim.String() + `"}`
	const path = "/observer/api/kill?token=s3cret"

	ro := observer.New(n, observer.Options{Token: "s3cret"})
	if rec := postJSON(ro, path, kill); rec.Code != http.StatusForbidden {
		t.Fatalf("kill on a read-only observer: %d", rec.Code)
	}
	// AllowKill without a token: still off, and no buttons.
	open := observer.New(n, observer.Options{AllowKill: true})
	if rec := postJSON(open, "/observer/api/kill", kill); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "token") {
		t.Fatalf("kill without a token: %d %s", rec.Code, rec.Body)
	}
	if _, body := get(t, open, "/observer/"); strings.Contains(body, `class="kill"`) {
		t.Fatal("kill buttons shown without a token")
	}
	if !n.IsAlive(victim) {
		t.Fatal("an observer that may not kill killed a process")
	}

	o := observer.New(n, observer.Options{AllowKill: true, Token: "s3cret"})
	if code, _ := get(t, o, path+"&pid="+victim.String()); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET kill: %d", code)
	}
	// A form is what a cross-site page can make a browser send: refused.
	if rec := post(o, path, url.Values{"pid": {victim.String()}}); rec.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("kill as a form: %d", rec.Code)
	}
	if rec := postJSON(o, path, kill, "Origin", "https://evil.example"); rec.Code != http.StatusForbidden {
		t.Fatalf("kill from another origin: %d", rec.Code)
	}
	if rec := postJSON(o, path, kill, "Sec-Fetch-Site", "cross-site"); rec.Code != http.StatusForbidden {
		t.Fatalf("kill from another site: %d", rec.Code)
	}
	if rec := postJSON(o, "/observer/api/kill", kill); rec.Code != http.StatusUnauthorized {
		t.Fatalf("kill without the token: %d", rec.Code)
	}
	if rec := postJSON(o, path, `{"pid":"garbage"}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad pid: %d", rec.Code)
	}
	if rec := postJSON(o, path, `not json`); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad body: %d", rec.Code)
	}
	if !n.IsAlive(victim) {
		t.Fatal("a refused request killed the victim")
	}
	if _, body := get(t, o, "/observer/?token=s3cret"); !strings.Contains(body, `class="kill"`) {
		t.Fatal("no kill buttons with AllowKill and a token")
	}
	// From the observer's own page: same origin.
	if rec := postJSON(o, path, kill, "Origin", "http://example.com", "Sec-Fetch-Site", "same-origin"); rec.Code != 200 {
		t.Fatalf("kill: %d %s", rec.Code, rec.Body)
	}
	if n.IsAlive(victim) {
		t.Fatal("victim alive after kill")
	}
	if rec := postJSON(o, path, kill); rec.Code != http.StatusNotFound {
		t.Fatalf("kill of a dead process: %d", rec.Code)
	}
}

// scrape parses the metrics o serves.
func scrape(t *testing.T, h http.Handler, target string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, h, target)
	if code != 200 {
		t.Fatalf("GET %s: %d", target, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.NopCloser(strings.NewReader(body)))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the metric of fam whose labels include
// labels (pairs), and whether there is one.
func value(fam *dto.MetricFamily, labels ...string) (float64, bool) {
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// families are every family the observer documents.
var families = []string{
	"gotp_processes", "gotp_mailbox_length", "gotp_mailbox_dropped_total", "gotp_mailbox_overflow_kills_total", "gotp_process_crashes_total",
	"gotp_supervisor_restarts_total", "gotp_supervisor_start_failures_total", "gotp_supervisor_children",
	"gotp_registry_entries", "gotp_registry_keys", "gotp_pg_groups", "gotp_pg_members",
	"gotp_inbox_jobs", "gotp_inbox_outcomes_total", "gotp_inbox_errors_total", "gotp_inbox_failing_claimers",
	"gotp_inbox_limit_held", "gotp_inbox_limit_waiting", "gotp_inbox_prepared_statements",
	"gotp_cluster_peers", "gotp_cluster_messages_total", "gotp_cluster_bytes_total",
	"gotp_cluster_dropped_total", "gotp_cluster_codec_errors_total", "gotp_cluster_auth_failures",
}

func TestMetrics(t *testing.T) {
	n, _ := tree(t)
	extra := observer.SourceFunc(func(_ context.Context, s *observer.Snapshot) {
		s.Registries = append(s.Registries, observer.Registry{Name: "online", Kind: "unique", Partitions: 2, Entries: 3, Keys: []int{1, 2}})
		s.Scopes = append(s.Scopes, observer.Scope{ID: "chat", GroupCount: 2, Memberships: 5, Groups: []observer.Group{{Name: "room:lobby", Size: 4}, {Name: "user:ana", Size: 1}}})
		s.Inboxes = append(s.Inboxes, observer.InboxTable{Name: "jobs", Ready: 7, Outcomes: map[string]int64{"ack": 9},
			Health: &observer.InboxHealth{ClaimErrors: 3, PermanentErrors: 1, Failing: 1, LimitHeld: 4, LimitWaiting: 2, Prepared: 5}})
		s.Cluster = append(s.Cluster, observer.ClusterPeer{Node: "obs", Up: true, Self: true, MessagesIn: 50, MessagesOut: 60},
			observer.ClusterPeer{Node: "b", Up: true, MessagesIn: 5, MessagesOut: 6})
		s.ClusterTotals = &observer.ClusterTotals{BytesIn: 100, BytesOut: 200, Dropped: 1, DecodeErrors: 2, AuthFailures: 1}
	})
	// Restart one child so the restart counter is not zero, and crash a
	// process for the crash counter.
	info, _ := supervisor.Inspect(n, gotp.Name("root"))
	n.Exit(info.Children[0].PID, gotp.ErrKill)
	for {
		in, _ := supervisor.Inspect(n, gotp.Name("root"))
		if in.Children[0].Restarts == 1 && in.Children[0].State == supervisor.ChildRunning {
			break
		}
		time.Sleep(time.Millisecond) // the supervisor has no event to wait on
	}
	crashed, _ := n.Spawn(func(*gotp.Process) error { return errors.New("crash") })
	gotptest.Recv(t, gotptest.Watch(t, n, crashed))
	o := observer.New(n, observer.Options{Sources: []observer.Source{extra}})
	fams := scrape(t, o, "/observer/metrics")
	for _, name := range families {
		if fams[name] == nil {
			t.Errorf("missing metric family %s", name)
		} else if fams[name].GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
	for name := range fams {
		if !slices.Contains(families, name) {
			t.Errorf("family %s is not in the documented list", name)
		}
	}
	total := 0.0
	for _, m := range fams["gotp_processes"].GetMetric() {
		total += m.GetGauge().GetValue()
	}
	if total != float64(n.ProcessCount()) {
		t.Errorf("gotp_processes sum to %v, want %v", total, n.ProcessCount())
	}
	if v, _ := value(fams["gotp_processes"], "behaviour", "server observer_test.idle"); v != 4 {
		t.Errorf("idle servers %v, want 4", v)
	}
	h := fams["gotp_mailbox_length"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != uint64(n.ProcessCount()) {
		t.Errorf("mailbox histogram counts %d processes, want %d", h.GetSampleCount(), n.ProcessCount())
	}
	for _, c := range []struct {
		fam    string
		labels []string
		want   float64
	}{
		{"gotp_process_crashes_total", nil, 1},
		{"gotp_supervisor_restarts_total", []string{"supervisor", "root"}, 1},
		{"gotp_supervisor_restarts_total", []string{"supervisor", "conns"}, 0},
		{"gotp_supervisor_children", []string{"supervisor", "root", "state", "running"}, 3},
		{"gotp_supervisor_children", []string{"supervisor", "conns", "state", "running"}, 2},
		{"gotp_registry_entries", []string{"registry", "online"}, 3},
		{"gotp_registry_keys", []string{"registry", "online"}, 3},
		{"gotp_pg_groups", []string{"scope", "chat"}, 2},
		{"gotp_pg_members", []string{"scope", "chat"}, 5},
		{"gotp_inbox_jobs", []string{"table", "jobs", "state", "ready"}, 7},
		{"gotp_inbox_outcomes_total", []string{"table", "jobs", "outcome", "ack"}, 9},
		{"gotp_inbox_errors_total", []string{"table", "jobs", "kind", "claim"}, 3},
		{"gotp_inbox_failing_claimers", []string{"table", "jobs"}, 1},
		{"gotp_inbox_limit_held", []string{"table", "jobs"}, 4},
		{"gotp_inbox_limit_waiting", []string{"table", "jobs"}, 2},
		{"gotp_inbox_prepared_statements", []string{"table", "jobs"}, 5},
		{"gotp_cluster_peers", nil, 1},
		{"gotp_cluster_messages_total", []string{"peer", "b", "direction", "out"}, 6},
		{"gotp_cluster_bytes_total", []string{"direction", "out"}, 200},
		{"gotp_cluster_dropped_total", nil, 1},
		{"gotp_cluster_codec_errors_total", []string{"direction", "decode"}, 2},
		{"gotp_cluster_auth_failures", nil, 1},
	} {
		if v, ok := value(fams[c.fam], c.labels...); !ok || v != c.want {
			t.Errorf("%s%v = %v (%v), want %v", c.fam, c.labels, v, ok, c.want)
		}
	}
	if _, ok := value(fams["gotp_cluster_messages_total"], "peer", "obs"); ok {
		t.Error("this node's totals are exported as a peer")
	}
}

// TestCollectorOnOwnRegistry: a program registers the collector on its
// own registry beside the Go collectors, and a second registration fails
// as Prometheus says (AlreadyRegisteredError).
func TestCollectorOnOwnRegistry(t *testing.T) {
	n, _ := tree(t)
	o := observer.New(n, observer.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	if err := o.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(o.Collector()); !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Fatalf("second registration: %v", err)
	}
	fams := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), "/metrics")
	if fams["gotp_processes"] == nil || fams["go_goroutines"] == nil {
		t.Fatalf("families %v", slices.Collect(maps.Keys(fams)))
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

func (idle) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if l, ok := req.(labelMe); ok {
		p.SetLabel(string(l))
	}
	return nil, nil
}
