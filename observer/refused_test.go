package observer_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/observer"
)

// A refused action — a job action or a kill without the token, with a wrong
// one, from another site, as a form, or on an observer that does not allow
// actions — was answered (401, 403, 415) but logged nowhere, so an operator
// could not see someone trying. Each is now logged at ERROR with the action,
// the answer's status and the remote address; a GET of a page without the
// token is not (it changes nothing).
func TestRefusedActionsAreLoggedAtError(t *testing.T) {
	logs := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Name("obs"), gotptest.Logger(logs.Logger()))
	q := jobTable(t, "sqlite")
	dead := deadLetters(t, q, 1)
	body := fmt.Sprintf(`{"table":%q,"id":%d}`, q.Table(), dead[0])
	src := []observer.Source{observer.InboxSource(q)}
	o := observer.New(n, observer.Options{Token: "s3cret", AllowKill: true, Sources: src})
	readOnly := observer.New(n, observer.Options{Token: "s3cret", Sources: src})
	for _, c := range []struct {
		what   string
		h      http.Handler
		path   string
		hdr    []string
		action string
		want   int
	}{
		{"without the token", o, "/observer/api/inbox/retry", nil, "retry", http.StatusUnauthorized},
		{"with a wrong token", o, "/observer/api/inbox/delete?token=guess", nil, "delete", http.StatusUnauthorized},
		{"a kill with a wrong token", o, "/observer/api/kill", []string{"Authorization", "Bearer guess"}, "kill", http.StatusUnauthorized},
		{"from another origin", o, "/observer/api/inbox/cancel?token=s3cret", []string{"Origin", "https://evil.example"}, "cancel", http.StatusForbidden},
		{"as a form", o, "/observer/api/inbox/retry?token=s3cret", []string{"Content-Type", "application/x-www-form-urlencoded"}, "retry", http.StatusUnsupportedMediaType},
		{"without AllowKill", readOnly, "/observer/api/inbox/delete?token=s3cret", nil, "delete", http.StatusForbidden},
	} {
		before := len(logs.Find("observer: action refused"))
		if rec := postJSON(c.h, c.path, body, c.hdr...); rec.Code != c.want {
			t.Fatalf("%s: %d, want %d", c.what, rec.Code, c.want)
		}
		recs := logs.Find("observer: action refused")
		if len(recs) != before+1 {
			t.Errorf("%s: %d records of the refusal, want one", c.what, len(recs)-before)
			continue
		}
		r := recs[len(recs)-1]
		if r.Level != slog.LevelError || r.Attrs["action"] != c.action || fmt.Sprint(r.Attrs["status"]) != fmt.Sprint(c.want) || r.Attrs["remote"] == "" {
			t.Errorf("%s: logged %v %q %v", c.what, r.Level, r.Message, r.Attrs)
		}
	}
	before := len(logs.Find("observer: action refused"))
	if code, _ := get(t, o, "/observer/inbox?table="+q.Table()); code != http.StatusUnauthorized {
		t.Fatalf("page without the token: %d", code)
	}
	if got := len(logs.Find("observer: action refused")); got != before {
		t.Errorf("a page read without the token logged %d refusals", got-before)
	}
}
