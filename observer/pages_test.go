package observer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/observer"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// account is a server whose state the process page shows.
type account struct {
	server.Defaults
	Owner   string
	Balance int
}

func (a *account) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	if s, ok := req.(string); ok {
		p.SetLabel(s)
	}
	return a.Balance, nil
}

func TestProcessPage(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	ctx := gotptest.Context(t)
	pid, err := server.Start(ctx, n, &account{Owner: "ana", Balance: 42}, server.Named("acct"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Call[int](ctx, n, pid, "user ana"); err != nil {
		t.Fatal(err)
	}
	linked, err := n.Spawn(func(p *gotp.Process) error {
		p.Link(pid)
		<-p.Context().Done()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gotptest.Eventually(t, "the link", func() bool { in, _ := n.ProcessInfo(pid); return len(in.Links) == 1 })
	o := observer.New(n, observer.Options{})
	waitIdle(t, n, pid)
	code, body := get(t, o, "/observer/process?pid="+pid.String())
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{
		"acct", "user ana", "server *observer_test.account",
		html.EscapeString(`&observer_test.account{Defaults: server.Defaults{}, Owner: "ana", Balance: 42}`),
		`href="process?pid=` + url.QueryEscape(linked.String()) + `"`,
		`id="handled">1<`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("process page lacks %q", want)
		}
	}
	// The JSON form says the same.
	waitIdle(t, n, pid)
	code, body = get(t, o, "/observer/api/process?pid="+pid.String())
	var d observer.ProcessDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 200 {
		t.Fatalf("api/process: %d %v", code, err)
	}
	if !d.Alive || d.Label != "user ana" || d.Name != "acct" || !strings.Contains(d.State, "Balance: 42") || len(d.Links) != 1 || d.Links[0] != linked.String() {
		t.Fatalf("detail %+v", d)
	}
	if code, _ := get(t, o, "/observer/api/process?pid=<obs.1.999999>"); code != http.StatusNotFound {
		t.Errorf("a process that does not exist: %d", code)
	}
	if code, _ := get(t, o, "/observer/process?pid=junk"); code != http.StatusBadRequest {
		t.Errorf("a bad pid: %d", code)
	}
}

// waitIdle waits until the server pid waits for a message with none queued.
// The process page asks only an idle server for its state, and a server is
// briefly still running after it has replied to the page's last question.
func waitIdle(t *testing.T, n *gotp.Node, pid gotp.PID) {
	t.Helper()
	gotptest.Eventually(t, "the server to be idle", func() bool {
		in, _ := n.ProcessInfo(pid)
		return in.Status == gotp.StatusWaiting && in.MailboxLen == 0
	})
}

// TestProcessPageMailboxAndStack: a process's queued messages are shown;
// a resident process (a supervisor) shows its stack and its children.
func TestProcessPageMailboxAndStack(t *testing.T) {
	// (A busy server's state is not asked: see TestProcessPageBusyServer.)
	n, root := tree(t)
	release := make(chan struct{})
	defer close(release)
	stuck, _ := n.Spawn(func(*gotp.Process) error { <-release; return nil })
	n.Send(stuck, "first")
	n.Send(stuck, struct{ N int }{2})
	o := observer.New(n, observer.Options{})
	_, body := get(t, o, "/observer/api/process?pid="+stuck.String())
	var d observer.ProcessDetail
	json.Unmarshal([]byte(body), &d)
	if d.MailboxLen != 2 || len(d.MailboxHead) != 2 || d.MailboxHead[0] != `"first"` || d.MailboxHead[1] != "struct { N int }{N: 2}" {
		t.Fatalf("mailbox %d, head %q", d.MailboxLen, d.MailboxHead)
	}
	_, body = get(t, o, "/observer/api/process?pid="+root.String())
	d = observer.ProcessDetail{}
	json.Unmarshal([]byte(body), &d)
	if d.Stack != "" {
		t.Errorf("a stack not asked for: %q", d.Stack)
	}
	if _, page := get(t, o, "/observer/process?pid="+root.String()); !strings.Contains(page, `id="show-stack"`) || strings.Contains(page, " data-static>") {
		t.Error("the page of a resident process does not offer its stack, or does not refresh")
	}
	if _, page := get(t, o, "/observer/process?pid="+root.String()+"&stack=1"); !strings.Contains(page, `id="stack"`) || !strings.Contains(page, " data-static>") {
		t.Error("the stack page does not show the stack, or refreshes")
	}
	waitIdle(t, n, root)
	_, body = get(t, o, "/observer/api/process?stack=1&pid="+root.String())
	d = observer.ProcessDetail{}
	json.Unmarshal([]byte(body), &d)
	if !d.Resident || !strings.Contains(d.Stack, "runResident") || d.Supervisor == nil || len(d.Supervisor.Children) != 3 {
		t.Fatalf("supervisor detail: resident %v, stack %q, tree %+v", d.Resident, d.Stack, d.Supervisor)
	}
	if !strings.Contains(d.State, "supervisor.State{Strategy: one_for_one") {
		t.Errorf("supervisor state %q", d.State)
	}
}

// TestDynamicChildLabels: a dynamic child that labels itself is shown by
// its label in the tree.
func TestDynamicChildLabels(t *testing.T) {
	n, _ := tree(t)
	info, _ := supervisor.Inspect(n, gotp.Name("conns"))
	for i, c := range info.Children {
		if _, err := server.Call[any](gotptest.Context(t), n, c.PID, labelMe(fmt.Sprint("user u", i))); err != nil {
			t.Fatal(err)
		}
	}
	o := observer.New(n, observer.Options{})
	_, body := get(t, o, "/observer/")
	for i := range info.Children {
		if !strings.Contains(body, fmt.Sprintf(`<b class="label">user u%d</b>`, i)) {
			t.Errorf("tree lacks the label of child %d", i)
		}
	}
}

type labelMe string

func TestRegistryPage(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	reg, err := registry.Start[string, int](gotptest.Context(t), n, registry.Options{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	n.Spawn(func(p *gotp.Process) error {
		for i := range 25 {
			reg.Register(p, fmt.Sprintf("user:%02d", i), i)
		}
		close(ready)
		<-p.Context().Done()
		return nil
	})
	<-ready
	o := observer.New(n, observer.Options{MaxRows: 10, Sources: []observer.Source{observer.RegistrySource("users", reg)}})
	keys := regexp.MustCompile(`<td><code>&#34;(user:\d\d)&#34;</code></td>`)
	page := func(q string) (int, []string, string) {
		code, body := get(t, o, "/observer/registry?name=users"+q)
		var out []string
		for _, m := range keys.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return code, out, body
	}
	code, first, body := page("")
	if code != 200 || len(first) != 10 || first[0] != "user:00" || first[9] != "user:09" || !strings.Contains(body, "1–10 of 25") || !strings.Contains(body, `id="next"`) {
		t.Fatalf("first page %d %v", code, first)
	}
	_, last, body := page("&offset=20")
	if len(last) != 5 || last[0] != "user:20" || strings.Contains(body, `id="next"`) || !strings.Contains(body, `id="prev"`) {
		t.Fatalf("last page %v", last)
	}
	_, filtered, body := page("&filter=user:1")
	if len(filtered) != 10 || filtered[0] != "user:10" || !strings.Contains(body, "of 10") {
		t.Fatalf("filtered %v", filtered)
	}
	if code, _, _ := page("x"); code != http.StatusNotFound {
		t.Errorf("unknown registry: %d", code)
	}
	if _, body := get(t, o, "/observer/"); !strings.Contains(body, `href="registry?name=users"`) {
		t.Error("the main page does not link to the registry's keys")
	}
}

// TestSystemHistory: the sampler fills the history every SampleEvery, and
// the chart on the page shows it.
func TestSystemHistory(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	o := observer.New(n, observer.Options{SampleEvery: 20 * time.Millisecond, History: 5})
	defer o.Close()
	samples := regexp.MustCompile(`data-samples="(\d+)"`)
	count := func() int {
		_, body := get(t, o, "/observer/?partial=1")
		m := samples.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no chart in %s", body)
		}
		k, _ := strconv.Atoi(m[1])
		return k
	}
	gotptest.Eventually(t, "five samples", func() bool { return count() == 5 })
	var s observer.Snapshot
	_, body := get(t, o, "/observer/api/snapshot")
	json.Unmarshal([]byte(body), &s)
	h := s.System.History
	if len(h) != 5 || !h[0].Time.Before(h[4].Time) || h[4].Processes < 1 || h[4].HeapBytes == 0 || s.System.Goroutines == 0 {
		t.Fatalf("history %+v, system %+v", h, s.System)
	}
	// Full: the oldest go first, the count stays.
	first := h[0].Time
	gotptest.Eventually(t, "a newer oldest sample", func() bool {
		_, body := get(t, o, "/observer/api/snapshot")
		var s observer.Snapshot
		json.Unmarshal([]byte(body), &s)
		return len(s.System.History) == 5 && s.System.History[0].Time.After(first)
	})
}

// blocking is a server whose calls wait until release is closed.
type blocking struct {
	server.Defaults
	release chan struct{}
}

func (b *blocking) HandleCall(*gotp.Process, server.From, any) (any, error) {
	<-b.release
	return nil, nil
}

// TestProcessPageBusyServer: the state of a busy server is not asked for
// (the question would queue behind its work and count against a mailbox
// limit): its mailbox does not grow however often the page is loaded.
func TestProcessPageBusyServer(t *testing.T) {
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	b := &blocking{release: make(chan struct{})}
	pid, err := server.Start(gotptest.Context(t), n, b)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{})
	go func() {
		defer close(called)
		server.Call[any](context.Background(), n, pid, "wait")
	}()
	gotptest.Eventually(t, "the server to be busy", func() bool {
		in, _ := n.ProcessInfo(pid)
		return in.Status == gotp.StatusRunning
	})
	o := observer.New(n, observer.Options{})
	for range 5 {
		_, body := get(t, o, "/observer/api/process?pid="+pid.String())
		var d observer.ProcessDetail
		json.Unmarshal([]byte(body), &d)
		if d.State != "" || !strings.Contains(d.StateErr, "busy") {
			t.Fatalf("busy server: state %q, error %q", d.State, d.StateErr)
		}
	}
	if in, _ := n.ProcessInfo(pid); in.MailboxLen != 0 {
		t.Errorf("the page sent the busy server %d messages", in.MailboxLen)
	}
	close(b.release)
	gotptest.Recv(t, called)
}
