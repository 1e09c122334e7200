package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// DefaultBuffer is the capacity of a subscription's channel when
// Options.Buffer is zero, as in Wippy's pg.
const DefaultBuffer = 64

// Options configure a scope. The zero value is a working configuration.
type Options struct {
	// Policy is asked before every operation. Nil allows everything
	// (AllowAll).
	Policy Policy

	// Buffer is the capacity of each subscription's channel (Monitor,
	// Events). Zero means DefaultBuffer; a negative value is an error.
	Buffer int
}

// ProcessName returns the local name under which the process of the scope
// id is registered: "pg:" followed by the id. The prefix keeps scope names
// apart from other processes' names.
func ProcessName(id string) string { return "pg:" + id }

// A Scope is an independent namespace of process groups on one node: its
// groups and members are invisible to other scopes. A scope is a process
// (a gen_server registered as ProcessName(id)), so it can be supervised and
// found by its id; its membership tables live beside the process, guarded
// by locks (see the package doc), so that joins and reads never queue
// behind its mailbox.
//
// Processes act on a scope through an Instance (Open). When the scope's
// process exits, for any reason, the scope is closed: every subscription
// is closed, every membership forgotten, and every operation fails with
// ErrScopeClosed.
//
// A Scope is safe for concurrent use by multiple goroutines.
type Scope struct {
	id     string
	n      *gotp.Node
	policy Policy
	buffer int
	pid    gotp.PID
	done   chan struct{}

	// mu is the structure lock. Every change of local membership holds it
	// shared, plus the lock of its process's stripe, and publishes its
	// event (a non-blocking channel send) and its Replicator report before
	// releasing them. Whatever must see every group at rest holds it
	// exclusively: Monitor and Events (so their snapshot is atomic with
	// their subscription), creating and removing groups, subscribing and
	// closing subscriptions, remote changes (Gateway), Release, close.
	// Lock order: mu, then stripes in index order.
	mu     sync.RWMutex
	closed atomic.Bool                           // written with mu held exclusively
	groups map[string]*group                     // the map guarded by mu
	gsubs  map[string]map[*Subscription]struct{} // Monitor subscriptions, by group; guarded by mu
	ssubs  map[*Subscription]struct{}            // Events subscriptions; guarded by mu
	nodes  map[string]map[string]struct{}        // remote node -> groups it has members in; guarded by mu
	rep    Replicator                            // guarded by mu

	// stripes split local processes by PID, so that joins of different
	// processes, even to one group, rarely wait for each other: a
	// process's entry, and its memberships in every group, are guarded by
	// its stripe's lock. Open needs only that lock.
	stripes [nStripes]stripe

	// whichGen counts the changes of which groups have members (here, or
	// anywhere): a group's local or remote joins going from zero or to
	// zero. It is incremented with the lock that guards the change held
	// (a stripe's with mu shared, or mu exclusively), so a reader holding
	// mu shared and every stripe sees it agree with the groups. whichAll
	// and whichLocal cache WhichGroups and WhichLocalGroups, each valid
	// while its gen is whichGen.
	whichGen   atomic.Uint64
	whichAll   atomic.Pointer[whichCache]
	whichLocal atomic.Pointer[whichCache]
}

// whichCache is a sorted list of groups with members, as of a whichGen.
type whichCache struct {
	gen   uint64
	names []string // never modified: callers get a copy
}

type stripe struct {
	mu    sync.Mutex // guards procs, the insts, groups and exited fields of its procs, and group.local[k]
	procs map[gotp.PID]*proc
	_     [48]byte // keep stripes on their own cache lines
}

// lockStripes locks every stripe, in index order.
func (s *Scope) lockStripes() {
	for i := range s.stripes {
		s.stripes[i].mu.Lock()
	}
}

func (s *Scope) unlockStripes() {
	for i := range s.stripes {
		s.stripes[i].mu.Unlock()
	}
}

// proc is what the scope knows of one local process: its memberships and
// its open instances. It is in its stripe while either is non-empty, and
// the scope holds one MonitorFunc on the process meanwhile. Its fields
// other than pid and ref are guarded by its stripe's lock.
type proc struct {
	pid    gotp.PID
	ref    gotp.Ref // of the MonitorFunc; set before the proc is in its stripe
	groups map[string]int
	insts  []*Instance // open instances, usually one
	exited bool        // procExit has run
}

// Start starts the scope id on node n, registered as ProcessName(id), and
// returns it once it runs. It fails with ErrInvalid for an empty id or a
// negative Buffer, with *server.AlreadyStartedError (errors.Is
// server.ErrAlreadyStarted) when a scope with that id already runs, and
// with gotp.ErrNodeStopped.
func Start(ctx context.Context, n *gotp.Node, id string, opts Options) (*Scope, error) {
	return start(ctx, n, id, opts)
}

// StartLink starts the scope as Start does, linked to the calling process
// parent, which becomes its parent: an exit signal from the parent stops
// it. This is the start function a supervisor uses.
func StartLink(ctx context.Context, parent *gotp.Process, id string, opts Options) (*Scope, error) {
	if parent == nil {
		return nil, invalid("nil parent process")
	}
	return start(ctx, parent.Node(), id, opts, server.LinkTo(parent.Self()), server.TrapExit(true))
}

