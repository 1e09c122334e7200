package pg

import (
	"slices"
	"sync/atomic"

	"github.com/gotp/gotp"
)

// An Instance is a scope opened by one process (Scope.Open): every
// operation acts for that process. It is Wippy's pg instance.
//
// An instance is safe for concurrent use by multiple goroutines; the
// operations act for its process whichever goroutine calls them. After
// Release, or once its process has exited, every operation fails with
// ErrReleased; once the scope is closed, with ErrScopeClosed.
//
// Every operation first asks the scope's Policy (see the Perm constants for
// the permission and resource of each) and fails with *DeniedError, having
// changed nothing, if it is refused. Group names must not be empty
// (ErrInvalid).
type Instance struct {
	s   *Scope
	p   *gotp.Process
	pid gotp.PID

	released atomic.Bool // set with s.mu held
	e        *proc       // guarded by s.mu
	subs     map[*Subscription]struct{}
}

// PID returns the process the instance acts for.
func (i *Instance) PID() gotp.PID { return i.pid }

// Scope returns the scope the instance was opened on.
func (i *Instance) Scope() *Scope { return i.s }

// Release frees the instance at once: its subscriptions are closed (queued
// events discarded, as Subscription.Close) and every later operation fails
// with ErrReleased. The process's memberships are not changed: they belong
// to the process, which stays in its groups until it leaves them or exits.
// Release is idempotent and reports whether this call released the
// instance. It is also done automatically when the process exits.
func (i *Instance) Release() bool {
	s := i.s
	s.mu.Lock()
	st := &s.stripes[stripeOf(i.pid)]
	st.mu.Lock()
	if i.released.Load() {
		st.mu.Unlock()
		s.mu.Unlock()
		return false
	}
	i.released.Store(true)
	e := i.e
	e.insts = slices.DeleteFunc(e.insts, func(x *Instance) bool { return x == i })
	drop := len(e.insts) == 0 && len(e.groups) == 0 && st.procs[e.pid] == e
	if drop {
		delete(st.procs, e.pid)
	}
	st.mu.Unlock()
	i.closeSubsLocked()
	s.mu.Unlock()
	if drop {
		// Neither instances nor memberships left: stop watching the process.
		s.n.Demonitor(e.ref, e.pid)
	}
	return true
}

// closeSubsLocked closes the instance's subscriptions. The caller holds
// Scope.mu exclusively.
func (i *Instance) closeSubsLocked() {
	for sub := range i.subs {
		sub.closeLocked(false)
	}
	i.subs = nil
}

// stateErr returns the error every operation of a released instance or a
// closed scope returns, or nil. It is authoritative when the caller holds
// Scope.mu (for the scope) and the instance's stripe lock or Scope.mu
// exclusively (for the instance).
func (i *Instance) stateErr() error {
	switch {
	case i.s.closed.Load():
		return ErrScopeClosed
	case i.released.Load():
		return ErrReleased
	}
	return nil
}

func (i *Instance) allow(perm Permission, resource string) error {
	if !i.s.policy.Allow(perm, resource, i.pid) {
		return &DeniedError{Permission: perm, Resource: resource, PID: i.pid}
	}
	return nil
}

func checkGroups(groups []string) error {
	if len(groups) == 0 {
		return invalid("no group")
	}
	for _, g := range groups {
		if g == "" {
			return invalid("empty group name")
		}
	}
	return nil
}

// checkBatch checks a batch before any of it is done: the instance is
// usable, every group name is valid, and the policy allows perm on each.
func (i *Instance) checkBatch(perm Permission, groups []string) error {
	if err := i.stateErr(); err != nil {
		return err
	}
	if err := checkGroups(groups); err != nil {
		return err
	}
	for _, g := range groups {
		if err := i.allow(perm, g); err != nil {
			return err
		}
	}
	return nil
}

