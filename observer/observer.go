package observer

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gotp/gotp"
)

// Prefix is where Mount puts the observer.
const Prefix = "/observer/"

// A Source adds what it knows to a Snapshot: the registries, pg scopes,
// inbox tables and cluster of a program (see RegistrySource, ScopeSource,
// InboxSource, ClusterSource), or anything a program wants to show.
// Observe is called for every page, JSON and metrics request; it must be
// quick and safe for concurrent use.
type Source interface {
	Observe(ctx context.Context, s *Snapshot)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, s *Snapshot)

// Observe calls f.
func (f SourceFunc) Observe(ctx context.Context, s *Snapshot) { f(ctx, s) }

// Options configure an Observer. The zero value serves a read-only observer
// to anyone who can reach it.
type Options struct {
	// Token, if set, must accompany every request: as "Authorization:
	// Bearer <token>", or as ?token=<token> (which the page keeps in its
	// links and refreshes).
	Token string
	// AllowKill enables the page's "kill" action (POST .../api/kill with
	// pid=<PID>), which sends gotp.ErrKill to a process. Off by default:
	// the observer is read-only.
	AllowKill bool
	// Sources add sections beyond processes and supervisors, which are
	// found on the node by themselves.
	Sources []Source
	// Refresh is how often the page refreshes itself. Defaults to 2 s.
	Refresh time.Duration
}

// Observer serves a node's observer: an HTML page, a JSON snapshot and
// Prometheus metrics. It is an http.Handler for the paths under Prefix;
// it is safe for concurrent use.
type Observer struct {
	n       *gotp.Node
	opts    Options
	metrics http.Handler
}

// New returns an observer of node n.
func New(n *gotp.Node, opts Options) *Observer {
	if opts.Refresh <= 0 {
		opts.Refresh = 2 * time.Second
	}
	o := &Observer{n: n, opts: opts}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{o: o})
	o.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return o
}

// Mount serves an observer of n on mux under Prefix ("/observer/") and
// returns it: the page at /observer/, the JSON snapshot at
// /observer/api/snapshot, metrics at /observer/metrics.
func Mount(mux *http.ServeMux, n *gotp.Node, opts Options) *Observer {
	o := New(n, opts)
	mux.Handle(Prefix, o)
	return o
}

// ServeHTTP routes a request for a path under Prefix.
func (o *Observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !o.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gotp observer"`)
		http.Error(w, "observer: token required", http.StatusUnauthorized)
		return
	}
	path := r.URL.Path
	if i := strings.Index(path, Prefix); i >= 0 {
		path = path[i+len(Prefix):]
	} else {
		path = strings.TrimPrefix(path, "/")
	}
	switch path {
	case "", "index.html":
		o.servePage(w, r)
	case "api/snapshot":
		o.serveJSON(w, r)
	case "api/kill":
		o.serveKill(w, r)
	case "metrics":
		o.metrics.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (o *Observer) authorized(r *http.Request) bool {
	if o.opts.Token == "" {
		return true
	}
	got := r.URL.Query().Get("token")
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		got = strings.TrimPrefix(h, "Bearer ")
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(o.opts.Token)) == 1
}

func (o *Observer) serveJSON(w http.ResponseWriter, r *http.Request) {
	s := o.snapshot(r.Context())
	s.Processes = sortProcesses(s.Processes, r.URL.Query().Get("sort"), r.URL.Query().Get("filter"))
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
}

// ErrKillDisabled is the answer to a kill request when Options.AllowKill is
// off.
var ErrKillDisabled = errors.New("observer: kill is disabled (Options.AllowKill)")

func (o *Observer) serveKill(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "observer: kill needs POST", http.StatusMethodNotAllowed)
		return
	}
	if !o.opts.AllowKill {
		http.Error(w, ErrKillDisabled.Error(), http.StatusForbidden)
		return
	}
	pid, err := gotp.ParsePID(r.FormValue("pid"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !o.n.IsAlive(pid) {
		http.Error(w, "observer: no such process "+pid.String(), http.StatusNotFound)
		return
	}
	o.n.Logger().Warn("observer: killing a process on request", "pid", pid, "remote", r.RemoteAddr)
	o.n.Exit(pid, gotp.ErrKill)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"killed":"` + pid.String() + `"}` + "\n"))
}