func start(ctx context.Context, n *gotp.Node, id string, opts Options, sopts ...server.Option) (*Scope, error) {
	if n == nil {
		return nil, invalid("nil node")
	}
	if id == "" {
		return nil, invalid("empty scope id")
	}
	if opts.Buffer < 0 {
		return nil, invalid(fmt.Sprintf("negative buffer %d", opts.Buffer))
	}
	s := &Scope{
		id:     id,
		n:      n,
		policy: opts.Policy,
		buffer: opts.Buffer,
		done:   make(chan struct{}),
		groups: make(map[string]*group),
		gsubs:  make(map[string]map[*Subscription]struct{}),
		ssubs:  make(map[*Subscription]struct{}),
		nodes:  make(map[string]map[string]struct{}),
	}
	for i := range s.stripes {
		s.stripes[i].procs = make(map[gotp.PID]*proc)
	}
	if s.policy == nil {
		s.policy = AllowAll{}
	}
	if s.buffer == 0 {
		s.buffer = DefaultBuffer
	}
	sopts = append(sopts, server.Named(ProcessName(id)))
	if _, err := server.Start(ctx, n, &scopeServer{s: s}, sopts...); err != nil {
		return nil, err
	}
	return s, nil
}

// scopeServer is the scope's process. It holds no state of its own: it
// gives the scope a PID, a name and a lifetime, and answers Lookup.
type scopeServer struct {
	server.Defaults
	s *Scope
}

type lookupRequest struct{}

func (b *scopeServer) Init(_ context.Context, p *gotp.Process) error {
	s := b.s
	s.pid = p.Self()
	p.SetValue("pg.scope", s.id)
	// Fires once the process is dead, whatever ended it (Terminate does
	// not run on a kill).
	p.Node().MonitorFunc(s.pid, func(gotp.Down) { s.close() })
	return nil
}

func (b *scopeServer) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	if _, ok := req.(lookupRequest); ok {
		return b.s, nil
	}
	return b.Defaults.HandleCall(p, from, req)
}

// Lookup returns the scope running under id on node n. It asks the scope's
// process (one call), so it waits at most until ctx ends. It fails with
// ErrNoScope when no scope runs under id.
func Lookup(ctx context.Context, n *gotp.Node, id string) (*Scope, error) {
	if n == nil {
		return nil, invalid("nil node")
	}
	if id == "" {
		return nil, invalid("empty scope id")
	}
	s, err := server.Call[*Scope](ctx, n, gotp.Name(ProcessName(id)), lookupRequest{})
	if err != nil {
		if errors.Is(err, gotp.ErrNoProc) {
			return nil, fmt.Errorf("%w: %q", ErrNoScope, id)
		}
		return nil, fmt.Errorf("pg: lookup %q: %w", id, err)
	}
	return s, nil
}

// Open finds the scope id on p's node (Lookup) and opens an instance bound
// to p (Scope.Open). It is Wippy's pg.open(id).
func Open(ctx context.Context, p *gotp.Process, id string) (*Instance, error) {
	if p == nil {
		return nil, invalid("nil process")
	}
	s, err := Lookup(ctx, p.Node(), id)
	if err != nil {
		return nil, err
	}
	return s.Open(p)
}

// ID returns the scope id.
func (s *Scope) ID() string { return s.id }

// PID returns the scope's process.
func (s *Scope) PID() gotp.PID { return s.pid }

// Node returns the node the scope runs on.
func (s *Scope) Node() *gotp.Node { return s.n }

// Done returns a channel that is closed once the scope is closed (its
// process has exited and every subscription is closed).
func (s *Scope) Done() <-chan struct{} { return s.done }

