package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Start starts a supervisor on node n and returns its PID once every child
// of spec has started, in order. If a child fails to start, the children
// already started are stopped in reverse order and Start fails with a
// *ChildStartError wrapping that child's error. An invalid spec fails with
// *SpecError before anything starts. opts are server options (server.Named,
// server.WithVia, server.LinkTo); the supervisor always traps exits.
//
// The supervisor is a server process: it can be named, linked, monitored,
// called with server.Call and stopped with server.Stop. An exit signal from
// its parent (server.LinkTo) or from the node (Node.Stop) stops its
// children in reverse start order, each within its shutdown, and then the
// supervisor itself with that reason.
func Start(ctx context.Context, n *gotp.Node, spec Spec, opts ...server.Option) (gotp.PID, error) {
	s, err := newStatic(spec)
	if err != nil {
		return gotp.PID{}, err
	}
	return server.Start(ctx, n, s, withTrap(opts)...)
}

// StartLink starts a supervisor as Start does, linked to the calling
// process parent, which becomes its parent: this is how a supervisor is the
// child of another (see Spec.ChildSpec).
func StartLink(ctx context.Context, parent *gotp.Process, spec Spec, opts ...server.Option) (gotp.PID, error) {
	s, err := newStatic(spec)
	if err != nil {
		return gotp.PID{}, err
	}
	return server.StartLink(ctx, parent, s, withTrap(opts)...)
}

// withTrap adds the options every supervisor runs with: it traps exits;
// it runs on a goroutine of its own (server.Dedicated), because each of
// its messages may start or stop children, deep calls that would regrow
// the stack of a goroutine started per message; and a call that finds it
// idle runs on the caller's goroutine (server.InlineCalls), which saves
// two goroutine switches per child started.
func withTrap(opts []server.Option) []server.Option {
	return append(opts[:len(opts):len(opts)], server.TrapExit(true), server.Dedicated(), server.InlineCalls())
}

func newStatic(spec Spec) (*sup, error) {
	if err := checkFlags(spec.Strategy, spec.Period, spec.AutoShutdown); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(spec.Children))
	for i := range spec.Children {
		c := &spec.Children[i]
		if err := checkChild(c, false); err != nil {
			return nil, err
		}
		if err := checkSignificant(c, spec.AutoShutdown); err != nil {
			return nil, err
		}
		if seen[c.ID] {
			return nil, &SpecError{ID: c.ID, Reason: "duplicate child id"}
		}
		seen[c.ID] = true
	}
	return &sup{
		strategy:     spec.Strategy,
		intensity:    spec.intensity(),
		period:       spec.period(),
		autoShutdown: spec.AutoShutdown,
		initial:      slices.Clone(spec.Children),
		byID:         make(map[string]*child, len(spec.Children)),
		byPID:        newPIDMap(len(spec.Children)),
	}, nil
}

// child is one child of a supervisor: a static child with its spec, or a
// dynamic child with its argument.
type child struct {
	spec       *ChildSpec // dynamic children: the shared template (Start is nil)
	arg        any        // dynamic children: the start argument
	pid        gotp.PID   // zero when not running
	restarting bool       // a restart failed; a retry is queued
	removed    bool       // no longer a child: a queued retry is void
	restarts   int        // times restarted by the supervisor
	failures   int        // failed starts
}

// tryAgain is the message a supervisor sends itself to retry a failed
// restart, so that other messages (an exit of its parent, for example)
// are handled in between, as in OTP.
type tryAgain struct {
	c   *child
	err error // why the last start failed
}

// infoKey keys the supervisor in its process dictionary, for Inspect.
type infoKey struct{}

// sup is the server.Behaviour of every supervisor. Its fields are written
// only by the supervisor process; those read by Inspect are written under
// mu.
type sup struct {
	server.Defaults

	strategy     Strategy
	intensity    int
	period       time.Duration
	autoShutdown AutoShutdown
	initial      []ChildSpec

	dynamic     bool
	tmpl        ChildSpec // dynamic: restart, shutdown and type of every child
	dynStart    func(ctx context.Context, sup *gotp.Process, arg any) (gotp.PID, any, error)
	maxChildren int

	p     *gotp.Process
	log   *slog.Logger
	label string
	epoch time.Time
	ring  restartRing

	mu            sync.Mutex // guards the fields below for readers other than the supervisor
	children      []*child   // static children in start order
	byID          map[string]*child
	byPID         pidMap              // running children
	dynRestarting map[*child]gotp.PID // dynamic children whose restart failed, with the PID of their last process
	infos         map[*child]any      // what the latest start of a child returned beside its PID (StartInfo); nil until the first
	restarts      uint64
	failures      uint64 // failed child starts
}

