package gotp

import (
	"cmp"
	"slices"
	"time"
)

// Status is what a process is doing, for introspection.
type Status string

// Process statuses, as Erlang's process_info reports them.
const (
	StatusRunning Status = "running" // handling a message, or running its function
	StatusWaiting Status = "waiting" // waiting for a message (or idle, for a handler)
	StatusExited  Status = "exited"
)

// ProcessInfo describes one process at one moment.
type ProcessInfo struct {
	PID         PID
	Name        string    // local name, if any
	Behaviour   string    // label given at spawn (for example "server")
	Status      Status    // what it is doing
	MailboxLen  int       // messages waiting
	MailboxMax  int       // the mailbox limit (0: unbounded, the default); see Process.SetMailboxLimit
	Overflow    Overflow  // the limit's policy (0 when unbounded)
	Dropped     uint64    // messages dropped by an OverflowDrop limit, over the process's life
	Handled     uint64    // messages received or handled so far
	Links       []PID     // linked processes
	Monitors    []PID     // processes this one monitors
	MonitoredBy []PID     // processes that monitor this one (zero PIDs for MonitorFunc watchers)
	TrapExit    bool      // whether it traps exits
	Started     time.Time // when it was spawned
	Handler     bool      // a handler-mode process that holds no goroutine while idle (not Resident)
	Resident    bool      // a handler-mode process with a goroutine for life (see ProcessStack)
	Label       string    // set by Process.SetLabel
}

// mailboxLenLocked returns the number of messages delivered and not yet
// taken (zero once the process is dead: its mailbox is dropped). p.mu must
// be held; the receiver may take a message meanwhile, so the figure is a
// moment's.
func (p *Process) mailboxLenLocked() int {
	if p.dead.Load() {
		return 0
	}
	if h := p.handled.Load(); h < p.delivered {
		return int(p.delivered - h)
	}
	return 0
}

// ProcessInfo returns a snapshot of the process pid, or false if it is not
// a live process of this node. It takes the process's lock briefly and
// allocates only the returned slices.
func (n *Node) ProcessInfo(pid PID) (ProcessInfo, bool) {
	p := n.lookup(pid)
	if p == nil {
		return ProcessInfo{}, false
	}
	return p.info(), true
}

// Info returns a snapshot of this process, as Node.ProcessInfo.
func (p *Process) Info() ProcessInfo { return p.info() }

func (p *Process) info() ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := ProcessInfo{
		PID:        p.Self(),
		Name:       p.name,
		MailboxLen: p.mailboxLenLocked(),
		Handled:    p.handled.Load(),
		TrapExit:   p.trap,
		Started:    time.Unix(0, p.started),
		Handler:    p.mode == modeHandler && !p.resident,
		Resident:   p.resident,
	}
	if p.extra != nil {
		in.Label = p.extra.label
	}
	in.Behaviour = p.label
	if p.extra != nil && p.extra.mbox != nil {
		m := p.extra.mbox
		in.MailboxMax, in.Overflow, in.Dropped = m.max, m.policy, m.dropped
	}
	switch {
	case p.dead.Load():
		in.Status = StatusExited
	case p.mode == modeFunc && p.waiting, p.mode == modeHandler && !p.running:
		in.Status = StatusWaiting
	default:
		in.Status = StatusRunning
	}
	for l := range p.links.all {
		in.Links = append(in.Links, l)
	}
	for _, t := range p.monitoring.all {
		in.Monitors = append(in.Monitors, t)
	}
	for _, w := range p.monitors.all {
		in.MonitoredBy = append(in.MonitoredBy, w.pid)
	}
	byID := func(a, b PID) int { return cmp.Compare(a.id, b.id) }
	slices.SortFunc(in.Links, byID)
	slices.SortFunc(in.Monitors, byID)
	slices.SortFunc(in.MonitoredBy, byID)
	return in
}

// ProcessHandler returns the Handler of the live local handler-mode process
// pid, and whether pid is such a process (see Process.Handler): how a
// behaviour finds the state of another process of its kind, to follow a
// chain of calls between servers for example. It takes no lock and is safe
// from any goroutine.
func (n *Node) ProcessHandler(pid PID) (Handler, bool) {
	p := n.lookup(pid)
	if p == nil || p.handler == nil {
		return nil, false
	}
	return p.handler, true
}

// ProcessValue returns the value stored under key in the process
// dictionary of the live local process pid (see Process.SetValue), and
// whether pid is such a process. It lets introspection (an observer, a
// supervisor tree walk) read what a behaviour publishes without a message
// round trip. It takes the process's lock briefly and is safe from any
// goroutine.
func (n *Node) ProcessValue(pid PID, key any) (any, bool) {
	p := n.lookup(pid)
	if p == nil {
		return nil, false
	}
	return p.Value(key), true
}
