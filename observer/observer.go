package observer

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
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

// Defaults of Options.
const (
	DefaultRefresh     = 2 * time.Second
	DefaultSampleEvery = 2 * time.Second
	DefaultHistory     = 300 // ten minutes at DefaultSampleEvery
	DefaultMaxRows     = 200
)

// Options configure an Observer. The zero value serves a read-only observer
// to anyone who can reach it.
type Options struct {
	// Token, if set, must accompany every request: as "Authorization:
	// Bearer <token>", or as ?token=<token> (which the page keeps in its
	// links and refreshes).
	Token string
	// AllowKill enables the page's "kill" action (POST .../api/kill), which
	// sends gotp.ErrKill to a process, and the inbox tables' job actions
	// (POST .../api/inbox/retry, delete and cancel). It needs a Token as
	// well: without one the actions stay off (ErrKillNeedsToken), since
	// anyone who can reach the port could otherwise kill processes or
	// delete jobs. Off by default: the observer is read-only.
	AllowKill bool
	// Sources add sections beyond processes and supervisors, which are
	// found on the node by themselves.
	Sources []Source
	// Refresh is how often the page refreshes itself. Defaults to
	// DefaultRefresh.
	Refresh time.Duration
	// SampleEvery is how often the system panel's history (process count,
	// mailbox total, memory) is sampled, and History how many samples it
	// keeps, oldest dropped first. Default DefaultSampleEvery and
	// DefaultHistory.
	SampleEvery time.Duration
	History     int
	// MaxRows bounds the rows of every list the page shows (processes,
	// groups, registry keys); the page says how many it left out, and the
	// filter finds the others. Defaults to DefaultMaxRows.
	MaxRows int
}

// Observer serves a node's observer: an HTML page, a page per process and
// per registry, a JSON snapshot and Prometheus metrics. It is an
// http.Handler for the paths under Prefix; it is safe for concurrent use.
//
// New starts one process on the node, the sampler, a handler-mode process
// that wakes every SampleEvery (it holds no goroutine in between) to
// sample the system panel's history; it ends with the node, or with
// Close.
type Observer struct {
	n       *gotp.Node
	opts    Options
	coll    *collector
	metrics http.Handler
	hist    *history
}

// New returns an observer of node n.
func New(n *gotp.Node, opts Options) *Observer {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = DefaultSampleEvery
	}
	if opts.History <= 0 {
		opts.History = DefaultHistory
	}
	if opts.MaxRows <= 0 {
		opts.MaxRows = DefaultMaxRows
	}
	o := &Observer{n: n, opts: opts}
	o.coll = &collector{o: o}
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.coll)
	o.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	o.hist = startHistory(n, opts.SampleEvery, opts.History)
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

// Close stops the sampler process. The observer goes on serving, with the
// history it had.
func (o *Observer) Close() { o.hist.stop() }

// Collector returns a prometheus.Collector of the observer's metric
// families (listed in the package doc), for a program's own registry:
// every Collect reads the node and the sources once. It is the collector
// behind /observer/metrics.
func (o *Observer) Collector() prometheus.Collector { return o.coll }

// Register registers the observer's Collector with r.
func (o *Observer) Register(r prometheus.Registerer) error { return r.Register(o.coll) }

