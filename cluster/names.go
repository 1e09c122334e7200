package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gotp/gotp"
)

// Cluster-wide names (Erlang's global). A name space (Cluster.Names) maps
// each name to at most one process in the whole cluster. Every node keeps
// the whole table; each entry is owned by the node of its process, which
// removes it when the process exits and tells every node. Registering
// takes a lock on the name on every connected node first (a node that
// already holds the name answers with its holder, one that has it locked
// for another registration answers busy and the registration retries
// after a random pause), then tells every node the new entry.
//
// Nodes that could not talk (a partition, a node that joined while a
// registration was under way) may each accept the same name. When they
// connect, each sends the other the entries it owns, and every node
// applies one rule to a name held twice: the registration made first (by
// the clock of the node that made it; then the smaller node name, then
// the smaller PID) keeps the name, and the node of the other process
// sends it an exit signal with a *NameConflictError reason
// (errors.Is(reason, ErrNameConflict)); a process that traps exits gets
// it as a message and is merely unregistered.
//
// Frames (kNames op(1) str(space) ...):
//
//	op lock:       str(name) uvarint(claim)
//	op lockReply:  uvarint(claim) answer(1) [pid(holder)]
//	op release:    str(name) uvarint(claim)
//	op register:   str(name) shortPID varint(at)
//	op unregister: str(name) pid        (the sender owns it, or asks its owner to drop it)
//	op sync:       uvarint(n) n*(str(name) shortPID varint(at))
const (
	nmLock       = 1
	nmLockReply  = 2
	nmRelease    = 3
	nmRegister   = 4
	nmUnregister = 5
	nmSync       = 6
)

// lock answers
const (
	lockGranted = 1
	lockTaken   = 2
	lockBusy    = 3
)

// ErrNameConflict matches (errors.Is) the exit reason of a process that
// lost its cluster-wide name to another process after two parts of the
// cluster met (see NameConflictError).
var ErrNameConflict = errors.New("cluster: name held on two nodes")

// NameConflictError is the exit reason sent to a process that held a
// cluster-wide name which another process, registered earlier, also
// held when their nodes met. The name is Kept's.
type NameConflictError struct {
	Space string
	Name  string
	Kept  gotp.PID
}

// Error names the name and the process that kept it.
func (e *NameConflictError) Error() string {
	return fmt.Sprintf("cluster: name %q (space %q) kept by %v", e.Name, e.Space, e.Kept)
}

// Is makes errors.Is(err, ErrNameConflict) true.
func (e *NameConflictError) Is(target error) bool { return target == ErrNameConflict }

// errBusy: another registration holds the lock on the name somewhere.
var errBusy = errors.New("cluster: name locked")

type nameState struct {
	mu        sync.RWMutex // guards the fields below
	spaces    map[string]*nameSpace
	claims    map[uint64]*claim // this node's registrations under way
	lastClaim uint64
}

type nameSpace struct {
	names map[string]nameEntry
	locks map[string]nameLock
}

type nameEntry struct {
	pid gotp.PID
	at  int64    // when it was registered, by its node's clock (UnixNano)
	mon gotp.Ref // this node's monitor of a local holder
}

type nameLock struct {
	node    string
	claim   uint64
	expires time.Time
}

// A claim is a registration waiting for the other nodes' locks.
type claim struct {
	waiting map[string]bool // nodes yet to answer
	taken   gotp.PID        // a node holds the name already
	busy    bool            // a node has it locked for another claim
	done    chan struct{}   // closed when every node answered
}

func (s *nameState) init() {
	s.spaces = make(map[string]*nameSpace)
	s.claims = make(map[uint64]*claim)
}

func (s *nameState) spaceLocked(space string) *nameSpace {
	sp := s.spaces[space]
	if sp == nil {
		sp = &nameSpace{names: make(map[string]nameEntry), locks: make(map[string]nameLock)}
		s.spaces[space] = sp
	}
	return sp
}

// Names is a name space of cluster-wide unique names: Erlang's global
// for the space "", and separate spaces for keys that must be unique
// across the cluster, such as the user names of a chat. See the package
// doc's "Cluster-wide names" for the protocol and the rule for a name
// held on both sides of a healed partition. A Names is a handle: every
// Names of the same space on the same cluster is the same table. Its
// methods are safe for concurrent use.
type Names struct {
	c     *Cluster
	space string
}

