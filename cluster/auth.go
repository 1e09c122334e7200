package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrAuth matches every *AuthError with errors.Is.
var ErrAuth = errors.New("cluster: authentication failed")

// AuthError reports credentials refused between this node and another:
// this node's refused by a peer it routes to (Inbound false), or another
// server's refused by this node's embedded server (Inbound true), or this
// node's refused by the NATS deployment of Options.URLs. Join returns it
// when every peer refused this node (see Options.StartAlone); after Join,
// refusals arrive as AuthFailed events.
type AuthError struct {
	// Peer is the route URL from Options.Peers that refused this node
	// (or, when the address the server reports matches none, that
	// address); for an inbound refusal, the address the other server
	// connected from; for Options.URLs, those URLs.
	Peer    string
	Inbound bool
	// Err is what NATS said ("Authorization Violation", "authentication
	// error").
	Err error
}

// Error names the peer and the cause.
func (e *AuthError) Error() string {
	if e.Inbound {
		return fmt.Sprintf("cluster: refused the credentials of a server connecting from %s: %v", e.Peer, e.Err)
	}
	return fmt.Sprintf("cluster: %s refused this node's credentials: %v", e.Peer, e.Err)
}

// Is makes errors.Is(err, ErrAuth) true.
func (e *AuthError) Is(target error) bool { return target == ErrAuth }

// Unwrap returns Err.
func (e *AuthError) Unwrap() error { return e.Err }

// What NATS says of a refused route, on each side.
var (
	errRouteRefused = errors.New("route refused: authorization violation")
	errRouteAuth    = errors.New("route authentication error")
)

// authRepeat is how often a refusal that goes on (NATS retries a route
// every second) is logged again.
const authRepeat = time.Minute

// authLog watches the embedded NATS server's log for refused
// credentials on routes: the server says nothing else about them. It
// implements the server's Logger; everything but refusals is dropped
// (warnings and errors at level Debug).
type authLog struct {
	c *Cluster

	mu      sync.Mutex // guards the fields below
	refused map[string]*refusal
}

// refusal is the state of one peer (or inbound address) whose
// credentials were refused.
type refusal struct {
	err    *AuthError
	count  int       // refusals so far
	logged time.Time // when last logged
	since  int       // count when last logged
}

// The server's lines for a refused route: the dialling side reads
// "-ERR 'Authorization Violation'" from its peer; the accepting side
// logs its own refusal. Both start with the connection's address and
// route id ("127.0.0.1:6222 - rid:4 - ").
var (
	outboundRefusal = regexp.MustCompile(`^\[?([^ \]]+)\]? - rid:\d+ - Route Error '?Authorization Violation'?`)
	inboundRefusal  = regexp.MustCompile(`^\[?([^ \]]+)\]? - rid:\d+ - authentication error`)
)

func (l *authLog) Noticef(string, ...any) {}
func (l *authLog) Tracef(string, ...any)  {}
func (l *authLog) Debugf(string, ...any)  {}
func (l *authLog) Warnf(format string, v ...any) {
	l.c.log.Debug("cluster: nats server", "warning", fmt.Sprintf(format, v...))
}
func (l *authLog) Fatalf(format string, v ...any) { l.Errorf(format, v...) }

func (l *authLog) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if m := outboundRefusal.FindStringSubmatch(line); m != nil {
		l.refuse(&AuthError{Peer: l.c.routeFor(m[1]), Err: errRouteRefused})
		return
	}
	if m := inboundRefusal.FindStringSubmatch(line); m != nil {
		l.refuse(&AuthError{Peer: m[1], Inbound: true, Err: errRouteAuth})
		return
	}
	l.c.log.Debug("cluster: nats server", "error", line)
}

// refuse records a refusal: the first for a peer is logged at level
// Error and published as an AuthFailed event; one that goes on is logged
// again every authRepeat, with the count.
func (l *authLog) refuse(e *AuthError) {
	key := fmt.Sprint(e.Inbound, e.Peer)
	if e.Inbound {
		// An inbound address has a new port every time: one entry for
		// every refusal from the same host.
		key = fmt.Sprint(true, hostOf(e.Peer))
	}
	now := time.Now()
	l.mu.Lock()
	if l.refused == nil {
		l.refused = map[string]*refusal{}
	}
	r, seen := l.refused[key]
	if !seen {
		r = &refusal{err: e}
		l.refused[key] = r
	}
	r.count++
	first := !seen
	again := seen && now.Sub(r.logged) >= authRepeat
	count, since := r.count, r.count-r.since
	if first || again {
		r.logged, r.since = now, r.count
	}
	l.mu.Unlock()
	switch {
	case first && e.Inbound:
		l.c.log.Error("cluster: refused a server's credentials", "peer", e.Peer, "err", e.Err)
	case first:
		l.c.log.Error("cluster: a peer refused this node's credentials", "peer", e.Peer, "err", e.Err)
	case again:
		l.c.log.Error("cluster: credentials still refused", "peer", e.Peer, "inbound", e.Inbound, "err", e.Err,
			"refusals", count, "since_last_log", since)
	}
	if first {
		l.c.publish(NodeEvent{Kind: AuthFailed, Node: e.Peer, Err: e})
	}
}

// all returns every refusal so far.
func (l *authLog) all() []*AuthError {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*AuthError, 0, len(l.refused))
	for _, r := range l.refused {
		out = append(out, r.err)
	}
	slices.SortFunc(out, func(a, b *AuthError) int { return strings.Compare(a.Error(), b.Error()) })
	return out
}

// AuthFailures returns the refusals of credentials seen since Join, one per
// peer (and one per host for inbound refusals), in either direction: what
// a program started with StartAlone checks to learn that it is alone
// because of its credentials. The refusals a peer still makes are
// retried by NATS and logged; those that stopped stay in the list.
func (c *Cluster) AuthFailures() []*AuthError { return c.auth.all() }

// outbound returns the refusals of this node's credentials so far.
func (l *authLog) outbound() []*AuthError {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*AuthError
	for _, r := range l.refused {
		if !r.err.Inbound {
			out = append(out, r.err)
		}
	}
	return out
}

// routeFor returns the route URL of Options.Peers whose host:port is addr,
// or addr itself.
func (c *Cluster) routeFor(addr string) string {
	for _, p := range c.opts.Peers {
		if u, err := url.Parse(p); err == nil && u.Host == addr {
			u.User = nil
			return u.String()
		}
	}
	return addr
}

func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}

// joinAuthError is the error of Join when no route formed and peers
// refused this node: the first refusal, with the others listed.
func joinAuthError(refused []*AuthError) error {
	if len(refused) == 1 {
		return refused[0]
	}
	errs := make([]error, len(refused))
	for i, e := range refused {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// clientAuthError turns NATS's refusal of the client connection into an
// *AuthError; other errors are returned as they are.
func clientAuthError(urls []string, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return &AuthError{Peer: strings.Join(urls, ","), Err: err}
	}
	return err
}
