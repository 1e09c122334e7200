package supervisor

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Strategy says which children a supervisor restarts when one of them
// exits and must be restarted.
type Strategy uint8

// The restart strategies of OTP.
const (
	// OneForOne restarts only the child that exited.
	OneForOne Strategy = iota
	// OneForAll stops every other child (in reverse start order) and
	// restarts them all (in start order).
	OneForAll
	// RestForOne stops the children started after the one that exited (in
	// reverse start order) and restarts it and them (in start order).
	RestForOne
)

// String returns OTP's name of the strategy (one_for_one, ...).
func (s Strategy) String() string {
	switch s {
	case OneForOne:
		return "one_for_one"
	case OneForAll:
		return "one_for_all"
	case RestForOne:
		return "rest_for_one"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// Restart says when a child that exited is restarted.
type Restart uint8

// The restart types of OTP.
const (
	// Permanent children are always restarted.
	Permanent Restart = iota
	// Transient children are restarted only after an abnormal exit: a nil
	// reason or gotp.ErrShutdown (wrapped or not) is not abnormal (see
	// gotp.IsNormal).
	Transient
	// Temporary children are never restarted; their spec is removed when
	// they exit or are terminated.
	Temporary
)

// String returns OTP's name of the restart type (permanent, ...).
func (r Restart) String() string {
	switch r {
	case Permanent:
		return "permanent"
	case Transient:
		return "transient"
	case Temporary:
		return "temporary"
	}
	return fmt.Sprintf("Restart(%d)", uint8(r))
}

// ChildType tells workers from supervisors. It sets the default shutdown
// and is reported by WhichChildren and CountChildren.
type ChildType uint8

// Child types.
const (
	Worker ChildType = iota
	Supervisor
)

// String returns "worker" or "supervisor".
func (t ChildType) String() string {
	switch t {
	case Worker:
		return "worker"
	case Supervisor:
		return "supervisor"
	}
	return fmt.Sprintf("ChildType(%d)", uint8(t))
}

// Shutdown values of ChildSpec.Shutdown besides a positive timeout.
const (
	// BrutalKill kills the child with gotp.ErrKill at once, without
	// asking it to shut down.
	BrutalKill time.Duration = -1
	// Infinity waits as long as the child takes to shut down. It is the
	// default for children of type Supervisor, so that a subtree stops in
	// its own time.
	Infinity time.Duration = math.MaxInt64
	// DefaultShutdown is the default for children of type Worker.
	DefaultShutdown = 5 * time.Second
)

// Intensity defaults, as OTP's: at most 1 restart in 5 seconds.
const (
	DefaultIntensity = 1
	DefaultPeriod    = 5 * time.Second
	// NoRestarts, as Spec.Intensity, allows no restart at all: the first
	// child exit that needs a restart makes the supervisor give up.
	NoRestarts = -1
)

// AutoShutdown says whether a supervisor ends by itself when its
// significant children end (OTP's auto_shutdown flag).
type AutoShutdown uint8

// The auto_shutdown settings of OTP.
const (
	// Never: the supervisor does not shut itself down (the zero value); no
	// child may be Significant.
	Never AutoShutdown = iota
	// AnySignificant: the supervisor shuts down when any significant child
	// ends by itself and is not restarted (a Transient one that exits
	// normally, a Temporary one that exits for any reason).
	AnySignificant
	// AllSignificant: the supervisor shuts down when the last running
	// significant child ends that way.
	AllSignificant
)

// String returns OTP's name of the setting (never, any_significant,
// all_significant).
func (a AutoShutdown) String() string {
	switch a {
	case Never:
		return "never"
	case AnySignificant:
		return "any_significant"
	case AllSignificant:
		return "all_significant"
	}
	return fmt.Sprintf("AutoShutdown(%d)", uint8(a))
}

// StartFunc starts a child linked to the supervisor process sup and
// returns its PID; for example server.StartLink(ctx, sup, b) or
// sup.SpawnLink(fn). It runs as the supervisor process, so it must not
// wait for messages to the supervisor. Returning server.ErrIgnore means the
// child is not started and that is fine (OTP's ignore): the spec is kept,
// not running, unless the child is Temporary (its spec is then dropped, at
// the supervisor's start as through StartChild). Any other error is a
// start failure. A panic is a start
// failure with a *gotp.PanicError.
//
// ctx is the context of the call that starts the child: Start's, StartChild's
// or RestartChild's; for automatic restarts it is the supervisor's process
// context, cancelled if the supervisor dies.
type StartFunc func(ctx context.Context, sup *gotp.Process) (gotp.PID, error)

// StartInfoFunc is a StartFunc that also returns information about the
// child it started (OTP's {ok, Pid, Info}): the supervisor keeps the
// latest start's info with the child and reports it in ChildInfo.Info.
// Everything else is as for StartFunc; a start that fails or returns
// server.ErrIgnore has no info.
type StartInfoFunc func(ctx context.Context, sup *gotp.Process) (pid gotp.PID, info any, err error)

// ChildSpec declares one child of a supervisor.
type ChildSpec struct {
	// ID names the child within its supervisor; it must be unique and not
	// empty.
	ID string
	// Start starts the child, linked to the supervisor.
	Start StartFunc
	// StartInfo, set instead of Start, starts the child and also returns
	// information about it, reported by WhichChildren (see StartInfoFunc).
	// Exactly one of Start and StartInfo must be set.
	StartInfo StartInfoFunc
	// Restart says when the child is restarted; the zero value is
	// Permanent.
	Restart Restart
	// Significant marks a child whose end may end the supervisor (see
	// Spec.AutoShutdown). A significant child must be Transient or
	// Temporary, and its supervisor's AutoShutdown must not be Never.
	Significant bool
	// Shutdown is how long the child has to stop after it is sent
	// gotp.ErrShutdown before it is killed: a positive duration, BrutalKill
	// or Infinity. Zero means the default: DefaultShutdown for a Worker,
	// Infinity for a Supervisor.
	Shutdown time.Duration
	// Type is Worker (the zero value) or Supervisor.
	Type ChildType
}

func (c *ChildSpec) shutdown() time.Duration {
	if c.Shutdown != 0 {
		return c.Shutdown
	}
	if c.Type == Supervisor {
		return Infinity
	}
	return DefaultShutdown
}

// Spec declares a supervisor: its strategy, its restart intensity and its
// children, started in order.
type Spec struct {
	// Strategy is the restart strategy; the zero value is OneForOne.
	Strategy Strategy
	// Intensity is the number of restarts allowed within Period; one more
	// makes the supervisor stop every child and exit with ErrMaxIntensity
	// (a gotp.ErrShutdown). Zero means DefaultIntensity; NoRestarts (or any
	// negative value) allows none.
	Intensity int
	// Period is the window of Intensity; zero means DefaultPeriod.
	Period time.Duration
	// AutoShutdown makes the supervisor shut itself down, with
	// ErrAutoShutdown, when its significant children end (see
	// AutoShutdown). The zero value is Never.
	AutoShutdown AutoShutdown
	// Children are started in order by Start, and stopped in reverse order.
	Children []ChildSpec
}

// ChildSpec returns a spec that starts this supervisor as a child (of type
// Supervisor, Permanent, shutdown Infinity) of another supervisor, with the
// server options opts (for example server.Named).
func (s Spec) ChildSpec(id string, opts ...server.Option) ChildSpec {
	return ChildSpec{
		ID:   id,
		Type: Supervisor,
		Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
			return StartLink(ctx, sup, s, opts...)
		},
	}
}

// Server returns a Permanent Worker spec that starts a server.Behaviour
// made by newB (called for each start, so that a restart begins with fresh
// state), linked to the supervisor, with the server options opts.
func Server(id string, newB func() server.Behaviour, opts ...server.Option) ChildSpec {
	return ChildSpec{
		ID: id,
		Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
			return server.StartLink(ctx, sup, newB(), opts...)
		},
	}
}