// ServeHTTP routes a request for a path under Prefix.
func (o *Observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path, Prefix); i >= 0 {
		path = path[i+len(Prefix):]
	} else {
		path = strings.TrimPrefix(path, "/")
	}
	if !o.Authorized(r) {
		if a := actionOf(path); a != "" {
			o.refused(r, a, http.StatusUnauthorized, "no token, or a wrong one")
		} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A write to a path that names no action (api/inbox/delete/, a
			// typo): someone tried to change the node all the same.
			o.refused(r, "unknown: "+path, http.StatusUnauthorized, "no token, or a wrong one")
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="gotp observer"`)
		http.Error(w, "observer: token required", http.StatusUnauthorized)
		return
	}
	// The token may be in the URL: do not hand it to other sites.
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch path {
	case "", "index.html":
		o.servePage(w, r)
	case "process":
		o.serveProcessPage(w, r)
	case "registry":
		o.serveRegistryPage(w, r)
	case "api/snapshot":
		o.serveJSON(w, r)
	case "api/process":
		o.serveProcessJSON(w, r)
	case "api/kill":
		o.serveKill(w, r)
	case "inbox":
		o.serveInboxPage(w, r)
	case "job":
		o.serveJobPage(w, r)
	case "api/inbox/jobs":
		o.serveJobsJSON(w, r)
	case "api/inbox/job":
		o.serveJobJSON(w, r)
	case "api/inbox/retry", "api/inbox/delete", "api/inbox/cancel":
		o.serveJobAction(w, r, strings.TrimPrefix(path, "api/inbox/"))
	case "metrics":
		o.metrics.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

// Authorized reports whether r carries the observer's token (always true
// without one), so that a program can put other handlers, such as its
// own /metrics, behind the same token.
func (o *Observer) Authorized(r *http.Request) bool {
	if o.opts.Token == "" {
		return true
	}
	got := r.URL.Query().Get("token")
	// The scheme is case-insensitive (RFC 9110, 11.1): "bearer" is "Bearer".
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		got = strings.TrimSpace(h[7:])
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(o.opts.Token)) == 1
}

func (o *Observer) serveJSON(w http.ResponseWriter, r *http.Request) {
	s := o.snapshot(r.Context(), true, nil)
	s.Processes, s.ProcessesShown = o.rows(s.Processes, r.URL.Query().Get("sort"), r.URL.Query().Get("filter"))
	writeJSON(w, s)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // PIDs read <node.1.2>, not \u003cnode.1.2\u003e
	_ = enc.Encode(v)
}

// Errors of the kill endpoint.
var (
	// ErrKillDisabled is the answer to a kill request when
	// Options.AllowKill is off.
	ErrKillDisabled = errors.New("observer: kill is disabled (Options.AllowKill)")
	// ErrKillNeedsToken is the answer to a kill request when AllowKill is
	// set without a Token.
	ErrKillNeedsToken = errors.New("observer: kill needs a token (Options.Token)")
	// ErrCrossOrigin is the answer to a kill request from a page of
	// another origin, or sent as a form (which any site can make a
	// browser send).
	ErrCrossOrigin = errors.New("observer: kill must come from the observer's own page, as JSON")
)

// killEnabled reports whether the kill action is on.
func (o *Observer) killEnabled() bool { return o.opts.AllowKill && o.opts.Token != "" }

// maxKillBody bounds the body of a kill request.
const maxKillBody = 1 << 10

// serveKill kills a process: POST with Content-Type application/json and
// body {"pid": "<node.creation.id>"}. Requiring JSON keeps a cross-site
// form from sending it (a browser sends such a request from another site
// only after a CORS preflight, which this endpoint never approves), and an
// Origin or Sec-Fetch-Site header that names another site is refused.
func (o *Observer) serveKill(w http.ResponseWriter, r *http.Request) {
	if !o.allowAction(w, r, "kill") {
		return
	}
	var req struct {
		PID string `json:"pid"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxKillBody)).Decode(&req); err != nil {
		http.Error(w, "observer: kill body: "+err.Error(), http.StatusBadRequest)
		return
	}
	pid, err := gotp.ParsePID(req.PID)
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
	writeJSON(w, map[string]string{"killed": pid.String()})
}

// allowAction answers a request for a mutating action (the kill, and the
// inbox's job actions) unless every guard lets it through: POST, AllowKill
// with a Token (the token itself was checked by ServeHTTP), no other
// site's Origin or Sec-Fetch-Site, and a JSON body (which a cross-site
// form cannot send). It reports whether the action may go on.
//
// Every refusal, and a request for an action without the right token, is
// logged at ERROR ("observer: action refused", with the action, the status
// and the remote address): someone tried to change the node.
func (o *Observer) allowAction(w http.ResponseWriter, r *http.Request, what string) bool {
	refuse := func(msg string, status int) bool {
		o.refused(r, what, status, msg)
		http.Error(w, msg, status)
		return false
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return refuse("observer: "+what+" needs POST", http.StatusMethodNotAllowed)
	}
	switch {
	case !o.opts.AllowKill:
		return refuse(ErrKillDisabled.Error(), http.StatusForbidden)
	case o.opts.Token == "":
		return refuse(ErrKillNeedsToken.Error(), http.StatusForbidden)
	case !sameOrigin(r):
		return refuse(ErrCrossOrigin.Error(), http.StatusForbidden)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return refuse(ErrCrossOrigin.Error(), http.StatusUnsupportedMediaType)
	}
	return true
}

// actionOf names the action a path (under Prefix) asks for, "" for a read.
func actionOf(path string) string {
	switch path {
	case "api/kill":
		return "kill"
	case "api/inbox/retry", "api/inbox/delete", "api/inbox/cancel":
		return strings.TrimPrefix(path, "api/inbox/")
	}
	return ""
}

// refused logs a refused action at ERROR.
func (o *Observer) refused(r *http.Request, action string, status int, reason string) {
	o.n.Logger().Error("observer: action refused", "action", action, "status", status, "reason", reason, "method", r.Method, "remote", r.RemoteAddr)
}

// sameOrigin reports whether r does not come from a page of another site:
// its Origin, if any, has the request's host, and its Sec-Fetch-Site, if
// any, is same-origin or none (typed by the user).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not from a browser page (curl), or a same-origin GET-like request
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}
