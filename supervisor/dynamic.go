package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// DynamicSpec declares a dynamic supervisor (OTP's simple_one_for_one,
// Elixir's DynamicSupervisor): no children at start, one template, and
// children started on demand by StartDynamicChild, each with its own
// argument of type A. Each child is restarted alone (one for one), with
// the argument it was started with.
type DynamicSpec[A any] struct {
	// Start starts one child with its argument, linked to the supervisor
	// process sup. See StartFunc.
	Start func(ctx context.Context, sup *gotp.Process, arg A) (gotp.PID, error)
	// StartInfo, set instead of Start, also returns information about the
	// child, reported by WhichChildren (see StartInfoFunc). Exactly one of
	// Start and StartInfo must be set.
	StartInfo func(ctx context.Context, sup *gotp.Process, arg A) (pid gotp.PID, info any, err error)
	// Restart, Shutdown, Type and Significant apply to every child, as in
	// ChildSpec. Temporary suits children whose death means they are done
	// (a connection whose user left).
	Restart     Restart
	Shutdown    time.Duration
	Type        ChildType
	Significant bool
	// Intensity, Period and AutoShutdown are as in Spec. With
	// AllSignificant the supervisor shuts down when its last child ends by
	// itself and is not restarted.
	Intensity    int
	Period       time.Duration
	AutoShutdown AutoShutdown
	// MaxChildren bounds the number of children (running or restarting);
	// zero means no bound.
	MaxChildren int
}

func (d DynamicSpec[A]) build() (*sup, error) {
	switch {
	case d.Start == nil && d.StartInfo == nil:
		return nil, &SpecError{Reason: "nil Start"}
	case d.Start != nil && d.StartInfo != nil:
		return nil, &SpecError{Reason: "both Start and StartInfo set"}
	}
	tmpl := ChildSpec{Restart: d.Restart, Shutdown: d.Shutdown, Type: d.Type, Significant: d.Significant,
		Start: func(context.Context, *gotp.Process) (gotp.PID, error) { return gotp.PID{}, nil }}
	if err := checkChild(&tmpl, true); err != nil {
		return nil, err
	}
	if err := checkSignificant(&tmpl, d.AutoShutdown); err != nil {
		return nil, err
	}
	tmpl.Start = nil
	if err := checkFlags(OneForOne, d.Period, d.AutoShutdown); err != nil {
		return nil, err
	}
	if d.MaxChildren < 0 {
		return nil, &SpecError{Reason: fmt.Sprintf("negative MaxChildren %d", d.MaxChildren)}
	}
	flags := Spec{Intensity: d.Intensity, Period: d.Period}
	start, startInfo := d.Start, d.StartInfo
	return &sup{
		dynamic:       true,
		tmpl:          tmpl,
		intensity:     flags.intensity(),
		period:        flags.period(),
		autoShutdown:  d.AutoShutdown,
		maxChildren:   d.MaxChildren,
		byPID:         newPIDMap(0),
		byID:          map[string]*child{},
		dynRestarting: make(map[*child]gotp.PID),
		dynStart: func(ctx context.Context, sup *gotp.Process, arg any) (gotp.PID, any, error) {
			var a A
			if arg != nil {
				var ok bool
				if a, ok = arg.(A); !ok {
					return gotp.PID{}, nil, &ArgTypeError{Got: arg, Want: fmt.Sprintf("%T", (*A)(nil))[1:]}
				}
			}
			if startInfo != nil {
				return startInfo(ctx, sup, a)
			}
			pid, err := start(ctx, sup, a)
			return pid, nil, err
		},
	}, nil
}

// StartDynamic starts a dynamic supervisor on node n. It fails with
// *SpecError for an invalid spec; opts are as in Start.
func StartDynamic[A any](ctx context.Context, n *gotp.Node, spec DynamicSpec[A], opts ...server.Option) (gotp.PID, error) {
	s, err := spec.build()
	if err != nil {
		return gotp.PID{}, err
	}
	return server.Start(ctx, n, s, withTrap(opts)...)
}

// StartDynamicLink starts a dynamic supervisor linked to the calling
// process parent, which becomes its parent.
func StartDynamicLink[A any](ctx context.Context, parent *gotp.Process, spec DynamicSpec[A], opts ...server.Option) (gotp.PID, error) {
	s, err := spec.build()
	if err != nil {
		return gotp.PID{}, err
	}
	return server.StartLink(ctx, parent, s, withTrap(opts)...)
}

// ChildSpec returns a spec that starts this dynamic supervisor as a child
// (of type Supervisor, Permanent, shutdown Infinity) of another supervisor,
// with the server options opts (for example server.Named, so that callers
// find it to start children).
func (d DynamicSpec[A]) ChildSpec(id string, opts ...server.Option) ChildSpec {
	return ChildSpec{
		ID:   id,
		Type: Supervisor,
		Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
			return StartDynamicLink(ctx, sup, d, opts...)
		},
	}
}

