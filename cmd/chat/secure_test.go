package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestProgramRefusesUnsafeFlags: -observer-kill without a token is refused
// with status 2 and an ERROR that says why; -h names the loopback
// defaults and the environment variables of the secrets.
func TestProgramRefusesUnsafeFlags(t *testing.T) {
	p := launch(t, "-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-observer-kill")
	if code := p.exit(); code != 2 {
		t.Fatalf("-observer-kill without a token: exit status %d, want 2", code)
	}
	p.waitLog(`level=ERROR msg="chat: -observer-kill needs an observer token \(-observer-token or \$GOTP_OBSERVER_TOKEN\)`)

	h := launch(t, "-h")
	if code := h.exit(); code != 0 {
		t.Fatalf("-h: exit status %d", code)
	}
	help := strings.Join(h.log.all(), "\n")
	for _, want := range []string{
		`-tcp string`, `(default "127.0.0.1:4000")`, `(default "127.0.0.1:8080")`,
		"GOTP_OBSERVER_TOKEN", "GOTP_CLUSTER_TOKEN", "-cluster-alone", "needs -observer-token",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}
}

// TestProgramSecretsFromEnv: the observer token comes from
// GOTP_OBSERVER_TOKEN (so -observer-kill is allowed), is not on the command
// line, and guards the observer and /metrics; a flag wins over the
// variable.
func TestProgramSecretsFromEnv(t *testing.T) {
	p := launchEnv(t, []string{"GOTP_OBSERVER_TOKEN=from-env"},
		"-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-observer-kill")
	web := p.waitLog(`msg="chat: web page listening" http=http://(\S+)/ observer=`)
	p.http = web[1]
	if strings.Contains(strings.Join(p.cmd.Args, " "), "from-env") {
		t.Fatal("the token is on the command line")
	}
	hc := httpClient(t)
	for _, path := range []string{"/observer/", "/metrics"} {
		if code, _ := get(t, hc, "http://"+p.http+path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", path, code)
		}
		if code, _ := get(t, hc, "http://"+p.http+path+"?token=from-env"); code != http.StatusOK {
			t.Errorf("GET %s with the token from the environment = %d, want 200", path, code)
		}
	}

	q := launchEnv(t, []string{"GOTP_OBSERVER_TOKEN=from-env"},
		"-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-observer-token", "from-flag")
	q.http = q.waitLog(`msg="chat: web page listening" http=http://(\S+)/ observer=`)[1]
	if code, _ := get(t, hc, "http://"+q.http+"/observer/?token=from-flag"); code != http.StatusOK {
		t.Errorf("the flag's token = %d, want 200", code)
	}
	if code, _ := get(t, hc, "http://"+q.http+"/observer/?token=from-env"); code != http.StatusUnauthorized {
		t.Errorf("the variable's token with a flag given = %d, want 401", code)
	}
}

// TestProgramWrongClusterToken: a node whose peer refuses its token (wrong,
// or missing) logs an ERROR naming the peer and exits with status 1; the
// peer logs the refusal too and goes on. With -cluster-alone the node
// starts alone, still saying why at level ERROR. The token of the good
// nodes comes from GOTP_CLUSTER_TOKEN.
func TestProgramWrongClusterToken(t *testing.T) {
	a := launchEnv(t, []string{"GOTP_CLUSTER_TOKEN=s3cret"},
		"-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-node", "a", "-cluster-route", "127.0.0.1:0")
	route := a.waitLog(`msg="chat: cluster routes listening" node=a route=(\S+)`)[1]
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"wrong", []string{"-cluster-token", "guess"}},
		{"missing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-data", t.TempDir(), "-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0",
				"-node", "b", "-cluster-route", "127.0.0.1:0", "-cluster-peers", route}, tc.args...)
			b := launch(t, args...)
			if code := b.exit(); code != 1 {
				t.Fatalf("exit status %d, want 1", code)
			}
			b.waitLog(`level=ERROR msg="chat: the cluster refused this node's credentials; not starting \(-cluster-alone to start alone\)" peer=` +
				regexp.QuoteMeta(route) + ` err=`)
			b.waitLog(`level=ERROR msg="cluster: a peer refused this node's credentials" .*peer=` + regexp.QuoteMeta(route))
			for _, l := range b.log.all() {
				if strings.Contains(l, "listening") && !strings.Contains(l, "cluster routes") {
					t.Errorf("a refused node started serving: %s", l)
				}
			}
		})
	}
	a.waitLog(`level=ERROR msg="cluster: refused a server's credentials" .*peer=127\.0\.0\.1:`)

	alone := startProgram(t, "-data", t.TempDir(), "-node", "c", "-cluster-route", "127.0.0.1:0",
		"-cluster-peers", route, "-cluster-token", "guess", "-cluster-alone")
	alone.waitLog(`level=ERROR msg="chat: starting alone: a peer refused this node's credentials" peer=` + regexp.QuoteMeta(route))
	c := dialLine(t, alone.tcp)
	c.expect("CONNECT ua1", "OK") // its own chat: the real cluster never hears of it
}