// Join makes the process a member of each group (one or a batch). A
// process may join a group several times; it stays a member until it has
// left as many times. A batch is all or nothing: every group is checked
// (name, PermJoin) before any is joined, and all are joined at once, with
// one "member joined" event per group named.
func (i *Instance) Join(groups ...string) error {
	if err := i.checkBatch(PermJoin, groups); err != nil {
		return err
	}
	s := i.s
	k := stripeOf(i.pid)
	st := &s.stripes[k]
	var buf [4]*group
	gs := buf[:0]
	created := false
	for {
		s.mu.RLock()
		if err := i.stateErr(); err != nil {
			s.mu.RUnlock()
			if created {
				s.dropEmpty(groups)
			}
			return err
		}
		gs = gs[:0]
		for _, name := range groups {
			g := s.groups[name]
			if g == nil {
				break
			}
			gs = append(gs, g)
		}
		if len(gs) < len(groups) {
			// A group to create: that needs mu exclusively.
			s.mu.RUnlock()
			s.createGroups(groups)
			created = true
			continue
		}
		st.mu.Lock()
		if err := i.stateErr(); err != nil {
			st.mu.Unlock()
			s.mu.RUnlock()
			if created {
				s.dropEmpty(groups)
			}
			return err
		}
		for j, name := range groups {
			s.joinLocalLocked(i.e, name, gs[j], k)
		}
		st.mu.Unlock()
		s.mu.RUnlock()
		return nil
	}
}

// dropEmpty removes the named groups that are empty.
func (s *Scope) dropEmpty(names []string) {
	s.mu.Lock()
	s.dropEmptyLocked(names)
	s.mu.Unlock()
}

// createGroups adds the named groups that do not exist yet, empty.
func (s *Scope) createGroups(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	for _, name := range names {
		if s.groups[name] == nil {
			s.groups[name] = &group{}
		}
	}
}

// Leave leaves each group once (one or a batch). A batch is best effort:
// it leaves the groups the process is a member of and fails with
// *NotJoinedError only when it was a member of none of them. Every group is
// checked (name, PermLeave) before any is left.
func (i *Instance) Leave(groups ...string) error {
	if err := i.checkBatch(PermLeave, groups); err != nil {
		return err
	}
	s := i.s
	k := stripeOf(i.pid)
	st := &s.stripes[k]
	s.mu.RLock()
	st.mu.Lock()
	if err := i.stateErr(); err != nil {
		st.mu.Unlock()
		s.mu.RUnlock()
		return err
	}
	left := 0
	var emptied []string
	for _, name := range groups {
		if i.e.groups[name] > 0 {
			g := s.groups[name]
			s.leaveLocalLocked(i.e, name, g, k, 1)
			left++
			if g.empty() {
				emptied = append(emptied, name)
			}
		}
	}
	st.mu.Unlock()
	s.mu.RUnlock()
	if len(emptied) > 0 {
		s.dropEmpty(emptied)
	}
	if left == 0 {
		return &NotJoinedError{Groups: slices.Clone(groups)}
	}
	return nil
}

// Members returns the members of group on every node known to the scope,
// in no particular order; a process that joined k times appears k times.
// An unknown group has no members (an empty, non-nil slice).
func (i *Instance) Members(group string) ([]gotp.PID, error) {
	return i.members(PermGetMembers, group, false)
}

// LocalMembers returns the members of group on this node, as Members.
func (i *Instance) LocalMembers(group string) ([]gotp.PID, error) {
	return i.members(PermGetLocalMembers, group, true)
}

func (i *Instance) members(perm Permission, group string, local bool) ([]gotp.PID, error) {
	if err := i.stateErr(); err != nil {
		return nil, err
	}
	if group == "" {
		return nil, invalid("empty group name")
	}
	if err := i.allow(perm, group); err != nil {
		return nil, err
	}
	s := i.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := i.stateErr(); err != nil {
		return nil, err
	}
	g := s.groups[group]
	if g == nil {
		return []gotp.PID{}, nil
	}
	s.lockStripes()
	defer s.unlockStripes()
	if local {
		return g.appendLocal(make([]gotp.PID, 0, g.localJoins.Load())), nil
	}
	return g.appendAll(make([]gotp.PID, 0, g.joins())), nil
}

// WhichGroups returns the groups that have at least one member on any
// node, sorted, in a new slice the caller may modify.
func (i *Instance) WhichGroups() ([]string, error) { return i.which(PermWhichGroups, false) }

// WhichLocalGroups returns the groups that have at least one member on this
// node, sorted.
func (i *Instance) WhichLocalGroups() ([]string, error) {
	return i.which(PermWhichLocalGroups, true)
}