// Names returns the name space called space ("" is the cluster's global
// names).
func (c *Cluster) Names(space string) *Names { return &Names{c: c, space: space} }

// ErrNotLocal is returned by Names.Register for a process of another node:
// a node registers only its own processes (it owns their entries).
var ErrNotLocal = errors.New("cluster: a node registers only its own processes")

// Register gives name to pid, a live process of this node, in the whole
// cluster. When it returns the entry is queued for every connected node,
// each of which keeps the name locked until the entry arrives, so no
// other registration of it can succeed meanwhile. It
// fails with *gotp.AlreadyRegisteredError (naming the holder) when the
// name is taken anywhere the node can reach, gotp.ErrNoProc when pid is
// not alive, ErrNotLocal for a process of another node, ErrClosed after
// Leave, or ctx's error; while another node is registering the same
// name it waits and retries. The entry goes when the process exits or
// with Unregister. A process may hold several names.
func (r *Names) Register(ctx context.Context, name string, pid gotp.PID) error {
	c := r.c
	if name == "" {
		return gotp.ErrEmptyName
	}
	if pid.Node() != c.name || pid.Creation() != c.cr {
		return ErrNotLocal
	}
	pause := time.Millisecond
	for {
		if c.closed.Load() {
			return ErrClosed
		}
		if !c.n.IsAlive(pid) {
			return gotp.ErrNoProc
		}
		err := r.try(ctx, name, pid)
		if err != errBusy {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

func (r *Names) try(ctx context.Context, name string, pid gotp.PID) error {
	c := r.c
	s := &c.names
	s.mu.Lock()
	sp := s.spaceLocked(r.space)
	if e, ok := sp.names[name]; ok {
		s.mu.Unlock()
		return &gotp.AlreadyRegisteredError{Name: name, Owner: e.pid}
	}
	if l, ok := sp.locks[name]; ok && time.Now().Before(l.expires) {
		s.mu.Unlock()
		return errBusy
	}
	s.lastClaim++
	id := s.lastClaim
	sp.locks[name] = nameLock{node: c.name, claim: id, expires: time.Now().Add(c.opts.HeartbeatTimeout)}
	peers := c.peers()
	cl := &claim{waiting: make(map[string]bool, len(peers)), done: make(chan struct{})}
	for n := range peers {
		cl.waiting[n] = true
	}
	s.claims[id] = cl
	if len(cl.waiting) == 0 {
		close(cl.done)
	}
	s.mu.Unlock()

	b := c.getBuf()
	defer c.putBuf(b)
	*b = r.header(*b, nmLock)
	*b = appendStr(*b, name)
	*b = binary.AppendUvarint(*b, id)
	for _, p := range peers {
		if err := c.enqueue(p, *b); err != nil {
			c.names.answered(id, p.name, lockGranted, gotp.PID{}) // not connected: it has no say
		}
	}
	var err error
	select {
	case <-cl.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.done:
		err = ErrClosed
	}
	s.mu.Lock()
	delete(s.claims, id)
	ours := sp.locks[name].claim == id && sp.locks[name].node == c.name
	if ours {
		delete(sp.locks, name)
	}
	switch {
	case err != nil:
	case !cl.taken.IsZero():
		err = &gotp.AlreadyRegisteredError{Name: name, Owner: cl.taken}
	case cl.busy || !ours:
		err = errBusy
	default:
		if e, ok := sp.names[name]; ok { // registered meanwhile by an entry that arrived
			err = &gotp.AlreadyRegisteredError{Name: name, Owner: e.pid}
			break
		}
		at := time.Now().UnixNano()
		sp.names[name] = nameEntry{pid: pid, at: at}
		s.mu.Unlock()
		*b = r.header((*b)[:0], nmRegister)
		*b = appendStr(*b, name)
		*b = appendShortPID(*b, pid)
		*b = binary.AppendVarint(*b, at)
		for _, p := range c.peers() {
			_ = c.enqueue(p, *b)
		}
		// Watched after the entry is out: if pid has died meanwhile, its
		// removal follows the entry on every connection.
		r.watch(name, pid)
		return nil
	}
	s.mu.Unlock()
	*b = r.header((*b)[:0], nmRelease)
	*b = appendStr(*b, name)
	*b = binary.AppendUvarint(*b, id)
	for _, p := range peers {
		_ = c.enqueue(p, *b)
	}
	return err
}

// watch monitors the local holder of name, so that its exit frees the
// name everywhere.
func (r *Names) watch(name string, pid gotp.PID) {
	c := r.c
	ref := c.n.MonitorFunc(pid, func(gotp.Down) { r.drop(name, pid, true) })
	s := &c.names
	s.mu.Lock()
	sp := s.spaceLocked(r.space)
	if e, ok := sp.names[name]; ok && e.pid == pid && e.mon.IsZero() {
		e.mon = ref
		sp.names[name] = e
	}
	s.mu.Unlock()
}

// drop removes name if pid holds it, and tells every node if pid is
// local. It reports whether it removed it.
func (r *Names) drop(name string, pid gotp.PID, tell bool) bool {
	c := r.c
	s := &c.names
	s.mu.Lock()
	sp := s.spaceLocked(r.space)
	e, ok := sp.names[name]
	if !ok || e.pid != pid {
		s.mu.Unlock()
		return false
	}
	delete(sp.names, name)
	s.mu.Unlock()
	if !e.mon.IsZero() {
		c.n.Demonitor(e.mon, pid)
	}
	if tell {
		r.sendUnregister(name, pid, nil)
	}
	return true
}

func (r *Names) sendUnregister(name string, pid gotp.PID, only *peer) {
	c := r.c
	b := c.getBuf()
	defer c.putBuf(b)
	*b = r.header(*b, nmUnregister)
	*b = appendStr(*b, name)
	*b = appendPID(*b, pid)
	if only != nil {
		_ = c.enqueue(only, *b)
		return
	}
	for _, p := range c.peers() {
		_ = c.enqueue(p, *b)
	}
}

// Unregister frees name, wherever its holder runs (a holder on another
// node is dropped by that node, which tells every node). It reports
// whether the name was held, as this node saw it.
func (r *Names) Unregister(name string) bool {
	pid, ok := r.Whereis(name)
	if !ok {
		return false
	}
	if pid.Node() == r.c.name {
		return r.drop(name, pid, true)
	}
	if p := r.c.peers()[pid.Node()]; p != nil {
		r.sendUnregister(name, pid, p)
	}
	return true
}

// Whereis returns the process holding name, as this node knows it (no
// network).
func (r *Names) Whereis(name string) (gotp.PID, bool) {
	s := &r.c.names
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sp := s.spaces[r.space]; sp != nil {
		if e, ok := sp.names[name]; ok {
			return e.pid, true
		}
	}
	return gotp.PID{}, false
}

// Registered returns the names of the space, sorted.
func (r *Names) Registered() []string {
	s := &r.c.names
	s.mu.RLock()
	var out []string
	if sp := s.spaces[r.space]; sp != nil {
		for n := range sp.names {
			out = append(out, n)
		}
	}
	s.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Via returns name as a gotp.Via of this space, for server.Start
// (server.WithVia) and for every call that takes a Dest: server.Call,
// server.Cast, Node.SendTo resolve it from this node's copy of the table,
// with no network. Registering through it (server.Start) waits up to
// DefaultRegisterTimeout.
func (r *Names) Via(name string) gotp.Via { return viaName{r: r, name: name} }

// DefaultRegisterTimeout bounds a registration made through Names.Via,
// which has no context of its own.
const DefaultRegisterTimeout = 5 * time.Second

type viaName struct {
	r    *Names
	name string
}

func (v viaName) Resolve(*gotp.Node) (gotp.PID, bool) { return v.r.Whereis(v.name) }

func (v viaName) RegisterName(_ *gotp.Node, pid gotp.PID) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRegisterTimeout)
	defer cancel()
	return v.r.Register(ctx, v.name, pid)
}

func (v viaName) UnregisterName(*gotp.Node) { v.r.Unregister(v.name) }

func (v viaName) String() string { return "{global, " + v.r.space + ", " + v.name + "}" }

func (r *Names) header(b []byte, op byte) []byte {
	b = append(b, kNames, op)
	return appendStr(b, r.space)
}

// answered records a node's answer to the claim id.
func (s *nameState) answered(id uint64, node string, answer byte, holder gotp.PID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.claims[id]
	if cl == nil || !cl.waiting[node] {
		return
	}
	delete(cl.waiting, node)
	switch answer {
	case lockTaken:
		cl.taken = holder
	case lockBusy:
		cl.busy = true
	}
	if len(cl.waiting) == 0 {
		close(cl.done)
	}
}

// namesFrame handles a names frame from p.
func (c *Cluster) namesFrame(p *peer, d *reader) error {
	f, err := decodeNames(p.name, d)
	if err != nil {
		return err
	}
	r := c.Names(f.space)
	s := &c.names
	switch f.op {
	case nmLock:
		s.mu.Lock()
		sp := s.spaceLocked(f.space)
		answer := byte(lockGranted)
		var holder gotp.PID
		if e, ok := sp.names[f.name]; ok {
			answer, holder = lockTaken, e.pid
		} else if l, ok := sp.locks[f.name]; ok && (l.node != p.name || l.claim != f.claim) && time.Now().Before(l.expires) {
			answer = lockBusy
		} else {
			sp.locks[f.name] = nameLock{node: p.name, claim: f.claim, expires: time.Now().Add(c.opts.HeartbeatTimeout)}
		}
		s.mu.Unlock()
		b := c.getBuf()
		*b = r.header(*b, nmLockReply)
		*b = binary.AppendUvarint(*b, f.claim)
		*b = append(*b, answer)
		if answer == lockTaken {
			*b = appendPID(*b, holder)
		}
		_ = c.enqueue(p, *b)
		c.putBuf(b)
	case nmLockReply:
		s.answered(f.claim, p.name, f.answer, f.pid)
	case nmRelease:
		s.mu.Lock()
		sp := s.spaceLocked(f.space)
		if l, ok := sp.locks[f.name]; ok && l.node == p.name && l.claim == f.claim {
			delete(sp.locks, f.name)
		}
		s.mu.Unlock()
	case nmRegister:
		s.mu.Lock()
		sp := s.spaceLocked(f.space)
		if l, ok := sp.locks[f.name]; ok && l.node == p.name {
			delete(sp.locks, f.name)
		}
		s.mu.Unlock()
		c.learnName(f.space, f.name, nameEntry{pid: f.pid, at: f.at})
	case nmUnregister:
		if f.pid.Node() == c.name {
			r.drop(f.name, f.pid, true) // asked to drop one of ours
		} else if f.pid.Node() == p.name {
			r.drop(f.name, f.pid, false)
		}
	case nmSync:
		for _, e := range f.entries {
			c.learnName(e.space, e.name, nameEntry{pid: e.pid, at: e.at})
		}
	}
	return nil
}

// learnName records an entry another node owns, settling a name held
// twice by the rule (see Names).
func (c *Cluster) learnName(space, name string, in nameEntry) {
	s := &c.names
	s.mu.Lock()
	sp := s.spaceLocked(space)
	cur, ok := sp.names[name]
	if !ok || cur.pid == in.pid || cur.pid.Node() == in.pid.Node() { // an owner's word on its own entries is the last

		sp.names[name] = in
		s.mu.Unlock()
		return
	}
	if firstRegistered(cur, in) {
		s.mu.Unlock()
		return // ours stays; the other's node applies the same rule to it
	}
	sp.names[name] = in
	s.mu.Unlock()
	if cur.pid.Node() == c.name {
		// The loser is ours: it is told, and every node learns it is gone.
		if !cur.mon.IsZero() {
			c.n.Demonitor(cur.mon, cur.pid)
		}
		c.log.Info("cluster: name held on two nodes; ours loses it", "space", space, "name", name, "lost", cur.pid, "kept", in.pid)
		c.n.Exit(cur.pid, &NameConflictError{Space: space, Name: name, Kept: in.pid})
		c.Names(space).sendUnregister(name, cur.pid, nil)
	}
}

// firstRegistered reports whether a keeps a name that b holds too: the
// earlier registration, then the smaller node name, then the smaller PID.
func firstRegistered(a, b nameEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.pid.Node() != b.pid.Node() {
		return a.pid.Node() < b.pid.Node()
	}
	return a.pid.ID() < b.pid.ID()
}

// namesPeerUp sends p the entries this node owns.
func (c *Cluster) namesPeerUp(p *peer) {
	s := &c.names
	s.mu.RLock()
	var ents []syncEntry
	for space, sp := range s.spaces {
		for name, e := range sp.names {
			if e.pid.Node() == c.name {
				ents = append(ents, syncEntry{space: space, name: name, pid: e.pid, at: e.at})
			}
		}
	}
	s.mu.RUnlock()
	if len(ents) == 0 {
		return
	}
	// One frame per space, each within MaxMessageSize.
	slices.SortFunc(ents, func(a, b syncEntry) int {
		if a.space < b.space {
			return -1
		}
		if a.space > b.space {
			return 1
		}
		return 0
	})
	for i := 0; i < len(ents); {
		space := ents[i].space
		b := c.Names(space).header(nil, nmSync)
		j := i
		for j < len(ents) && ents[j].space == space && j-i < 4096 {
			j++
		}
		b = binary.AppendUvarint(b, uint64(j-i))
		for _, e := range ents[i:j] {
			b = appendStr(b, e.name)
			b = appendShortPID(b, e.pid)
			b = binary.AppendVarint(b, e.at)
		}
		if err := c.enqueue(p, b); err != nil && errors.Is(err, ErrTooLarge) {
			c.log.Error("cluster: names sync too large for MaxMessageSize", "space", space, "err", err)
		}
		i = j
	}
}

// namesPeerDown drops the entries and locks of p's node, and counts p as
// having granted every claim waiting for it.
func (c *Cluster) namesPeerDown(p *peer) {
	s := &c.names
	s.mu.Lock()
	for _, sp := range s.spaces {
		for name, e := range sp.names {
			if e.pid.Node() == p.name {
				delete(sp.names, name)
			}
		}
		for name, l := range sp.locks {
			if l.node == p.name {
				delete(sp.locks, name)
			}
		}
	}
	var ids []uint64
	for id, cl := range s.claims {
		if cl.waiting[p.name] {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.answered(id, p.name, lockGranted, gotp.PID{})
	}
}

type syncEntry struct {
	space, name string
	pid         gotp.PID
	at          int64
}

// namesDecoded is a decoded names frame (for dispatch and the fuzzer).
type namesDecoded struct {
	op      byte
	space   string
	name    string
	claim   uint64
	answer  byte
	pid     gotp.PID
	at      int64
	entries []syncEntry
}

const maxSyncNames = 1 << 16

func decodeNames(sender string, d *reader) (f namesDecoded, err error) {
	f.op = d.byte1()
	f.space = d.str()
	switch f.op {
	case nmLock, nmRelease:
		f.name = d.str()
		f.claim = d.uvarint()
	case nmLockReply:
		f.claim = d.uvarint()
		f.answer = d.byte1()
		switch f.answer {
		case lockGranted, lockBusy:
		case lockTaken:
			f.pid = d.pid()
		default:
			d.fail("bad lock answer")
		}
	case nmRegister:
		f.name = d.str()
		f.pid = d.shortPID(sender)
		f.at = d.varint()
		if d.err == nil && (f.name == "" || f.pid.IsZero()) {
			d.fail("bad name entry")
		}
	case nmUnregister:
		f.name = d.str()
		f.pid = d.pid()
	case nmSync:
		n := d.uvarint()
		if n > maxSyncNames || n > uint64(len(d.b)) {
			d.fail("too many names")
			break
		}
		for range n {
			e := syncEntry{space: f.space, name: d.str(), pid: d.shortPID(sender), at: d.varint()}
			if d.err == nil && (e.name == "" || e.pid.IsZero()) {
				d.fail("bad name entry")
			}
			f.entries = append(f.entries, e)
		}
	default:
		d.fail(fmt.Sprintf("bad names op %d", f.op))
	}
	if err == nil {
		err = d.err
	}
	if err == nil && len(d.b) != 0 {
		err = fmt.Errorf("%w: trailing bytes in names frame", ErrDecode)
	}
	return f, err
}