// Init starts the declared children in order.
func (s *sup) Init(ctx context.Context, p *gotp.Process) error {
	s.p = p
	s.byPID.node, s.byPID.creation = p.Node().Name(), p.Node().Creation()
	s.log = p.Node().Logger()
	s.epoch = time.Now()
	p.TrapExit(true)
	if name := p.Info().Name; name != "" {
		s.label = name
	} else {
		s.label = p.Self().String()
	}
	p.SetValue(infoKey{}, s)
	for _, spec := range s.initial {
		c := &child{spec: &spec}
		s.mu.Lock()
		s.children = append(s.children, c)
		s.byID[spec.ID] = c
		s.mu.Unlock()
		ignored, err := s.start(ctx, c)
		if err != nil {
			s.logStartFailure(c, err)
			s.stopAll()
			return &ChildStartError{ID: spec.ID, Err: err}
		}
		if ignored && spec.Restart == Temporary {
			s.remove(c) // OTP keeps no spec of an ignored temporary child
		}
	}
	s.initial = nil
	return nil
}

// Terminate stops every child: static ones in reverse start order, dynamic
// ones all at once.
func (s *sup) Terminate(p *gotp.Process, reason error) {
	s.stopAll()
}

// HandleInfo handles exits of children and queued restart retries. Exit
// signals from processes that are neither children nor the parent are
// ignored, as in OTP.
func (s *sup) HandleInfo(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case gotp.Exit:
		c, ok := s.byPID.get(m.From)
		if !ok {
			return nil
		}
		return s.childExited(c, m.Reason)
	case tryAgain:
		if m.c.removed || !m.c.restarting {
			return nil
		}
		return s.restart(m.c, m.err, s.dynRestarting[m.c])
	}
	return s.Defaults.HandleInfo(p, msg)
}

func (s *sup) childExited(c *child, reason error) error {
	old := c.pid
	s.mu.Lock()
	s.byPID.del(old)
	c.pid = gotp.PID{}
	s.mu.Unlock()
	r := c.spec.Restart
	restart := r == Permanent || (r == Transient && !gotp.IsNormal(reason))
	if (r == Permanent || !gotp.IsNormal(reason)) && s.log.Enabled(context.Background(), slog.LevelError) {
		action := "none"
		if restart {
			action = "restart"
		}
		s.log.Error("supervisor: child terminated",
			"supervisor", s.label, "child", c.spec.ID, "pid", old, "reason", reason,
			"restart", r.String(), "action", action)
	}
	if !restart {
		if r == Temporary || s.dynamic {
			s.remove(c)
		}
		if c.spec.Significant {
			return s.significantEnded(c)
		}
		return nil
	}
	return s.restart(c, reason, old)
}

// significantEnded applies the supervisor's AutoShutdown after the
// significant child c ended by itself and was not restarted: it returns
// ErrAutoShutdown if the supervisor must shut down.
func (s *sup) significantEnded(c *child) error {
	switch s.autoShutdown {
	case AnySignificant:
	case AllSignificant:
		if s.dynamic {
			if s.byPID.len()+len(s.dynRestarting) > 0 {
				return nil
			}
			break
		}
		for _, d := range s.children {
			if d.spec.Significant && (!d.pid.IsZero() || d.restarting) {
				return nil
			}
		}
	default:
		return nil
	}
	s.log.Info("supervisor: significant child ended, shutting down",
		"supervisor", s.label, "child", c.spec.ID, "auto_shutdown", s.autoShutdown.String())
	return ErrAutoShutdown
}

