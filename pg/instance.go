package pg

import (
	"slices"
	"sync/atomic"

	"github.com/gotp/gotp"
)

// An Instance is a scope opened by one process (Scope.Open): every
// operation acts for that process. It is the seed's pg.Instance.
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
	if i.released.Load() {
		s.mu.Unlock()
		return false
	}
	s.releaseInstLocked(i)
	e := i.e
	sh := s.shard(e.pid)
	sh.mu.Lock()
	delete(e.insts, i)
	drop := len(e.insts) == 0 && len(e.groups) == 0 && sh.m[e.pid] == e
	if drop {
		delete(sh.m, e.pid)
	}
	sh.mu.Unlock()
	s.mu.Unlock()
	if drop {
		// Neither instances nor memberships left: stop watching the process.
		s.n.Demonitor(e.ref, e.pid)
	}
	return true
}

// releaseInstLocked marks inst released and closes its subscriptions.
func (s *Scope) releaseInstLocked(inst *Instance) {
	if inst.released.Load() {
		return
	}
	inst.released.Store(true)
	for sub := range inst.subs {
		sub.closeLocked(false)
	}
	inst.subs = nil
}

// stateLocked returns the error every operation of a released instance or
// a closed scope returns.
func (i *Instance) stateLocked() error {
	if i.released.Load() {
		if i.s.closed.Load() {
			return ErrScopeClosed
		}
		return ErrReleased
	}
	if i.s.closed.Load() {
		return ErrScopeClosed
	}
	return nil
}