// Stop stops the scope's process with reason nil and waits until the scope
// is closed or ctx ends (then it returns ctx's error). Stopping a closed
// scope returns nil.
func (s *Scope) Stop(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := server.Stop(ctx, s.n, s.pid, nil); err != nil && !errors.Is(err, gotp.ErrNoProc) {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open opens an instance of the scope bound to the process p: its
// operations act for p, whatever goroutine calls them. p may open several
// instances; they share p's memberships (which belong to the process, not
// to the instance). The instance is released when p exits.
//
// Open asks the policy for PermOpen on the scope id. It fails with
// *DeniedError, with ErrScopeClosed, with ErrInvalid for a nil p, and with
// an error wrapping gotp.ErrNoProc when p has already exited.
func (s *Scope) Open(p *gotp.Process) (*Instance, error) {
	if p == nil {
		return nil, invalid("nil process")
	}
	pid := p.Self()
	if !s.policy.Allow(PermOpen, s.id, pid) {
		return nil, &DeniedError{Permission: PermOpen, Resource: s.id, PID: pid}
	}
	inst := &Instance{s: s, p: p, pid: pid}
	st := &s.stripes[stripeOf(pid)]
	// Monitor p before its entry is visible, so that the entry never
	// exists without its monitor. If p is already dead, MonitorFunc calls
	// procExit at once, on this goroutine, and it marks e exited. If p
	// already has an entry (a second instance), this monitor is dropped:
	// the common case, one instance per process, takes the stripe's lock
	// once.
	e := &proc{pid: pid}
	e.ref = s.n.MonitorFunc(pid, func(gotp.Down) { s.procExit(e) })
	st.mu.Lock()
	switch cur := st.procs[pid]; {
	case s.closed.Load():
		st.mu.Unlock()
		s.n.Demonitor(e.ref, pid)
		return nil, ErrScopeClosed
	case cur != nil:
		cur.insts = append(cur.insts, inst)
		inst.e = cur
		st.mu.Unlock()
		s.n.Demonitor(e.ref, pid)
		return inst, nil
	case e.exited:
		st.mu.Unlock()
		return nil, fmt.Errorf("pg: open %q: %w", s.id, gotp.ErrNoProc)
	}
	e.insts = append(e.insts, inst)
	inst.e = e
	st.procs[pid] = e
	st.mu.Unlock()
	return inst, nil
}

// procExit is called (through MonitorFunc) when the process of e has
// exited: it leaves every group at once, and its instances are released.
func (s *Scope) procExit(e *proc) {
	k := stripeOf(e.pid)
	st := &s.stripes[k]
	s.mu.RLock()
	st.mu.Lock()
	e.exited = true
	if s.closed.Load() || st.procs[e.pid] != e {
		st.mu.Unlock()
		s.mu.RUnlock()
		return // never published, already dropped, or the scope is closed
	}
	delete(st.procs, e.pid)
	var emptied []string
	for name, count := range e.groups {
		g := s.groups[name]
		s.leaveLocalLocked(e, name, g, k, count)
		if g.empty() {
			emptied = append(emptied, name)
		}
	}
	insts := e.insts
	e.insts = nil
	subs := false
	for _, inst := range insts {
		inst.released.Store(true)
		subs = subs || len(inst.subs) > 0
	}
	st.mu.Unlock()
	s.mu.RUnlock()
	if len(emptied) > 0 || subs {
		s.mu.Lock()
		s.dropEmptyLocked(emptied)
		for _, inst := range insts {
			inst.closeSubsLocked()
		}
		s.mu.Unlock()
	}
}

// dropEmptyLocked removes the named groups that are (still) empty. The
// caller holds mu exclusively.
func (s *Scope) dropEmptyLocked(names []string) {
	for _, name := range names {
		if g := s.groups[name]; g != nil && g.empty() {
			delete(s.groups, name)
		}
	}
}

// close closes the scope once its process has exited.
func (s *Scope) close() {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return
	}
	s.closed.Store(true)
	s.whichGen.Add(1)
	var procs []*proc
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		for _, e := range st.procs {
			procs = append(procs, e)
			for _, inst := range e.insts {
				inst.released.Store(true)
			}
			e.insts = nil
		}
		clear(st.procs)
		st.mu.Unlock()
	}
	for _, subs := range s.gsubs {
		for sub := range subs {
			sub.closeLocked(false)
		}
	}
	for sub := range s.ssubs {
		sub.closeLocked(false)
	}
	rep := s.rep
	s.rep = nil
	s.groups, s.gsubs, s.ssubs, s.nodes = nil, nil, nil, nil
	s.mu.Unlock()

	for _, e := range procs {
		s.n.Demonitor(e.ref, e.pid)
	}
	if rep != nil {
		rep.Detached()
	}
	close(s.done)
}

// Info describes a scope at one moment, for introspection.
type Info struct {
	ID            string
	PID           gotp.PID
	Closed        bool
	Groups        int      // groups with at least one member, anywhere
	LocalGroups   int      // groups with at least one local member
	LocalJoins    int      // local memberships, a process joined k times counted k times
	RemoteJoins   int      // remote memberships, counted the same way
	Processes     int      // local processes with a membership or an open instance
	Subscriptions int      // open Monitor and Events subscriptions
	RemoteNodes   []string // nodes with members in this scope, sorted
}

// Info returns the scope's sizes. It is not subject to the policy.
func (s *Scope) Info() Info {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.lockStripes()
	defer s.unlockStripes()
	in := Info{ID: s.id, PID: s.pid, Closed: s.closed.Load()}
	for i := range s.stripes {
		in.Processes += len(s.stripes[i].procs)
	}
	for _, g := range s.groups {
		if g.empty() {
			continue
		}
		in.Groups++
		if lj := int(g.localJoins.Load()); lj > 0 {
			in.LocalGroups++
			in.LocalJoins += lj
		}
		in.RemoteJoins += g.remoteJoins
	}
	for _, subs := range s.gsubs {
		in.Subscriptions += len(subs)
	}
	in.Subscriptions += len(s.ssubs)
	for node := range s.nodes {
		in.RemoteNodes = append(in.RemoteNodes, node)
	}
	slices.Sort(in.RemoteNodes)
	return in
}