// Func returns a Permanent Worker spec that spawns fn as a function
// process linked to the supervisor, with the spawn options opts. fn should
// return when its process context ends (it then has been stopped).
func Func(id string, fn func(p *gotp.Process) error, opts ...gotp.SpawnOption) ChildSpec {
	return ChildSpec{
		ID: id,
		Start: func(_ context.Context, sup *gotp.Process) (gotp.PID, error) {
			return sup.SpawnLink(fn, opts...)
		},
	}
}

func (s *Spec) intensity() int {
	switch {
	case s.Intensity == 0:
		return DefaultIntensity
	case s.Intensity < 0:
		return 0
	}
	return s.Intensity
}

func (s *Spec) period() time.Duration {
	if s.Period == 0 {
		return DefaultPeriod
	}
	return s.Period
}

func checkFlags(strategy Strategy, period time.Duration, auto AutoShutdown) error {
	if strategy > RestForOne {
		return &SpecError{Reason: fmt.Sprintf("unknown strategy %d", strategy)}
	}
	if period < 0 {
		return &SpecError{Reason: fmt.Sprintf("negative period %v", period)}
	}
	if auto > AllSignificant {
		return &SpecError{Reason: fmt.Sprintf("unknown auto shutdown %d", auto)}
	}
	return nil
}

// checkChild checks a child's spec on its own; checkSignificant checks it
// against its supervisor's AutoShutdown.
func checkChild(c *ChildSpec, dynamic bool) error {
	if c.ID == "" && !dynamic {
		return &SpecError{Reason: "empty child id"}
	}
	switch {
	case c.Start == nil && c.StartInfo == nil:
		return &SpecError{ID: c.ID, Reason: "nil Start"}
	case c.Start != nil && c.StartInfo != nil:
		return &SpecError{ID: c.ID, Reason: "both Start and StartInfo set"}
	}
	if c.Restart > Temporary {
		return &SpecError{ID: c.ID, Reason: fmt.Sprintf("unknown restart type %d", c.Restart)}
	}
	if c.Significant && c.Restart == Permanent {
		return &SpecError{ID: c.ID, Reason: "a significant child cannot be permanent"}
	}
	if c.Type > Supervisor {
		return &SpecError{ID: c.ID, Reason: fmt.Sprintf("unknown child type %d", c.Type)}
	}
	if c.Shutdown < 0 && c.Shutdown != BrutalKill {
		return &SpecError{ID: c.ID, Reason: fmt.Sprintf("invalid shutdown %v", c.Shutdown)}
	}
	return nil
}

func checkSignificant(c *ChildSpec, auto AutoShutdown) error {
	if c.Significant && auto == Never {
		return &SpecError{ID: c.ID, Reason: "a significant child needs an AutoShutdown other than Never"}
	}
	return nil
}
