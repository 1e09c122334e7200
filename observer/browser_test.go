package observer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/observer"
)

// chromium returns the path of a headless browser (Debian's chromium
// package, which .ci/run installs; GOTP_CHROMIUM names another), or skips.
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

// TestBrowserRetriesDeadLetter: on the inbox page of dead letters, opened
// with the token, clicking a job's retry button makes it ready again (its
// attempts reset), and the page, refreshing itself, no longer lists it.
func TestBrowserRetriesDeadLetter(t *testing.T) {
	path := chromium(t)
	n := gotptest.NewNode(t, gotptest.Name("obs"))
	q := jobTable(t, "sqlite")
	dead := deadLetters(t, q, 2)
	mux := http.NewServeMux()
	observer.Mount(mux, n, observer.Options{Token: "s3cret", AllowKill: true, Refresh: 200 * time.Millisecond,
		Sources: []observer.Source{observer.InboxSource(q)}})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-background-networking", true))
	defer acancel() // waits for the browser to exit
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	id := strconv.FormatInt(dead[0], 10)
	row := `#jobs tr[data-id="` + id + `"]`
	err := chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/observer/inbox?token=s3cret&table="+q.Table()+"&state=dead"),
		chromedp.WaitVisible(chromedp.CSS(row+` button[data-action="retry"]`)),
		chromedp.Click(chromedp.CSS(row+` button[data-action="retry"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(row)),
	)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#jobs tr[data-id]').length`))
	if err != nil {
		t.Fatal(err)
	}
	result, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#action-result`)))
	if err != nil {
		t.Fatal(err)
	}
	if rows != 1 || !strings.Contains(result, "retry: job "+id+" done") {
		t.Fatalf("after the click: %d dead rows, result %q", rows, result)
	}
	j, err := q.Job(context.Background(), dead[0])
	if err != nil || j.State != inbox.StateReady || j.Attempts != 0 {
		t.Fatalf("the retried job: %+v %v", j, err)
	}
	if j, err := q.Job(context.Background(), dead[1]); err != nil || j.State != inbox.StateDead {
		t.Fatalf("the other dead letter: %+v %v", j, err)
	}
}
