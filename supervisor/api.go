package supervisor

import (
	"context"
	"slices"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// ChildState is what a child is doing, as WhichChildren reports it.
type ChildState string

// Child states.
const (
	// ChildRunning: the child runs; ChildInfo.PID names it.
	ChildRunning ChildState = "running"
	// ChildRestarting: a restart failed and is retried (OTP's restarting).
	ChildRestarting ChildState = "restarting"
	// ChildNotRunning: the spec is kept but no process runs it (it was
	// terminated, exited normally as a Transient child, or its start
	// returned server.ErrIgnore; OTP's undefined).
	ChildNotRunning ChildState = "undefined"
)

// ChildInfo describes one child.
type ChildInfo struct {
	ID string // empty for a dynamic child
	// PID is the running child's process; zero when it is not running,
	// except for a dynamic child whose restart is being retried: that one
	// has no ID, and is named by the PID of its last process (which is
	// not alive), as OTP names it {restarting, Pid}.
	PID   gotp.PID
	State ChildState
	// Info is what the child's latest start returned beside its PID, for
	// a child started by a StartInfo function (OTP's {ok, Pid, Info});
	// nil otherwise.
	Info     any
	Type     ChildType
	Restart  Restart
	Restarts int // times the supervisor restarted this child
	// StartFailures counts the starts of this child that failed (each is
	// logged); a child whose spec was dropped after a failure is not listed.
	StartFailures int
	Sub           *Info // from Tree only: the subtree of a running child supervisor
}

// Counts are CountChildren's answer.
type Counts struct {
	Specs       int // children (specs), running or not; always 1 for a dynamic supervisor: its one template, as OTP counts
	Active      int // running children
	Supervisors int // children of type Supervisor, running or not
	Workers     int // children of type Worker, running or not
}

type (
	startChildReq struct {
		ctx  context.Context
		spec ChildSpec
	}
	terminateChildReq struct{ id string }
	restartChildReq   struct {
		ctx context.Context
		id  string
	}
	deleteChildReq       struct{ id string }
	whichChildrenReq     struct{}
	whichChildReq        struct{ id string }
	whichDynamicChildReq struct{ pid gotp.PID }
	getChildSpecReq      struct{ id string }
	countChildrenReq     struct{}
	startDynamicReq      struct {
		ctx context.Context
		arg any
	}
	terminateDynamicReq struct{ pid gotp.PID }
)

// StartChild adds a child to the static supervisor sup and starts it. It
// fails with *SpecError for an invalid spec (a Significant child of a
// supervisor whose AutoShutdown is Never, for example), *AlreadyStartedError
// when a child with the id runs, ErrAlreadyPresent when its spec is kept
// but not running, *ChildStartError when the start fails (the spec is then
// not kept), ErrDynamic for a dynamic supervisor, and *server.CallError
// when sup cannot be called. A start that returns server.ErrIgnore returns
// the zero PID and no error, and keeps the spec unless the child is
// Temporary (OTP drops an ignored temporary child). It blocks until the
// child has started or ctx ends.
func StartChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, spec ChildSpec) (gotp.PID, error) {
	if err := checkChild(&spec, false); err != nil {
		return gotp.PID{}, err
	}
	return server.Call[gotp.PID](ctx, c, sup, startChildReq{ctx: ctx, spec: spec})
}

// TerminateChild stops the child id of the static supervisor sup, within
// its shutdown, and keeps its spec (RestartChild starts it again) unless it
// is Temporary. A child that is not running is left as it is. It fails with
// ErrNotFound, ErrDynamic or *server.CallError.
func TerminateChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, id string) error {
	_, err := server.Call[struct{}](ctx, c, sup, terminateChildReq{id: id})
	return err
}

// RestartChild starts again the child id of the static supervisor sup,
// whose spec is kept but not running. It fails with ErrRunning,
// ErrRestarting, ErrNotFound, *ChildStartError (the spec is kept),
// ErrDynamic or *server.CallError. A start that returns server.ErrIgnore
// returns the zero PID and no error.
func RestartChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, id string) (gotp.PID, error) {
	return server.Call[gotp.PID](ctx, c, sup, restartChildReq{ctx: ctx, id: id})
}