// restart counts a restart against the intensity and restarts c (and, by
// the strategy, its siblings) after it ended with reason; old is its last
// process. It returns ErrMaxIntensity when the supervisor must give up.
func (s *sup) restart(c *child, reason error, old gotp.PID) error {
	if !s.ring.add(int64(time.Since(s.epoch)), s.intensity, int64(s.period)) {
		s.log.Error("supervisor: reached max restart intensity, shutting down",
			"supervisor", s.label, "child", c.spec.ID, "reason", reason, "intensity", s.intensity, "period", s.period)
		return ErrMaxIntensity
	}
	s.mu.Lock()
	s.restarts++
	s.mu.Unlock()
	ctx := s.p.Context()
	if s.dynamic || s.strategy == OneForOne {
		return s.restartOne(ctx, c, old)
	}
	from := slices.Index(s.children, c)
	if s.strategy == OneForAll {
		from = 0
	}
	// Stop the group in reverse start order (c is not running). Stopping
	// removes temporary children; they are not restarted.
	for j := len(s.children) - 1; j >= from; j-- {
		if d := s.children[j]; d != c {
			s.stop(d)
		}
	}
	from = slices.Index(s.children, c)
	if s.strategy == OneForAll {
		from = 0
	}
	for _, d := range slices.Clone(s.children[from:]) {
		if err := s.restartOne(ctx, d, gotp.PID{}); err != nil || d.restarting {
			return err // a failed start is retried later; the rest wait for it
		}
	}
	return nil
}

// restartOne starts c again. A failure is logged, marks c restarting and
// queues a retry (a dynamic child is then known by last, the PID of its
// last process); only a stopping node makes it return an error.
func (s *sup) restartOne(ctx context.Context, c *child, last gotp.PID) error {
	old := c.restarts
	s.mu.Lock()
	c.restarts++
	s.mu.Unlock()
	ignored, err := s.start(ctx, c)
	switch {
	case err != nil:
		s.logStartFailure(c, err)
		if errors.Is(err, gotp.ErrNodeStopped) {
			return gotp.ErrShutdown
		}
		s.mu.Lock()
		c.restarting = true
		if s.dynamic {
			s.dynRestarting[c] = last
		}
		s.mu.Unlock()
		s.p.Send(s.p.Self(), tryAgain{c: c, err: err})
	case ignored && s.dynamic:
		s.remove(c)
	case s.log.Enabled(context.Background(), slog.LevelInfo):
		s.log.Info("supervisor: child restarted",
			"supervisor", s.label, "child", c.spec.ID, "pid", c.pid, "restarts", old+1)
	}
	return nil
}

// logStartFailure logs and counts a failed start of c.
func (s *sup) logStartFailure(c *child, err error) {
	s.mu.Lock()
	s.failures++
	c.failures++
	s.mu.Unlock()
	s.log.Error("supervisor: child failed to start",
		"supervisor", s.label, "child", c.spec.ID, "reason", err)
}

// start runs c's start function; ignored reports server.ErrIgnore.
func (s *sup) start(ctx context.Context, c *child) (ignored bool, err error) {
	pid, info, err := s.callStart(ctx, c)
	if err != nil {
		if errors.Is(err, server.ErrIgnore) {
			s.mu.Lock()
			c.restarting = false
			delete(s.infos, c)
			delete(s.dynRestarting, c)
			s.mu.Unlock()
			return true, nil
		}
		return false, err
	}
	s.mu.Lock()
	c.pid = pid
	c.restarting = false
	switch {
	case info != nil && s.infos == nil:
		s.infos = map[*child]any{c: info}
	case info != nil:
		s.infos[c] = info
	default:
		delete(s.infos, c)
	}
	delete(s.dynRestarting, c)
	s.byPID.put(pid, c)
	s.mu.Unlock()
	return false, nil
}

func (s *sup) callStart(ctx context.Context, c *child) (pid gotp.PID, info any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &gotp.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	switch {
	case s.dynamic:
		pid, info, err = s.dynStart(ctx, s.p, c.arg)
	case c.spec.StartInfo != nil:
		pid, info, err = c.spec.StartInfo(ctx, s.p)
	default:
		pid, err = c.spec.Start(ctx, s.p)
	}
	if err == nil && pid.IsZero() {
		err = errZeroPID
	}
	if err != nil {
		info = nil
	}
	return pid, info, err
}

var errZeroPID = errors.New("supervisor: start function returned the zero PID without an error")

// remove forgets c.
func (s *sup) remove(c *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.removed = true
	delete(s.dynRestarting, c)
	delete(s.infos, c)
	if s.dynamic {
		return
	}
	if i := slices.Index(s.children, c); i >= 0 {
		s.children = slices.Delete(s.children, i, i+1)
	}
	if s.byID[c.spec.ID] == c {
		delete(s.byID, c.spec.ID)
	}
}