// StartDynamicChild starts a child of the dynamic supervisor sup with arg
// and returns its PID. It fails with *ArgTypeError when A is not the
// supervisor's argument type, ErrMaxChildren, *ChildStartError when the
// start fails, ErrNotDynamic for a static supervisor, and
// *server.CallError when sup cannot be called. A start that returns
// server.ErrIgnore returns the zero PID and no error (no child is kept).
// It blocks until the child has started or ctx ends.
func StartDynamicChild[A any, C server.Caller](ctx context.Context, c C, sup gotp.Dest, arg A) (gotp.PID, error) {
	return server.Call[gotp.PID](ctx, c, sup, startDynamicReq{ctx: ctx, arg: arg})
}

// TerminateDynamicChild stops the child pid of the dynamic supervisor sup
// within its shutdown and forgets it. A child whose restart is being
// retried (ChildRestarting) is named by the PID of its last process, as
// WhichChildren reports it, and is forgotten without further retries. A
// pid that is not alive is not an error (OTP returns ok): it is no child
// any more, whether it exited by itself or was terminated before. It fails
// with ErrNotFound for a live process that is not a child of sup, with
// ErrNotDynamic and with *server.CallError.
func TerminateDynamicChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, pid gotp.PID) error {
	_, err := server.Call[struct{}](ctx, c, sup, terminateDynamicReq{pid: pid})
	return err
}

// WhichDynamicChild describes the child pid of the dynamic supervisor sup
// (OTP's which_child with a pid): a running child, or one whose restart is
// being retried, named by the PID of its last process. It fails with
// ErrNotFound, ErrNotDynamic and *server.CallError.
func WhichDynamicChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, pid gotp.PID) (ChildInfo, error) {
	return server.Call[ChildInfo](ctx, c, sup, whichDynamicChildReq{pid: pid})
}

func (s *sup) startDynamic(ctx context.Context, arg any) any {
	if s.maxChildren > 0 && s.byPID.len()+len(s.dynRestarting) >= s.maxChildren {
		return ErrMaxChildren
	}
	c := &child{spec: &s.tmpl, arg: arg}
	ignored, err := s.start(ctx, c)
	switch {
	case err != nil:
		if e, ok := errors.AsType[*ArgTypeError](err); ok {
			return e
		}
		s.logStartFailure(c, err)
		return &ChildStartError{Err: err}
	case ignored:
		return gotp.PID{}
	}
	if c.spec.Restart == Temporary {
		c.arg = nil // never restarted: do not keep the argument alive
	}
	return c.pid
}

func (s *sup) terminateDynamic(pid gotp.PID) any {
	c, ok := s.findDynamic(pid)
	if !ok {
		if !s.p.Node().IsAlive(pid) {
			return struct{}{} // exited already: no child any more (OTP's ok)
		}
		return ErrNotFound
	}
	s.stop(c) // a restarting child has no process: it just stops restarting
	s.remove(c)
	return struct{}{}
}

// findDynamic returns the dynamic child pid: running, or restarting with
// pid as its last process.
func (s *sup) findDynamic(pid gotp.PID) (*child, bool) {
	if c, ok := s.byPID.get(pid); ok {
		return c, true
	}
	for c, last := range s.dynRestarting {
		if last == pid {
			return c, true
		}
	}
	return nil, false
}

// stopDynamic stops every dynamic child at once: each is sent
// gotp.ErrShutdown (gotp.ErrKill for BrutalKill), and those still running
// when the shutdown time is up are killed.
func (s *sup) stopDynamic() {
	s.mu.Lock()
	kids := make([]gotp.PID, 0, s.byPID.len())
	s.byPID.each(func(c *child) {
		kids = append(kids, c.pid)
		c.pid = gotp.PID{}
		c.removed = true
	})
	for c := range s.dynRestarting {
		c.removed = true
	}
	s.byPID.clear()
	clear(s.dynRestarting)
	clear(s.infos)
	s.mu.Unlock()
	if len(kids) == 0 {
		return
	}
	p, n := s.p, s.p.Node()
	timeout := s.tmpl.shutdown()
	downs := make(chan gotp.Down, len(kids))
	refs := make(map[gotp.PID]gotp.Ref, len(kids))
	for _, pid := range kids {
		refs[pid] = n.MonitorFunc(pid, func(d gotp.Down) { downs <- d })
		p.Unlink(pid)
	}
	sig := gotp.ErrShutdown
	if timeout == BrutalKill {
		sig = gotp.ErrKill
	}
	for _, pid := range kids {
		p.Exit(pid, sig)
	}
	var expired <-chan time.Time
	if timeout != Infinity && timeout != BrutalKill {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	done := p.Context().Done()
	for left := len(kids); left > 0; {
		select {
		case d := <-downs:
			delete(refs, d.PID)
			left--
			s.checkShutdown("", d.PID, d.Reason, timeout == BrutalKill, s.tmpl.Restart != Permanent)
		case <-expired:
			expired = nil
			s.log.Warn("supervisor: children did not shut down in time, killing them",
				"supervisor", s.label, "children", len(refs), "shutdown", timeout)
			for pid := range refs {
				p.Exit(pid, gotp.ErrKill)
			}
		case <-done:
			for pid, ref := range refs {
				n.Demonitor(ref, pid)
				n.Exit(pid, gotp.ErrKill)
			}
			return
		}
	}
}