// DeleteChild removes the spec of the child id of the static supervisor
// sup, which must not be running. It fails with ErrRunning, ErrRestarting,
// ErrNotFound, ErrDynamic or *server.CallError.
func DeleteChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, id string) error {
	_, err := server.Call[struct{}](ctx, c, sup, deleteChildReq{id: id})
	return err
}

// WhichChildren lists the children of sup: a static supervisor's in start
// order, a dynamic supervisor's in spawn order of their processes (those
// whose restart is being retried last). It is a call, ordered with the
// supervisor's other work; Inspect reads the same without one.
func WhichChildren[C server.Caller](ctx context.Context, c C, sup gotp.Dest) ([]ChildInfo, error) {
	return server.Call[[]ChildInfo](ctx, c, sup, whichChildrenReq{})
}

// WhichChild describes the child id of the static supervisor sup (OTP's
// which_child), as WhichChildren would. It fails with ErrNotFound,
// ErrDynamic (see WhichDynamicChild) and *server.CallError.
func WhichChild[C server.Caller](ctx context.Context, c C, sup gotp.Dest, id string) (ChildInfo, error) {
	return server.Call[ChildInfo](ctx, c, sup, whichChildReq{id: id})
}

// GetChildSpec returns the spec of the child id of the static supervisor
// sup (OTP's get_childspec), with the defaults it runs with filled in
// (Shutdown). It fails with ErrNotFound, ErrDynamic and *server.CallError.
func GetChildSpec[C server.Caller](ctx context.Context, c C, sup gotp.Dest, id string) (ChildSpec, error) {
	return server.Call[ChildSpec](ctx, c, sup, getChildSpecReq{id: id})
}

// CountChildren counts the children of sup.
func CountChildren[C server.Caller](ctx context.Context, c C, sup gotp.Dest) (Counts, error) {
	return server.Call[Counts](ctx, c, sup, countChildrenReq{})
}

// HandleCall serves the management functions.
func (s *sup) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case whichChildrenReq:
		return s.which(), nil
	case countChildrenReq:
		return s.count(), nil
	case startDynamicReq:
		if !s.dynamic {
			return ErrNotDynamic, nil
		}
		return s.startDynamic(r.ctx, r.arg), nil
	case terminateDynamicReq:
		if !s.dynamic {
			return ErrNotDynamic, nil
		}
		return s.terminateDynamic(r.pid), nil
	case whichDynamicChildReq:
		if !s.dynamic {
			return ErrNotDynamic, nil
		}
		if c, ok := s.findDynamic(r.pid); ok {
			return s.info(c), nil
		}
		return ErrNotFound, nil
	case startChildReq, terminateChildReq, restartChildReq, deleteChildReq, whichChildReq, getChildSpecReq:
		if s.dynamic {
			return ErrDynamic, nil
		}
	}
	switch r := req.(type) {
	case whichChildReq:
		if c, ok := s.byID[r.id]; ok {
			return s.info(c), nil
		}
		return ErrNotFound, nil
	case getChildSpecReq:
		c, ok := s.byID[r.id]
		if !ok {
			return ErrNotFound, nil
		}
		spec := *c.spec
		spec.Shutdown = spec.shutdown()
		return spec, nil
	case startChildReq:
		return s.startChild(r.ctx, r.spec), nil
	case terminateChildReq:
		c, ok := s.byID[r.id]
		if !ok {
			return ErrNotFound, nil
		}
		s.stop(c)
		return struct{}{}, nil
	case restartChildReq:
		c, err := s.notRunning(r.id)
		if err != nil {
			return err, nil
		}
		if _, err := s.start(r.ctx, c); err != nil {
			s.logStartFailure(c, err)
			return &ChildStartError{ID: r.id, Err: err}, nil
		}
		return c.pid, nil
	case deleteChildReq:
		c, err := s.notRunning(r.id)
		if err != nil {
			return err, nil
		}
		s.remove(c)
		return struct{}{}, nil
	}
	return s.Defaults.HandleCall(p, from, req)
}