func (i *Instance) which(perm Permission, local bool) ([]string, error) {
	if err := i.stateErr(); err != nil {
		return nil, err
	}
	if err := i.allow(perm, i.s.id); err != nil {
		return nil, err
	}
	s := i.s
	cache := &s.whichAll
	if local {
		cache = &s.whichLocal
	}
	// The groups with members change far less often than they are asked
	// for (a chat's WHO): while whichGen has not moved, the last answer
	// is still right.
	if c := cache.Load(); c != nil && c.gen == s.whichGen.Load() {
		return slices.Clone(c.names), nil
	}
	s.mu.RLock()
	if err := i.stateErr(); err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	s.lockStripes()
	gen := s.whichGen.Load()
	out := make([]string, 0, len(s.groups))
	for name, g := range s.groups {
		if local && g.localJoins.Load() > 0 || !local && !g.empty() {
			out = append(out, name)
		}
	}
	s.unlockStripes()
	s.mu.RUnlock()
	slices.Sort(out)
	// A change since gen makes this entry stale at once (its gen is old);
	// storing it over a newer one only costs the next caller a rebuild.
	cache.Store(&whichCache{gen: gen, names: out})
	return slices.Clone(out), nil
}

// Message is what a broadcast delivers to each member: the payload under a
// topic, from the process that broadcast it.
type Message struct {
	Scope   string   // the scope id
	Group   string   // the group broadcast to
	Topic   string   // the broadcaster's topic
	Payload any      // the broadcaster's payload, shared by every member: do not modify it
	From    gotp.PID // the process that broadcast
}

// Broadcast sends Message{Scope, Group, Topic, Payload, From} from the
// process to every member of group on every node: each member process
// receives it once, however many times it joined. Members on other nodes
// are reached through the scope's Replicator, with one message per node.
// Broadcasting to a group without members is not an error; an empty group
// name or an empty topic is (ErrInvalid), and nothing is sent. Broadcast
// never blocks on members: sends are asynchronous, as gotp.Node.Send.
func (i *Instance) Broadcast(group, topic string, payload any) error {
	return i.broadcast(PermBroadcast, group, topic, payload, false)
}

// BroadcastLocal is Broadcast to the members on this node only.
func (i *Instance) BroadcastLocal(group, topic string, payload any) error {
	return i.broadcast(PermBroadcastLocal, group, topic, payload, true)
}

func (i *Instance) broadcast(perm Permission, group, topic string, payload any, local bool) error {
	if err := i.stateErr(); err != nil {
		return err
	}
	if group == "" {
		return invalid("empty group name")
	}
	if topic == "" {
		return invalid("empty topic")
	}
	if err := i.allow(perm, group); err != nil {
		return err
	}
	s := i.s
	s.mu.RLock()
	if err := i.stateErr(); err != nil {
		s.mu.RUnlock()
		return err
	}
	pids, nodes, rep := s.targetsRLocked(group, local)
	s.mu.RUnlock()
	msg := Message{Scope: s.id, Group: group, Topic: topic, Payload: payload, From: i.pid}
	var boxed any = msg // one allocation, shared by every send
	// Members are woken together (gotp's Batch): idle handler-mode
	// members are then handled by a few goroutines in turn instead of one
	// goroutine started for each.
	i.p.Batch(func(b *gotp.Batch) {
		for _, pid := range pids {
			b.Send(pid, boxed)
		}
	})
	for _, node := range nodes {
		rep.Broadcast(node, msg)
	}
	return nil
}

// targetsRLocked returns the distinct local members and, unless local,
// the remote nodes (with the replicator) a broadcast to group goes to. The
// caller holds mu shared.
func (s *Scope) targetsRLocked(group string, local bool) (pids []gotp.PID, nodes []string, rep Replicator) {
	g := s.groups[group]
	if g == nil {
		return nil, nil, nil
	}
	if !local && s.rep != nil && len(g.remote) > 0 {
		rep = s.rep
		nodes = make([]string, 0, len(g.remote))
		for node := range g.remote {
			nodes = append(nodes, node)
		}
	}
	if p := g.bcast.Load(); p != nil {
		return *p, nodes, rep
	}
	s.lockStripes()
	pids = g.distinctLocal()
	s.unlockStripes()
	return pids, nodes, rep
}

