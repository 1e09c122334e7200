package cluster

import (
	"log/slog"
	"strings"
	"testing"
)

// FuzzAuthLog: any line the embedded NATS server logs is read without a
// panic, and only a route's refusal counts as one.
func FuzzAuthLog(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6222 - rid:5 - Route Error 'Authorization Violation'",
		"[::1]:6222 - rid:5 - Route Error Authorization Violation",
		"10.0.0.2:51234 - rid:9 - authentication error - gotp-route",
		"10.0.0.2:51234 - cid:9 - authentication error",
		"Route Error 'Authorization Violation'",
		"",
		"%s %d %%",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c := &Cluster{log: slog.New(slog.DiscardHandler), evSubs: map[*Subscription]struct{}{}}
		c.opts.Peers = []string{"nats-route://127.0.0.1:6222"}
		c.auth.c = c
		c.auth.Errorf("%s", line)
		refused := c.auth.all()
		if len(refused) > 0 && !strings.Contains(line, " - rid:") {
			t.Fatalf("%q counted as a refused route: %v", line, refused)
		}
	})
}