// notRunning returns the static child id if it is neither running nor
// restarting, which RestartChild and DeleteChild require; otherwise the
// error OTP returns.
func (s *sup) notRunning(id string) (*child, error) {
	c, ok := s.byID[id]
	switch {
	case !ok:
		return nil, ErrNotFound
	case !c.pid.IsZero():
		return nil, ErrRunning
	case c.restarting:
		return nil, ErrRestarting
	}
	return c, nil
}

func (s *sup) startChild(ctx context.Context, spec ChildSpec) any {
	if err := checkSignificant(&spec, s.autoShutdown); err != nil {
		return err
	}
	if c, ok := s.byID[spec.ID]; ok {
		if !c.pid.IsZero() {
			return &AlreadyStartedError{ID: spec.ID, PID: c.pid}
		}
		return ErrAlreadyPresent
	}
	c := &child{spec: &spec}
	s.mu.Lock()
	s.children = append(s.children, c)
	s.byID[spec.ID] = c
	s.mu.Unlock()
	ignored, err := s.start(ctx, c)
	if err != nil {
		s.logStartFailure(c, err)
		s.remove(c)
		return &ChildStartError{ID: spec.ID, Err: err}
	}
	if ignored && spec.Restart == Temporary {
		s.remove(c)
	}
	return c.pid
}

func (s *sup) state(c *child) ChildState {
	switch {
	case !c.pid.IsZero():
		return ChildRunning
	case c.restarting:
		return ChildRestarting
	}
	return ChildNotRunning
}

func (s *sup) info(c *child) ChildInfo {
	in := ChildInfo{
		ID: c.spec.ID, PID: c.pid, State: s.state(c), Info: s.infos[c],
		Type: c.spec.Type, Restart: c.spec.Restart, Restarts: c.restarts,
		StartFailures: c.failures,
	}
	if s.dynamic && c.restarting {
		in.PID = s.dynRestarting[c]
	}
	return in
}

// which lists the children in order; the caller is the supervisor.
func (s *sup) which() []ChildInfo {
	out := s.whichUnsorted()
	sortDynamic(out, s.dynamic)
	return out
}

// whichUnsorted lists the children, a dynamic supervisor's in no order;
// the caller is the supervisor or holds mu.
func (s *sup) whichUnsorted() []ChildInfo {
	if !s.dynamic {
		out := make([]ChildInfo, len(s.children))
		for i, c := range s.children {
			out[i] = s.info(c)
		}
		return out
	}
	out := make([]ChildInfo, 0, s.byPID.len()+len(s.dynRestarting))
	s.byPID.each(func(c *child) { out = append(out, s.info(c)) })
	for c := range s.dynRestarting {
		out = append(out, s.info(c))
	}
	return out
}

// sortDynamic orders a dynamic supervisor's children by spawn order of
// their processes, those being restarted last.
func sortDynamic(out []ChildInfo, dynamic bool) {
	if !dynamic {
		return
	}
	slices.SortFunc(out, func(a, b ChildInfo) int {
		ar, br := a.State == ChildRestarting, b.State == ChildRestarting
		switch {
		case ar != br:
			if ar {
				return 1
			}
			return -1
		case a.PID.ID() < b.PID.ID():
			return -1
		case a.PID.ID() > b.PID.ID():
			return 1
		}
		return 0
	})
}

// count counts the children; the caller is the supervisor or holds mu.
func (s *sup) count() Counts {
	if s.dynamic {
		// As OTP's simple_one_for_one: one spec, the template; the
		// children, running or restarting, count as its type.
		kids := s.byPID.len() + len(s.dynRestarting)
		k := Counts{Specs: 1, Active: s.byPID.len()}
		if s.tmpl.Type == Supervisor {
			k.Supervisors = kids
		} else {
			k.Workers = kids
		}
		return k
	}
	k := Counts{Specs: len(s.children), Active: s.byPID.len()}
	for _, c := range s.children {
		if c.spec.Type == Supervisor {
			k.Supervisors++
		} else {
			k.Workers++
		}
	}
	return k
}
