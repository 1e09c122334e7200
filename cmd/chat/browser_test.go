package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The browser tests drive headless Chromium (Debian's chromium package,
// which .ci/run installs) against the program run as a child process. They
// are skipped when no Chromium is found; GOTP_CHROMIUM names another
// binary.

// chromium returns the path of the browser, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GOTP_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium installed (apt-get install chromium, or set GOTP_CHROMIUM)")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns the
// context of its first tab; the browser is closed, and waited for, at the
// end of the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel() // waits for the browser to exit
		cancel()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// newTab opens another tab in the browser of ctx.
func newTab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	tctx, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return tctx
}

// runActions runs actions, failing the test with what if one fails.
func runActions(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))
}

// logHas is a JS expression: the chat page's log has a line whose text
// (after its time) is line.
func logHas(line string) string {
	return fmt.Sprintf(`Array.from(document.querySelectorAll('#log div')).some(d => (d.querySelector('.text') || d).textContent === %s)`, strconv.Quote(line))
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression into a T.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// TestBrowserChat: two users in two tabs of the chat page; one sends, the
// other sees it arrive; a room message reaches both; history shows both.
func TestBrowserChat(t *testing.T) {
	chromium(t)
	p := startProgram(t, "-data", t.TempDir())
	page := "http://" + p.http + "/"
	ana := browser(t)
	bob := newTab(t, ana)

	connect := func(ctx context.Context, name string) {
		t.Helper()
		runActions(t, ctx, "connect "+name,
			chromedp.Navigate(page),
			chromedp.WaitVisible(chromedp.CSS(`#name`)),
			chromedp.SendKeys(chromedp.CSS(`#name`), name),
			chromedp.Click(chromedp.CSS(`#connect button`)),
			waitJS(logHas("connected as "+name)),
		)
	}
	connect(ana, "ana")
	connect(bob, "bob")
	// bob's page asked WHO when it connected: ana is listed.
	runActions(t, bob, "bob sees ana online",
		waitJS(`Array.from(document.querySelectorAll('#online li')).map(li => li.textContent).join(',') === 'ana,bob'`))

	runActions(t, ana, "ana sends",
		chromedp.SendKeys(chromedp.CSS(`#to`), "bob"),
		chromedp.SendKeys(chromedp.CSS(`#text`), "hello from a browser 👋"),
		chromedp.Click(chromedp.CSS(`#send button`)),
		waitJS(logHas("→ bob: hello from a browser 👋")),
	)
	runActions(t, bob, "bob receives", waitJS(logHas("ana: hello from a browser 👋")))

	// Rooms: both join, bob says, both see it.
	for _, ctx := range []context.Context{ana, bob} {
		runActions(t, ctx, "join",
			chromedp.SendKeys(chromedp.CSS(`#room`), "lobby"),
			chromedp.Click(chromedp.CSS(`#join button`)),
			waitJS(`document.querySelector('#rooms').textContent.includes('#lobby')`),
		)
	}
	runActions(t, bob, "bob says",
		chromedp.SetValue(chromedp.CSS(`#to`), "#lobby"),
		chromedp.SendKeys(chromedp.CSS(`#text`), "hi room"),
		chromedp.Click(chromedp.CSS(`#send button`)),
		waitJS(logHas("#lobby bob: hi room")),
	)
	runActions(t, ana, "ana sees the room message", waitJS(logHas("#lobby bob: hi room")))

	// History from bob's side.
	runActions(t, bob, "history",
		chromedp.SendKeys(chromedp.CSS(`#with`), "ana"),
		chromedp.Click(chromedp.CSS(`#history button`)),
		waitJS(logHas("history with ana (1)")),
		waitJS(logHas("  ana: hello from a browser 👋")),
		// An empty history is shown as such (the reply carries "messages":[]).
		chromedp.SetValue(chromedp.CSS(`#with`), "nobody"),
		chromedp.Click(chromedp.CSS(`#history button`)),
		waitJS(logHas("history with nobody (0)")),
	)
	// No errors were shown on either page.
	for name, ctx := range map[string]context.Context{"ana": ana, "bob": bob} {
		errs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#log .err')).map(d => d.textContent)`)
		if len(errs) != 0 {
			t.Errorf("%s's page shows errors: %q", name, errs)
		}
	}
}

// TestBrowserObserver: the observer page of a running cmd/chat shows the
// root supervisor and its three children; a TCP user's connection process
// appears, labelled with its user.
//
// With -observer-token and -observer-kill, from a page opened with
// ?token=, whose refreshes and kill requests carry the token, the
// connection's kill button ends it, and it disappears from the page;
// without the token the observer answers 401. Without a token the page is
// read-only: it has no kill buttons (and -observer-kill is refused, see
// TestProgramRefusesUnsafeFlags).
func TestBrowserObserver(t *testing.T) {
	chromium(t)
	t.Run("open", func(t *testing.T) { browserObserver(t, "") })
	t.Run("token", func(t *testing.T) { browserObserver(t, "s3cret") })
}

func browserObserver(t *testing.T, token string) {
	args := []string{"-data", t.TempDir()}
	page := "/observer/"
	if token != "" {
		args = append(args, "-observer-token", token, "-observer-kill")
		page += "?token=" + token
	}
	p := startProgram(t, args...)
	p.token = token
	if token != "" {
		if code, _ := get(t, httpClient(t), "http://"+p.http+"/observer/"); code != http.StatusUnauthorized {
			t.Fatalf("GET /observer/ without the token = %d, want 401", code)
		}
	}
	ctx := browser(t)
	runActions(t, ctx, "open the observer",
		chromedp.Navigate("http://"+p.http+page),
		chromedp.WaitVisible(chromedp.CSS(`#trees`)),
	)
	// The tree: chat.root with online, history and connections, each with a PID.
	tree := eval[[]map[string]string](t, ctx, `
		Array.from(document.querySelectorAll('#trees > li.sup')).map(li => ({
			root: li.querySelector(':scope > b').textContent,
			children: Array.from(li.querySelectorAll(':scope > ul > li.child')).map(c => c.dataset.id + '=' + c.dataset.pid).join(' '),
		}))`)
	var root map[string]string
	for _, r := range tree {
		if strings.HasPrefix(r["root"], "chat.root ") {
			root = r
		}
	}
	if root == nil {
		t.Fatalf("no chat.root tree on the page: %v", tree)
	}
	kids := strings.Fields(root["children"])
	if len(kids) != 3 {
		t.Fatalf("chat.root children %q, want online, history, connections", kids)
	}
	for i, id := range []string{"online", "history", "connections"} {
		k, pid, _ := strings.Cut(kids[i], "=")
		if k != id || !strings.HasPrefix(pid, "<") {
			t.Fatalf("chat.root child %d = %q, want %s with a PID", i, kids[i], id)
		}
	}
	// The process table lists them by name.
	table := text(t, ctx, `#processes`)
	for _, name := range []string{"chat.root", "chat.online", "chat.history", "chat.connections"} {
		if !strings.Contains(table, name) {
			t.Errorf("process table lacks %s", name)
		}
	}

	// A TCP user connects: its connection process shows up under
	// chat.connections once the page refreshes itself.
	carol := dialLine(t, p.tcp)
	carol.expect("CONNECT carol", "OK")
	// The supervisor records its child once the child's start has
	// returned, which can be just after the child has answered carol.
	var conn string
	deadline := time.Now().Add(10 * time.Second)
	for conn == "" {
		s, err := p.snapshot(httpClient(t))
		if err != nil {
			t.Fatal(err)
		}
		sup := find(s.Supervisors, "chat.connections")
		if sup != nil && len(sup.Children) == 1 {
			conn = sup.Children[0].PID
		} else if time.Now().After(deadline) {
			t.Fatalf("no connection process under chat.connections: %+v (connections: %+v)", s.Supervisors, sup)
		} else {
			time.Sleep(5 * time.Millisecond) // nothing outside the program signals the record
		}
	}
	row := fmt.Sprintf(`#processes tr[data-pid=%s]`, strconv.Quote(conn))
	button := fmt.Sprintf(`button.kill[data-pid=%s]`, strconv.Quote(conn))
	label := fmt.Sprintf(`#trees li.child[data-pid=%s] b.label`, strconv.Quote(conn))
	runActions(t, ctx, "the connection appears, labelled with its user",
		waitJS(fmt.Sprintf(`document.querySelector(%s) !== null`, strconv.Quote(row))),
		waitJS(fmt.Sprintf(`(document.querySelector(%s) || {}).textContent === 'user carol'`, strconv.Quote(label))),
	)
	if token == "" {
		if n := eval[int](t, ctx, `document.querySelectorAll('button.kill').length`); n != 0 {
			t.Fatalf("a read-only observer shows %d kill buttons", n)
		}
		return
	}
	runActions(t, ctx, "kill the connection",
		waitJS(fmt.Sprintf(`document.querySelector(%s) !== null`, strconv.Quote(row))),
		waitJS(fmt.Sprintf(`document.querySelector(%s) !== null`, strconv.Quote(button))),
		chromedp.Click(chromedp.CSS(button)),
	)
	runActions(t, ctx, "the connection disappears",
		waitJS(fmt.Sprintf(`document.querySelector(%s) === null && document.querySelector('#trees li.child[data-pid=%s]') === null`, strconv.Quote(row), strconv.Quote(conn))),
	)
	// Killed for real: carol's client sees its connection closed, and the
	// rest of the tree is still there.
	carol.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := carol.rd.ReadString('\n'); err == nil {
		t.Fatalf("carol read %q after her connection was killed", l)
	}
	table = text(t, ctx, `#processes`)
	for _, name := range []string{"chat.root", "chat.online", "chat.history", "chat.connections"} {
		if !strings.Contains(table, name) {
			t.Errorf("after the kill, the process table lacks %s", name)
		}
	}
	p.waitLog(`msg="observer: killing a process on request" pid=` + regexp.QuoteMeta(conn))
}

// TestBrowserChatReconnect: a page whose connection was closed by the
// server, where the user then tried to send, connects again and works.
// (The page keeps one callback per command awaiting its reply; a command
// sent on the closed socket never gets one, and must not swallow the
// reply to the next connection's CONNECT.)
func TestBrowserChatReconnect(t *testing.T) {
	chromium(t)
	p := startProgram(t, "-data", t.TempDir(), "-observer-kill", "-observer-token", "s3cret")
	p.token = "s3cret"
	hc := httpClient(t)
	ana := browser(t)
	runActions(t, ana, "connect ana",
		chromedp.Navigate("http://"+p.http+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#name`)),
		chromedp.SendKeys(chromedp.CSS(`#name`), "ana"),
		chromedp.Click(chromedp.CSS(`#connect button`)),
		waitJS(logHas("connected as ana")),
	)
	// The server ends ana's connection (as a crash or a restart would).
	s, err := p.snapshot(hc)
	if err != nil {
		t.Fatal(err)
	}
	sup := find(s.Supervisors, "chat.connections")
	if sup == nil || len(sup.Children) != 1 {
		t.Fatalf("want one connection, have %+v", sup)
	}
	if code, body := p.kill(hc, sup.Children[0].PID); code != http.StatusOK {
		t.Fatalf("kill: %d %s", code, body)
	}
	runActions(t, ana, "the page sees the disconnection", waitJS(logHas("disconnected")))
	// The user tries to send anyway, then connects again.
	runActions(t, ana, "send while disconnected, then reconnect",
		chromedp.SendKeys(chromedp.CSS(`#to`), "bob"),
		chromedp.SendKeys(chromedp.CSS(`#text`), "anyone there?"),
		chromedp.Click(chromedp.CSS(`#send button`)),
		chromedp.Click(chromedp.CSS(`#connect button`)),
	)
	ok := chromedp.Do(ana, chromedp.Poll[chromedp.Void](`Array.from(document.querySelectorAll('#log div .text')).filter(d => d.textContent === 'connected as ana').length === 2`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
	if ok != nil {
		var log []string
		log, _ = chromedp.Run(ana, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log div')).map(d => d.className + ': ' + d.textContent)`))
		t.Fatalf("the page did not connect again (%v); its log: %q", ok, log)
	}
	// And it works: WHO lists ana, from the server's side too.
	c := dialLine(t, p.tcp)
	c.expect("CONNECT bob", "OK")
	c.expect("WHO", "ONLINE 2 ana bob")
	c.expect("SEND ana are you back?", "SENT ana")
	runActions(t, ana, "ana receives", waitJS(logHas("bob: are you back?")))
}

// TestBrowserObserverProcessPage: from the observer's process table, a
// click on a PID opens its process page (behaviour, state, links, each a
// link in turn); the root supervisor's page shows its stack and children;
// a connection is labelled with its user; and the system panel's chart
// grows as the sampler adds to its history.
func TestBrowserObserverProcessPage(t *testing.T) {
	chromium(t)
	p := startProgram(t, "-data", t.TempDir(), "-observer-sample", "200ms")
	carol := dialLine(t, p.tcp)
	carol.expect("CONNECT carol", "OK")
	s, err := p.snapshot(httpClient(t))
	if err != nil {
		t.Fatal(err)
	}
	online, root := s.pidOf("chat.online"), s.pidOf("chat.root")
	ctx := browser(t)
	runActions(t, ctx, "open the observer",
		chromedp.Navigate("http://"+p.http+"/observer/"),
		chromedp.WaitVisible(chromedp.CSS(`#processes`)),
	)
	// The chart: its sample count grows while the page refreshes itself.
	first := eval[int](t, ctx, `Number(document.querySelector('#chart').dataset.samples)`)
	runActions(t, ctx, "the system chart updates",
		waitJS(fmt.Sprintf(`Number(document.querySelector('#chart').dataset.samples) >= %d`, first+2)),
		waitJS(`document.querySelectorAll('#chart polyline.series').length === 3`),
	)
	if pts := eval[string](t, ctx, `document.querySelector('#chart polyline[data-series="processes"]').getAttribute('points')`); len(strings.Fields(pts)) < first+2 {
		t.Errorf("the processes line has %d points", len(strings.Fields(pts)))
	}

	// Click chat.online's PID in the table.
	link := fmt.Sprintf(`#processes tr[data-pid=%s] a.pid`, strconv.Quote(online))
	runActions(t, ctx, "open chat.online's page", chromedp.Click(chromedp.CSS(link)))
	waitPage(t, ctx, online)
	if b := text(t, ctx, `#behaviour`); b != "server *chat.online" {
		t.Errorf("behaviour %q", b)
	}
	if st := text(t, ctx, `#state`); !strings.Contains(st, "chat.online") {
		t.Errorf("state %q", st)
	}
	// Its links include the root supervisor: follow it.
	rootLink := fmt.Sprintf(`#links a.pid[href*=%s]`, strconv.Quote(url.QueryEscape(root)))
	runActions(t, ctx, "follow the link to chat.root", chromedp.Click(chromedp.CSS(rootLink)))
	waitPage(t, ctx, root)
	runActions(t, ctx, "ask for chat.root's stack", chromedp.Click(chromedp.CSS(`#show-stack`)))
	waitPage(t, ctx, root)
	runActions(t, ctx, "chat.root's stack", chromedp.WaitVisible(chromedp.CSS(`#stack`)))
	if st := text(t, ctx, `#stack`); !strings.Contains(st, "runResident") {
		t.Errorf("chat.root's stack:\n%s", st)
	}
	if kids := eval[int](t, ctx, `document.querySelectorAll('ul.trees li.child').length`); kids < 4 {
		t.Errorf("chat.root's page shows %d children, want its 3 and carol's connection", kids)
	}
	// carol's connection, found by its label in the tree.
	carolPID := eval[string](t, ctx, `Array.from(document.querySelectorAll('ul.trees li.child')).find(li => (li.querySelector(':scope > b.label') || {}).textContent === 'user carol').dataset.pid`)
	runActions(t, ctx, "open carol's connection",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`ul.trees li.child[data-pid=%s] > a.pid`, strconv.Quote(carolPID)))))
	waitPage(t, ctx, carolPID)
	if l := text(t, ctx, `h2 span.label`); l != "user carol" {
		t.Errorf("carol's connection: label %q", l)
	}
	if b := text(t, ctx, `#behaviour`); b != "server *chat.conn" {
		t.Errorf("carol's connection: behaviour %q", b)
	}
}

// waitPage waits until the browser shows the process page of pid. A click
// on a link navigates: the old page's script context goes away meanwhile,
// so the check is retried rather than polled inside one context.
func waitPage(t *testing.T, ctx context.Context, pid string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#pid') || {}).textContent || ''`))
		if err == nil && got == pid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process page of %s did not open (showing %q, %v)", pid, got, err)
		}
		time.Sleep(50 * time.Millisecond) // a navigation has no event this test can wait on
	}
}