// TestProgramMetricsBounded: after 1,000 users connect and leave, /metrics
// has every gotp family, and no more series than before they came: no
// label takes a value per user, process or group.
func TestProgramMetricsBounded(t *testing.T) {
	p := startProgram(t, "-data", t.TempDir())
	hc := httpClient(t)
	before := scrapeProgram(t, hc, p)
	const users = 1000
	conns := make([]*lineClient, users)
	for i := range conns {
		conns[i] = dialLine(t, p.tcp)
		if got := conns[i].do(fmt.Sprintf("CONNECT user%04d", i)); got != "OK" {
			t.Fatalf("CONNECT user%04d: %q", i, got)
		}
	}
	during := scrapeProgram(t, hc, p)
	if v := metricValue(during["gotp_processes"], "behaviour", "server *chat.conn"); v != users {
		t.Errorf("connection processes while %d users are online: %v", users, v)
	}
	if v := metricValue(during["gotp_pg_members"], "scope", "chat"); v != users {
		t.Errorf("pg memberships while %d users are online: %v", users, v)
	}
	// Flood control, on by default: the users' CONNECTs were not held
	// back; a client that pipelines WHO of 1,000 users (9 KB, 71 units
	// each, against a burst of 400) is, and every WHO is answered. A
	// reply is charged to the commands read after it was queued, and the
	// reader runs at most MaxPending commands ahead of the replies: by the
	// 24th WHO at least 15 replies are charged (1,089 units with the
	// commands), which holds the reader back whatever the timing (10, as
	// before, could all be read before 6 replies were queued).
	throttled := func(fams map[string]*dto.MetricFamily) float64 {
		ms := fams["chat_throttled_commands_total"].GetMetric()
		if len(ms) != 1 {
			t.Fatalf("/metrics has %d chat_throttled_commands_total", len(ms))
		}
		return ms[0].GetCounter().GetValue()
	}
	if v := throttled(during); v != 0 {
		t.Errorf("%d users connecting: %v commands throttled, want 0", users, v)
	}
	flood := dialLine(t, p.tcp)
	if got := flood.do("CONNECT flood"); got != "OK" {
		t.Fatalf("CONNECT flood: %q", got)
	}
	const whos = 24
	if _, err := flood.c.Write([]byte(strings.Repeat("WHO\n", whos))); err != nil {
		t.Fatal(err)
	}
	for i := range whos {
		if got := flood.line(); !strings.HasPrefix(got, fmt.Sprintf("ONLINE %d ", users+1)) {
			t.Fatalf("WHO %d: %.40q", i, got)
		}
	}
	if v := throttled(scrapeProgram(t, hc, p)); v == 0 {
		t.Errorf("a client pipelining %d WHO of %d users was not throttled", whos, users+1)
	}
	flood.c.Close()
	for _, c := range conns {
		if got := c.do("QUIT"); got != "BYE" {
			t.Errorf("QUIT: %q", got)
		}
	}
	waitFor(t, "every user to be gone", func() bool {
		return metricValue(scrapeProgram(t, hc, p)["gotp_registry_entries"], "registry", "chat.users") == 0
	})
	after := scrapeProgram(t, hc, p)

	for _, name := range []string{
		"gotp_processes", "gotp_mailbox_length", "gotp_mailbox_dropped_total", "gotp_mailbox_overflow_kills_total", "gotp_process_crashes_total",
		"gotp_supervisor_restarts_total", "gotp_supervisor_start_failures_total", "gotp_supervisor_children",
		"gotp_registry_entries", "gotp_registry_keys", "gotp_pg_groups", "gotp_pg_members",
		"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
	} {
		if after[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	series := func(fams map[string]*dto.MetricFamily) int {
		k := 0
		for name, f := range fams {
			if strings.HasPrefix(name, "gotp_") {
				k += len(f.GetMetric())
			}
		}
		return k
	}
	// The behaviour label may gain a value or two while users are online
	// (a kind of process not running before); per-user labels would add a
	// thousand.
	if b, d, a := series(before), series(during), series(after); d > b+5 || a > b+5 {
		t.Errorf("gotp series: %d before, %d with %d users online, %d after they left", b, d, users, a)
	}
	userish := regexp.MustCompile(`user\d{4}|^<.*>$`)
	for name, f := range during {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if userish.MatchString(l.GetValue()) {
					t.Errorf("%s has a label %s=%q: one series per user or process", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func scrapeProgram(t *testing.T, hc *http.Client, p *program) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := hc.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.Reader(resp.Body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue returns the gauge or counter of fam with the label name=value
// (-1 if there is none).
func metricValue(fam *dto.MetricFamily, name, value string) float64 {
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				if m.Gauge != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