// Monitor subscribes to the "member joined" and "member left" events of
// group and returns the subscription with the group's current members (on
// every node, as Members). The snapshot and the subscription are atomic: no
// join or leave falls between them, so the snapshot with the events that
// follow is exactly the membership. The subscription belongs to the
// instance: Release and the process's exit close it.
func (i *Instance) Monitor(group string) (*Subscription, []gotp.PID, error) {
	if err := i.stateErr(); err != nil {
		return nil, nil, err
	}
	if group == "" {
		return nil, nil, invalid("empty group name")
	}
	if err := i.allow(PermMonitor, group); err != nil {
		return nil, nil, err
	}
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := i.stateErr(); err != nil {
		return nil, nil, err
	}
	sub := i.newSubLocked(group, false)
	subs := s.gsubs[group]
	if subs == nil {
		subs = make(map[*Subscription]struct{})
		s.gsubs[group] = subs
	}
	subs[sub] = struct{}{}
	members := []gotp.PID{}
	if g := s.groups[group]; g != nil {
		members = g.appendAll(make([]gotp.PID, 0, g.joins()))
	}
	return sub, members, nil
}

// Events subscribes to the events of every group of the scope and returns
// the subscription with a snapshot of every group's members (as Members),
// atomic with it as Monitor's.
func (i *Instance) Events() (*Subscription, map[string][]gotp.PID, error) {
	if err := i.stateErr(); err != nil {
		return nil, nil, err
	}
	if err := i.allow(PermEvents, i.s.id); err != nil {
		return nil, nil, err
	}
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := i.stateErr(); err != nil {
		return nil, nil, err
	}
	sub := i.newSubLocked("", true)
	s.ssubs[sub] = struct{}{}
	snap := make(map[string][]gotp.PID, len(s.groups))
	for name, g := range s.groups {
		if !g.empty() {
			snap[name] = g.appendAll(make([]gotp.PID, 0, g.joins()))
		}
	}
	return sub, snap, nil
}

func (i *Instance) newSubLocked(group string, all bool) *Subscription {
	sub := &Subscription{s: i.s, inst: i, group: group, all: all, ch: make(chan Event, i.s.buffer)}
	if i.subs == nil {
		i.subs = make(map[*Subscription]struct{})
	}
	i.subs[sub] = struct{}{}
	return sub
}

// joinLocalLocked records one join of e's process to g (named name). The
// caller holds mu shared and the lock of e's stripe k.
func (s *Scope) joinLocalLocked(e *proc, name string, g *group, k int) {
	m := g.local[k]
	if m == nil {
		m = &memberSet{}
		g.local[k] = m
	}
	if m.add(e.pid, 1) {
		g.bcast.Store(nil)
	}
	if g.localJoins.Add(1) == 1 {
		s.whichGen.Add(1)
	}
	if e.groups == nil {
		e.groups = make(map[string]int)
	}
	e.groups[name]++
	if s.watchedLocked(name) || s.rep != nil {
		pids := []gotp.PID{e.pid}
		s.publishLocked(MemberJoined, name, pids)
		if s.rep != nil {
			s.rep.Joined(name, pids)
		}
	}
}

// leaveLocalLocked records times leaves of e's process from g (named
// name); e must be a member at least times times. The caller holds mu
// shared and the lock of e's stripe k. If g is left empty, the caller
// removes it (dropEmptyLocked) once it holds mu exclusively.
func (s *Scope) leaveLocalLocked(e *proc, name string, g *group, k, times int) {
	n, gone := g.local[k].remove(e.pid, times)
	if gone {
		g.bcast.Store(nil)
	}
	if n > 0 && g.localJoins.Add(int64(-n)) == 0 {
		s.whichGen.Add(1)
	}
	if e.groups[name] -= n; e.groups[name] <= 0 {
		delete(e.groups, name)
	}
	if s.watchedLocked(name) || s.rep != nil {
		pids := repeat(e.pid, n)
		s.publishLocked(MemberLeft, name, pids)
		if s.rep != nil {
			s.rep.Left(name, pids)
		}
	}
}