// stop shuts c down if it runs, and forgets it if it is temporary. A
// restarting child becomes not running.
func (s *sup) stop(c *child) {
	if pid := c.pid; !pid.IsZero() {
		s.mu.Lock()
		s.byPID.del(pid)
		c.pid = gotp.PID{}
		s.mu.Unlock()
		s.shutdown(c.spec.ID, pid, c.spec.shutdown(), c.spec.Restart != Permanent)
	}
	s.mu.Lock()
	c.restarting = false
	delete(s.dynRestarting, c)
	s.mu.Unlock()
	if c.spec.Restart == Temporary {
		s.remove(c)
	}
}

// stopAll stops every child: static children in reverse start order,
// dynamic children all at once.
func (s *sup) stopAll() {
	if s.dynamic {
		s.stopDynamic()
		return
	}
	for i := len(s.children) - 1; i >= 0; i-- {
		if i < len(s.children) {
			s.stop(s.children[i])
		}
	}
}

// shutdown stops one child as OTP does: monitor it, unlink it, send it
// gotp.ErrShutdown (or gotp.ErrKill for BrutalKill), wait for it to end
// until the timeout, then kill it. It returns the child's exit reason.
func (s *sup) shutdown(id string, pid gotp.PID, timeout time.Duration, notPermanent bool) error {
	p, n := s.p, s.p.Node()
	down := make(chan error, 1)
	ref := n.MonitorFunc(pid, func(d gotp.Down) { down <- d.Reason })
	p.Unlink(pid)
	done := p.Context().Done()
	var reason error
	switch timeout {
	case BrutalKill:
		p.Exit(pid, gotp.ErrKill)
	default:
		p.Exit(pid, gotp.ErrShutdown)
		if timeout == Infinity {
			break
		}
		t := time.NewTimer(timeout)
		select {
		case reason = <-down:
			t.Stop()
			return s.checkShutdown(id, pid, reason, false, notPermanent)
		case <-t.C:
			s.log.Warn("supervisor: child did not shut down in time, killing it",
				"supervisor", s.label, "child", id, "pid", pid, "shutdown", timeout)
			p.Exit(pid, gotp.ErrKill)
		case <-done:
			n.Demonitor(ref, pid)
			n.Exit(pid, gotp.ErrKill)
			return gotp.ErrKilled
		}
	}
	select {
	case reason = <-down:
	case <-done: // the supervisor was killed: do not leave its child behind
		n.Demonitor(ref, pid)
		n.Exit(pid, gotp.ErrKill)
		return gotp.ErrKilled
	}
	return s.checkShutdown(id, pid, reason, timeout == BrutalKill, notPermanent)
}

// checkShutdown logs a child's exit reason that a shutdown did not
// expect. A child that is not Permanent may also have ended normally just
// before the shutdown reached it (a connection whose client left as the
// service stopped), as OTP's supervisor accepts.
func (s *sup) checkShutdown(id string, pid gotp.PID, reason error, brutal, notPermanent bool) error {
	switch {
	case reason == gotp.ErrNoProc, errors.Is(reason, gotp.ErrShutdown) && !brutal, errors.Is(reason, gotp.ErrKilled):
	case reason == nil && notPermanent:
	default:
		s.log.Error("supervisor: child shutdown error",
			"supervisor", s.label, "child", id, "pid", pid, "reason", reason)
	}
	return reason
}

// restartRing remembers the times of the restarts within the last period
// (at most intensity of them), oldest first, in a circular buffer that
// grows only as far as they need: checking the intensity costs amortised
// O(1) however many restarts happened, and the memory is bounded by the
// restarts of one period, not by the intensity.
type restartRing struct {
	buf  []int64 // nanoseconds since the supervisor started
	head int     // index of the oldest entry
	n    int     // entries in use
}

// add records a restart at now and reports whether it stays within limit
// restarts in period (now never goes back).
func (r *restartRing) add(now int64, limit int, period int64) bool {
	if limit <= 0 {
		return false
	}
	for r.n > 0 && now-r.buf[r.head] >= period { // out of the window
		r.head++
		if r.head == len(r.buf) {
			r.head = 0
		}
		r.n--
	}
	if r.n >= limit {
		return false
	}
	if r.n == len(r.buf) {
		grown := make([]int64, min(limit, max(4, 2*len(r.buf))))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = now
	r.n++
	return true
}