// precheck fails fast, before the policy is asked, for a released
// instance. The authoritative check is stateLocked, under the lock.
func (i *Instance) precheck() error {
	if i.released.Load() {
		i.s.mu.RLock()
		defer i.s.mu.RUnlock()
		return i.stateLocked()
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

// Join makes the process a member of each group (one or a batch). A
// process may join a group several times; it stays a member until it has
// left as many times. A batch is all or nothing: every group is checked
// (name, PermJoin) before any is joined, and all are joined at once, with
// one "member joined" event per group named.
func (i *Instance) Join(groups ...string) error {
	if err := i.precheck(); err != nil {
		return err
	}
	if err := checkGroups(groups); err != nil {
		return err
	}
	for _, g := range groups {
		if err := i.allow(PermJoin, g); err != nil {
			return err
		}
	}
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := i.stateLocked(); err != nil {
		return err
	}
	for _, g := range groups {
		s.joinLocalLocked(i.e, g)
	}
	return nil
}

// Leave leaves each group once (one or a batch). A batch is best effort:
// it leaves the groups the process is a member of and fails with
// *NotJoinedError only when it was a member of none of them. Every group is
// checked (name, PermLeave) before any is left.
func (i *Instance) Leave(groups ...string) error {
	if err := i.precheck(); err != nil {
		return err
	}
	if err := checkGroups(groups); err != nil {
		return err
	}
	for _, g := range groups {
		if err := i.allow(PermLeave, g); err != nil {
			return err
		}
	}
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := i.stateLocked(); err != nil {
		return err
	}
	left := 0
	for _, g := range groups {
		if i.e.groups[g] > 0 {
			s.leaveLocalLocked(i.e, g, 1)
			left++
		}
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
	if err := i.precheck(); err != nil {
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
	if err := i.stateLocked(); err != nil {
		return nil, err
	}
	g := s.groups[group]
	if g == nil {
		return []gotp.PID{}, nil
	}
	if local {
		return g.local.appendTo(make([]gotp.PID, 0, g.local.joins)), nil
	}
	return g.appendAll(make([]gotp.PID, 0, g.joins)), nil
}

// WhichGroups returns the groups that have at least one member on any
// node, sorted.
func (i *Instance) WhichGroups() ([]string, error) { return i.which(PermWhichGroups, false) }

// WhichLocalGroups returns the groups that have at least one member on this
// node, sorted.
func (i *Instance) WhichLocalGroups() ([]string, error) {
	return i.which(PermWhichLocalGroups, true)
}

func (i *Instance) which(perm Permission, local bool) ([]string, error) {
	if err := i.precheck(); err != nil {
		return nil, err
	}
	if err := i.allow(perm, i.s.id); err != nil {
		return nil, err
	}
	s := i.s
	s.mu.RLock()
	if err := i.stateLocked(); err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	out := make([]string, 0, len(s.groups))
	for name, g := range s.groups {
		if !local || g.local.joins > 0 {
			out = append(out, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(out)
	return out, nil
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
// Broadcasting to a group without members is not an error. Broadcast never
// blocks on members: sends are asynchronous, as gotp.Node.Send.
func (i *Instance) Broadcast(group, topic string, payload any) error {
	return i.broadcast(PermBroadcast, group, topic, payload, false)
}

// BroadcastLocal is Broadcast to the members on this node only.
func (i *Instance) BroadcastLocal(group, topic string, payload any) error {
	return i.broadcast(PermBroadcastLocal, group, topic, payload, true)
}

func (i *Instance) broadcast(perm Permission, group, topic string, payload any, local bool) error {
	if err := i.precheck(); err != nil {
		return err
	}
	if group == "" {
		return invalid("empty group name")
	}
	if err := i.allow(perm, group); err != nil {
		return err
	}
	s := i.s
	s.mu.RLock()
	err := i.stateLocked()
	pids, nodes, rep, ok := s.targetsLocked(group, local)
	s.mu.RUnlock()
	if err == nil && !ok {
		// The cached copy of the local members is stale: rebuild it.
		s.mu.Lock()
		err = i.stateLocked()
		if g := s.groups[group]; g != nil && g.bcast == nil {
			g.bcast = slices.Clone(g.local.pids)
		}
		pids, nodes, rep, _ = s.targetsLocked(group, local)
		s.mu.Unlock()
	}
	if err != nil {
		return err
	}
	msg := Message{Scope: s.id, Group: group, Topic: topic, Payload: payload, From: i.pid}
	var boxed any = msg // one allocation, shared by every send
	for _, pid := range pids {
		i.p.Send(pid, boxed)
	}
	for _, node := range nodes {
		rep.Broadcast(node, msg)
	}
	return nil
}

// targetsLocked returns the local members (distinct) and the remote nodes
// a broadcast to group goes to. ok is false when the local members must be
// copied first (the cache is stale), which needs the write lock.
func (s *Scope) targetsLocked(group string, local bool) (pids []gotp.PID, nodes []string, rep Replicator, ok bool) {
	g := s.groups[group]
	if g == nil {
		return nil, nil, nil, true
	}
	if !local && s.rep != nil && len(g.remote) > 0 {
		rep = s.rep
		nodes = make([]string, 0, len(g.remote))
		for node := range g.remote {
			nodes = append(nodes, node)
		}
	}
	if len(g.local.pids) == 0 {
		return nil, nodes, rep, true
	}
	if g.bcast == nil {
		return nil, nodes, rep, false
	}
	return g.bcast, nodes, rep, true
}

// Monitor subscribes to the "member joined" and "member left" events of
// group and returns the subscription with the group's current members (on
// every node, as Members). The snapshot and the subscription are atomic: no
// join or leave falls between them, so the snapshot with the events that
// follow is exactly the membership. The subscription belongs to the
// instance: Release and the process's exit close it.
func (i *Instance) Monitor(group string) (*Subscription, []gotp.PID, error) {
	if err := i.precheck(); err != nil {
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
	if err := i.stateLocked(); err != nil {
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
		members = g.appendAll(make([]gotp.PID, 0, g.joins))
	}
	return sub, members, nil
}

// Events subscribes to the events of every group of the scope and returns
// the subscription with a snapshot of every group's members (as Members),
// atomic with it as Monitor's.
func (i *Instance) Events() (*Subscription, map[string][]gotp.PID, error) {
	if err := i.precheck(); err != nil {
		return nil, nil, err
	}
	if err := i.allow(PermEvents, i.s.id); err != nil {
		return nil, nil, err
	}
	s := i.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := i.stateLocked(); err != nil {
		return nil, nil, err
	}
	sub := i.newSubLocked("", true)
	s.ssubs[sub] = struct{}{}
	snap := make(map[string][]gotp.PID, len(s.groups))
	for name, g := range s.groups {
		snap[name] = g.appendAll(make([]gotp.PID, 0, g.joins))
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

// joinLocalLocked records one join of e's process to name.
func (s *Scope) joinLocalLocked(e *proc, name string) {
	g := s.groups[name]
	if g == nil {
		g = &group{}
		s.groups[name] = g
	}
	if g.local.add(e.pid, 1) {
		g.bcast = nil
	}
	g.joins++
	e.groups[name]++
	if s.watchedLocked(name) || s.rep != nil {
		pids := []gotp.PID{e.pid}
		s.publishLocked(MemberJoined, name, pids)
		if s.rep != nil {
			s.rep.Joined(name, pids)
		}
	}
}

// leaveLocalLocked records times leaves of e's process from name; e must
// be a member at least times times.
func (s *Scope) leaveLocalLocked(e *proc, name string, times int) {
	g := s.groups[name]
	n, gone := g.local.remove(e.pid, times)
	if gone {
		g.bcast = nil
	}
	g.joins -= n
	if g.joins == 0 {
		delete(s.groups, name)
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
