package supervisor

import (
	"time"

	"github.com/gotp/gotp"
)

// Info describes a supervisor at one moment, for introspection.
type Info struct {
	PID       gotp.PID
	Strategy  Strategy // OneForOne for a dynamic supervisor
	Dynamic   bool
	Intensity int
	Period    time.Duration
	// Restarts counts the restarts the supervisor has made since it
	// started (each counted against its intensity).
	Restarts uint64
	// StartFailures counts the child starts that failed since it started
	// (restarts, StartChild, RestartChild, StartDynamicChild).
	StartFailures uint64
	Children      []ChildInfo
}

// Inspect returns a snapshot of the supervisor dest without a message round
// trip: it reads what the supervisor publishes in its process dictionary,
// under a lock the supervisor holds only while it updates its bookkeeping
// (never while a child starts or stops); Inspect holds it only to copy. It reports false if dest is not a
// live supervisor of this package on node n. Safe from any goroutine; it
// copies the children, so it costs O(children).
func Inspect(n *gotp.Node, dest gotp.Dest) (Info, bool) {
	pid, ok := dest.Resolve(n)
	if !ok {
		return Info{}, false
	}
	v, ok := n.ProcessValue(pid, infoKey{})
	s, isSup := v.(*sup)
	if !ok || !isSup {
		return Info{}, false
	}
	s.mu.Lock()
	in := Info{
		PID:           pid,
		Strategy:      s.strategy,
		Dynamic:       s.dynamic,
		Intensity:     s.intensity,
		Period:        s.period,
		Restarts:      s.restarts,
		StartFailures: s.failures,
		Children:      s.whichUnsorted(),
	}
	s.mu.Unlock()
	sortDynamic(in.Children, in.Dynamic) // outside the lock: the supervisor need not wait
	return in, true
}

// Tree returns Inspect of sup with, for each running child of type
// Supervisor, its own subtree in ChildInfo.Sub, recursively. Subtrees are
// read one supervisor at a time, so a tree that changes meanwhile may show
// a child supervisor that has just been replaced (its Sub is then nil).
func Tree(n *gotp.Node, sup gotp.Dest) (Info, bool) {
	in, ok := Inspect(n, sup)
	if !ok {
		return in, false
	}
	for i := range in.Children {
		c := &in.Children[i]
		if c.Type != Supervisor || c.State != ChildRunning {
			continue
		}
		if sub, ok := Tree(n, c.PID); ok {
			c.Sub = &sub
		}
	}
	return in, true
}

// State is how a supervisor shows itself in its crash report and to
// server.FormatState: a summary, not its bookkeeping (which Inspect
// reads, under a lock).
type State struct {
	Strategy  Strategy
	Dynamic   bool
	Intensity int
	Period    time.Duration
	Children  int // children known: running, restarting or not running
	Running   int
	Restarts  uint64
}

// FormatState returns the supervisor's State (server.StateFormatter). It
// runs as the supervisor, which alone writes what it reads.
func (s *sup) FormatState() any {
	st := State{
		Strategy:  s.strategy,
		Dynamic:   s.dynamic,
		Intensity: s.intensity,
		Period:    s.period,
		Running:   s.byPID.len(),
		Restarts:  s.restarts,
	}
	if s.dynamic {
		st.Children = st.Running + len(s.dynRestarting)
	} else {
		st.Children = len(s.children)
	}
	return st
}
