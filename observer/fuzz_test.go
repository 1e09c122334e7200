package observer_test

import (
	"net/http"
	"testing"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/observer"
)

// FuzzKillBody: whatever a client posts to the kill endpoint, the answer
// is a clear 4xx or a kill of a live process, never a panic; and nothing
// but a process of the node can be killed.
func FuzzKillBody(f *testing.F) {
	for _, s := range []string{`{"pid":"<fz.1.1>"}`, `{"pid":""}`, `{}`, `null`, `[`, `{"pid":5}`, `{"pid":"<fz.1.1>"}{"pid":"x"}`, "\x00", `{"pid":"<a.b.c.d>"}`} {
		f.Add(s)
	}
	n := gotptest.NewNode(f, gotptest.Name("fz"))
	o := observer.New(n, observer.Options{AllowKill: true, Token: "t"})
	f.Fuzz(func(t *testing.T, body string) {
		before := n.ProcessCount()
		rec := postJSON(o, "/observer/api/kill?token=t", body)
		switch rec.Code {
		case http.StatusOK:
			if n.ProcessCount() >= before {
				t.Fatalf("200 for %q, but nothing was killed", body)
			}
		case http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
