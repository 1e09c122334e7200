package registry

import (
	"iter"
	"sync"
	"sync/atomic"

	"github.com/gotp/gotp"
)

// Register registers the calling process p under key with value. p must be
// the process calling (its own handle, as in every method of gotp.Process
// that acts for it).
//
// On a unique registry it fails with *AlreadyRegisteredError naming the
// holder when a live process holds key (p itself included); a holder that
// has exited but whose cleanup has not finished yet is replaced. On a
// duplicate registry it always succeeds: a process may register the same
// key (even with the same value) many times. It fails with gotp.ErrNoProc
// if p has exited, and with ErrNotRunning when the registry is not running.
//
// Elixir returns the partition that owns the entry; entries here are owned
// by the registry's process, r.PID(). Register never waits for a process;
// on a unique registry it locks the small table of the key, then the
// bookkeeping stripe of p; on a duplicate one, p's partition; and, on p's
// first registration (in a partition of a duplicate registry), p's owner
// record. The first registration of p also sets up one gotp.MonitorFunc;
// its entries are removed when p exits (see the package documentation for
// exactly when). Listeners are sent a RegisterEvent afterwards.
func (r *Registry[K, V]) Register(p *gotp.Process, key K, value V) error {
	if p == nil {
		return gotp.ErrNoProc
	}
	return r.register(p, p.Self(), key, value)
}

// register registers pid, whose handle is p if the caller has it (nil
// otherwise).
func (r *Registry[K, V]) register(p *gotp.Process, pid gotp.PID, key K, value V) error {
	if r.badKey(key) {
		return ErrBadKey
	}
	t := r.live()
	if t == nil {
		return ErrNotRunning
	}
	if !r.alive(p, pid) {
		return gotp.ErrNoProc
	}
	if r.kind == Unique {
		return r.registerUnique(t, p, pid, key, value)
	}
	pi := r.pidPart(pid)
	pt := &t.parts[pi]
	pt.mu.Lock()
	if t.closed.Load() {
		pt.mu.Unlock()
		return ErrNotRunning
	}
	pk := pt.keys[pid.ID()]
	first := pk == nil
	b := pt.dup[key]
	if b == nil {
		b = &bucket[V]{}
		pt.dup[key] = b
	}
	b.add(pid, value)
	if first {
		pk = &pidKeys[K]{counts: make(map[K]int32, 1)}
		pt.keys[pid.ID()] = pk
	}
	pk.counts[key]++
	pt.count.Add(1)
	pt.mu.Unlock()
	r.registered(t, first, pi, pid, key, value)
	return nil
}

// registerUnique is register on a unique registry. It writes the entry
// under the lock of the key's small table only, then lists the key among
// pid's under the lock of pid's key stripe: two short critical sections,
// which writers of other keys and processes rarely share. A process
// killed meanwhile (by another: its goroutine goes on) may have had its
// entries dropped before the key was listed, so the key is dropped again
// if pid is found dead after it was listed.
func (r *Registry[K, V]) registerUnique(t *table[K, V], p *gotp.Process, pid gotp.PID, key K, value V) error {
	h := r.hash(key)
	pi := r.uniquePart(h)
	ut := t.us[pi].lockRoom(h)
	if t.closed.Load() {
		ut.mu.Unlock()
		return ErrNotRunning
	}
	at, free := ut.probe(h, key)
	var dead uint64 // a dead holder whose entry this replaces
	if at >= 0 {
		id := ut.slots[at].id
		if holder := r.pidOf(id); holder == pid || r.n.IsAlive(holder) {
			ut.mu.Unlock()
			return &AlreadyRegisteredError{Key: key, Owner: holder}
		}
		dead = id // its cleanup is on its way
	}
	ut.put(free, h, key, pid.ID(), value)
	if at >= 0 {
		ut.kill(at) // after the new entry is live
	}
	ut.mu.Unlock()

	if at >= 0 {
		t.stripe(dead).count.Add(-1)
		t.unlist(dead, key)
	}
	ks := t.stripe(pid.ID())
	ks.count.Add(1)
	ks.mu.Lock()
	pk := ks.keys[pid.ID()]
	first := pk == nil
	if first {
		pk = &pidKeys[K]{}
		pk.list = pk.buf[:0]
		ks.keys[pid.ID()] = pk
	}
	pk.add(key)
	ks.mu.Unlock()
	r.registered(t, first, pi, pid, key, value)
	if !r.alive(p, pid) {
		r.dropUnique(t, h, key, pid.ID())
	}
	return nil
}

// alive reports whether pid, whose handle is p if not nil, is alive.
func (r *Registry[K, V]) alive(p *gotp.Process, pid gotp.PID) bool {
	if p != nil {
		return p.Alive()
	}
	return r.n.IsAlive(pid)
}

// dropUnique removes the entry of key (hash h) if process id holds it,
// and unlists it; it reports whether it did.
func (r *Registry[K, V]) dropUnique(t *table[K, V], h uint64, key K, id uint64) bool {
	if !t.us[r.uniquePart(h)].killHeld(h, key, id) {
		return false
	}
	t.stripe(id).count.Add(-1)
	t.unlist(id, key)
	return true
}

// registered finishes a registration outside the registry's locks: it
// watches pid if this was its first key (in the registry if unique, in
// partition pi if duplicate), and tells the listeners.
func (r *Registry[K, V]) registered(t *table[K, V], first bool, pi int, pid gotp.PID, key K, value V) {
	if first {
		t.track(pid, pi)
	}
	if len(r.listeners) > 0 {
		ev := RegisterEvent[K, V]{Registry: t.pid, Key: key, PID: pid, Value: value}
		for _, l := range r.listeners {
			r.n.SendTo(l, ev)
		}
	}
}

// ufind returns the hash of key and its live slot in a running unique
// registry's table t, or nil, without any lock.
func (r *Registry[K, V]) ufind(t *table[K, V], key K) (uint64, *uslot[K, V]) {
	h := r.hash(key)
	return h, t.us[r.uniquePart(h)].find(h, key)
}

// isLocal reports whether pid names a process of r's node incarnation:
// only those can hold entries.
func (r *Registry[K, V]) isLocal(pid gotp.PID) bool {
	return pid.Node() == r.n.Name() && pid.Creation() == r.n.Creation()
}

func (r *Registry[K, V]) notifyUnregister(t *table[K, V], key K, pid gotp.PID) {
	if len(r.listeners) == 0 {
		return
	}
	ev := UnregisterEvent[K]{Registry: t.pid, Key: key, PID: pid}
	for _, l := range r.listeners {
		r.n.SendTo(l, ev)
	}
}

// Unregister removes every entry of the calling process p under key. It
// does nothing if p has none (or the registry is not running); otherwise
// listeners are sent an UnregisterEvent. The registry keeps watching p
// (one monitor per registry and process) until p exits.
func (r *Registry[K, V]) Unregister(p *gotp.Process, key K) {
	if p == nil {
		return
	}
	r.unregisterMatch(p.Self(), key, nil)
}

// UnregisterMatch removes the entries of the calling process p under key
// whose values match pattern, and returns how many it removed. Listeners
// are sent an UnregisterEvent only if p has no entry left under key (as
// in Elixir: removing some of a process's entries under a key is not an
// unregister). On a duplicate registry the
// pattern is applied under the lock of p's partition, so a Where function
// in it must not call the registry.
func (r *Registry[K, V]) UnregisterMatch(p *gotp.Process, key K, pattern Pattern) int {
	if p == nil || pattern == nil {
		return 0
	}
	return r.unregisterMatch(p.Self(), key, func(v V) bool { return matchValue(pattern, v) })
}

// UnregisterMatchFunc is UnregisterMatch with a predicate. On a
// duplicate registry pred runs under the lock of the process's partition
// and must not call the registry; on a unique one it runs outside any
// lock.
func (r *Registry[K, V]) UnregisterMatchFunc(p *gotp.Process, key K, pred func(V) bool) int {
	if p == nil || pred == nil {
		return 0
	}
	return r.unregisterMatch(p.Self(), key, pred)
}

func (r *Registry[K, V]) unregisterMatch(pid gotp.PID, key K, match func(V) bool) int {
	if r.badKey(key) {
		return 0
	}
	t := r.live()
	if t == nil {
		return 0
	}
	removed, last := 0, false
	if r.kind == Unique {
		// Read, match outside the lock, then remove if still the same.
		h, s := r.ufind(t, key)
		if s == nil || s.id != pid.ID() || (match != nil && !match(s.val)) {
			return 0
		}
		if r.dropUnique(t, h, key, pid.ID()) {
			removed, last = 1, true
		}
	} else {
		removed, last = t.parts[r.pidPart(pid)].removeDup(pid, key, match)
	}
	if last {
		r.notifyUnregister(t, key, pid)
	}
	return removed
}

// removeDup is removeDupLocked under pt's lock. match is user code: if it
// panics, the entries are as they were (removeDupLocked calls it before it
// changes anything), the lock is released, and the panic goes on to the
// caller.
func (pt *partition[K, V]) removeDup(pid gotp.PID, key K, match func(V) bool) (removed int, last bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.removeDupLocked(pid, key, match)
}

// unregisterKey removes key whoever holds it (unique registries; for via
// names).
func (r *Registry[K, V]) unregisterKey(key K) {
	if r.badKey(key) {
		return
	}
	t := r.live()
	if t == nil || r.kind != Unique {
		return
	}
	h := r.hash(key)
	var holder uint64
	ut := t.us[r.uniquePart(h)].lock(h)
	at, _ := ut.probe(h, key)
	if at >= 0 {
		holder = ut.slots[at].id
		ut.kill(at)
	}
	ut.mu.Unlock()
	if at < 0 {
		return
	}
	t.stripe(holder).count.Add(-1)
	t.unlist(holder, key)
	r.notifyUnregister(t, key, r.pidOf(holder))
}

// Lookup returns the entries under key, in no particular order; nil if
// there are none or the registry is not running. A unique registry reads
// the key's partition without any lock; a duplicate registry reads every
// partition, one after the other, each under its read lock (so the result
// is a consistent snapshot of each partition, not of the registry as a
// whole).
func (r *Registry[K, V]) Lookup(key K) []Entry[V] {
	if r.badKey(key) {
		return nil
	}
	t := r.live()
	if t == nil {
		return nil
	}
	if r.kind == Unique {
		_, s := r.ufind(t, key)
		if s == nil {
			return nil
		}
		return []Entry[V]{{PID: r.pidOf(s.id), Value: s.val}}
	}
	var out []Entry[V]
	for i := range t.parts {
		out = t.parts[i].appendDup(out, key, r.nodeName, r.creation)
	}
	return out
}

// dispatchEntries returns the entries under key in pt, shared with other
// Dispatch calls while they do not change (see bucket.snap).
func (pt *partition[K, V]) dispatchEntries(key K, node string, creation uint32) []Entry[V] {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	if b := pt.dup[key]; b != nil {
		return b.snapshot(node, creation)
	}
	return nil
}

func (pt *partition[K, V]) appendDup(dst []Entry[V], key K, node string, creation uint32) []Entry[V] {
	pt.mu.RLock()
	if b := pt.dup[key]; b != nil {
		dst = b.appendEntries(dst, node, creation)
	}
	pt.mu.RUnlock()
	return dst
}

// Find returns the entry under key of a unique registry, and whether there
// is one, without allocating and without any lock. On a duplicate registry
// it returns one of the key's entries.
func (r *Registry[K, V]) Find(key K) (Entry[V], bool) {
	if r.badKey(key) {
		return Entry[V]{}, false
	}
	t := r.live()
	if t == nil {
		return Entry[V]{}, false
	}
	if r.kind == Unique {
		_, s := r.ufind(t, key)
		if s == nil {
			return Entry[V]{}, false
		}
		return Entry[V]{PID: r.pidOf(s.id), Value: s.val}, true
	}
	for i := range t.parts {
		pt := &t.parts[i]
		pt.mu.RLock()
		if b := pt.dup[key]; b != nil && len(b.gs) > 0 {
			e := Entry[V]{PID: r.pidOf(b.gs[0].id), Value: b.gs[0].first}
			pt.mu.RUnlock()
			return e, true
		}
		pt.mu.RUnlock()
	}
	return Entry[V]{}, false
}

// Match returns the entries under key whose values match pattern (see
// Pattern), in no particular order. The pattern runs on a snapshot, outside
// the registry's locks.
func (r *Registry[K, V]) Match(key K, pattern Pattern) []Entry[V] {
	if pattern == nil {
		return nil
	}
	return r.MatchFunc(key, func(v V) bool { return matchValue(pattern, v) })
}

// MatchFunc returns the entries under key whose values pred accepts. pred
// runs on a snapshot, outside the registry's locks, so it may call the
// registry.
func (r *Registry[K, V]) MatchFunc(key K, pred func(V) bool) []Entry[V] {
	es := r.Lookup(key)
	if pred == nil {
		return nil
	}
	out := es[:0]
	for _, e := range es {
		if pred(e.Value) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// CountMatch returns the number of entries under key whose values match
// pattern.
func (r *Registry[K, V]) CountMatch(key K, pattern Pattern) int {
	return len(r.Match(key, pattern))
}

// Keys returns the keys the process pid holds, in no particular order; a
// key it registered n times in a duplicate registry appears n times. It is
// empty if pid holds none, has exited (and its cleanup is done), or the
// registry is not running.
func (r *Registry[K, V]) Keys(pid gotp.PID) []K {
	t := r.live()
	if t == nil || !r.isLocal(pid) {
		return nil
	}
	var out []K
	if r.kind == Duplicate {
		pt := &t.parts[r.pidPart(pid)]
		pt.mu.RLock()
		if pk := pt.keys[pid.ID()]; pk != nil {
			for k, c := range pk.counts {
				for range c {
					out = append(out, k)
				}
			}
		}
		pt.mu.RUnlock()
		return out
	}
	ks := t.stripe(pid.ID())
	ks.mu.Lock()
	if pk := ks.keys[pid.ID()]; pk != nil {
		out = append(out, pk.list...)
	}
	ks.mu.Unlock()
	return out
}

// Values returns the values pid registered under key (Elixir's
// Registry.values/3): at most one in a unique registry, in registration
// order in a duplicate one.
func (r *Registry[K, V]) Values(key K, pid gotp.PID) []V {
	if !r.isLocal(pid) {
		return nil
	}
	if r.badKey(key) {
		return nil
	}
	t := r.live()
	if t == nil {
		return nil
	}
	if r.kind == Unique {
		if _, s := r.ufind(t, key); s != nil && s.id == pid.ID() {
			return []V{s.val}
		}
		return nil
	}
	pt := &t.parts[r.pidPart(pid)]
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	if b := pt.dup[key]; b != nil {
		return b.appendValues(nil, pid)
	}
	return nil
}

// Count returns the number of entries in the registry, summed over the
// partitions one after the other. It takes no lock.
func (r *Registry[K, V]) Count() int {
	t := r.live()
	if t == nil {
		return 0
	}
	n := 0
	for i := range t.ks {
		n += int(t.ks[i].count.Load())
	}
	for i := range t.parts {
		n += int(t.parts[i].count.Load())
	}
	return n
}

// UpdateValue sets the value of key for the calling process p of a unique
// registry to fn(old), and returns the new and the old value. fn runs on
// the caller's goroutine, outside the registry's locks. It fails with
// ErrNotUnique on a duplicate registry, with ErrNotRegistered when p does
// not hold key (also when p unregistered it while fn ran), with ErrBadKey,
// and with ErrNotRunning. Listeners are not told. The check after fn is
// that p still holds key: if fn itself unregisters key and registers it
// again, fn's result replaces the value of that new registration.
func (r *Registry[K, V]) UpdateValue(p *gotp.Process, key K, fn func(old V) V) (newValue, oldValue V, err error) {
	if r.kind != Unique {
		return newValue, oldValue, ErrNotUnique
	}
	t := r.live()
	if t == nil {
		return newValue, oldValue, ErrNotRunning
	}
	if p == nil || fn == nil {
		return newValue, oldValue, ErrNotRegistered
	}
	if r.badKey(key) {
		return newValue, oldValue, ErrBadKey
	}
	pid := p.Self()
	h, s := r.ufind(t, key)
	if s == nil || s.id != pid.ID() {
		return newValue, oldValue, ErrNotRegistered
	}
	oldValue = s.val
	newValue = fn(oldValue)
	ut := t.us[r.uniquePart(h)].lockRoom(h)
	at, free := ut.probe(h, key)
	if at < 0 || ut.slots[at].id != pid.ID() {
		ut.mu.Unlock()
		var zero V
		return zero, zero, ErrNotRegistered
	}
	ut.put(free, h, key, pid.ID(), newValue) // live before the old one is dead
	ut.kill(at)
	ut.mu.Unlock()
	return newValue, oldValue, nil
}

// Dispatch calls fn with the entries under key, never with an empty
// slice: not at all when key has no entries. On a unique registry, or a
// duplicate one with one partition, fn runs once on the caller's goroutine.
// On a duplicate registry with several partitions, fn runs once for each
// partition holding entries under key, with that partition's entries, in
// parallel: Dispatch starts a goroutine for every such partition but one,
// and each of them, the caller's goroutine included, makes calls not yet
// made until none is left, so that every call can be inside fn at once;
// which goroutine makes which call is not fixed. A goroutine the scheduler
// starts late (a broadcast queues thousands of woken receivers ahead of
// it) finds the calls already made by the caller and ends at once:
// Dispatch waits for every call to return, not for helpers that found
// nothing to do.
//
// If a call panics, every call is still made, and Dispatch panics on the
// caller's goroutine once they have all returned: with that panic itself
// when the call ran on the caller's goroutine, otherwise with the value of
// the first helper's panic (inside a process, this ends the process, as a
// linked task's crash ends the caller in Elixir). A call that ends its
// goroutine with runtime.Goexit ends only the goroutine it ran on; if
// that is the caller's, Dispatch does not return, and a helper's panic is
// not raised.
//
// With Parallel(false) the calls run one after the other on the caller's
// goroutine instead (Elixir's default, parallel: false; this package
// defaults to the parallel form, which suits a broadcast to many
// receivers), and a
// panic ends Dispatch at once, leaving the partitions after it uncalled.
// That is as fast when fn is short, as sending is, and starts no goroutine.
//
// Each call gets a snapshot of one partition's entries, taken under its
// read lock; fn runs outside every lock, so it may call the registry, and
// may keep the slice, but must not modify it: while a key's entries do not
// change, every Dispatch to it shares one snapshot (a publisher that
// dispatches in a loop thus copies its subscribers once, not every time).
// Dispatch is how a publish/subscribe system sends to every subscriber;
// send through a gotp.Batch, as the package example does, and idle
// handler-mode subscribers are woken together rather than each on a
// goroutine of its own (several times faster for thousands of them).
func (r *Registry[K, V]) Dispatch(key K, fn func(entries []Entry[V]), opts ...DispatchOption) {
	if r.badKey(key) {
		return
	}
	t := r.live()
	if t == nil || fn == nil {
		return
	}
	if r.kind == Unique {
		if e, ok := r.Find(key); ok {
			fn([]Entry[V]{e})
		}
		return
	}
	if len(t.parts) == 1 {
		if es := t.parts[0].dispatchEntries(key, r.nodeName, r.creation); len(es) > 0 {
			fn(es)
		}
		return
	}
	var with []int
	for i := range t.parts {
		pt := &t.parts[i]
		pt.mu.RLock()
		_, ok := pt.dup[key]
		pt.mu.RUnlock()
		if ok {
			with = append(with, i)
		}
	}
	run := func(i int) {
		if es := t.parts[i].dispatchEntries(key, r.nodeName, r.creation); len(es) > 0 {
			fn(es)
		}
	}
	parallel := true
	for _, o := range opts {
		if p, ok := o.(dispatchParallel); ok {
			parallel = bool(p)
		}
	}
	switch {
	case len(with) == 0:
		return
	case len(with) == 1 || !parallel:
		for _, i := range with {
			run(i)
		}
		return
	}
	runParallel(with, run)
}

// runParallel makes the calls run(i), i in parts, in parallel: it starts
// a helper goroutine for every call but one, and every goroutine, the
// caller's included, makes calls not yet made until none is left. It
// returns when every call has returned. A panic in a call on the caller's
// goroutine goes on up from there, with its own stack, once every call
// has returned; otherwise a panic in a helper's call is raised again on
// the caller's goroutine, with the first such panic's value.
//
// A helper that the scheduler starts late finds its call made by the
// caller, which does not wait for it, and ends at once. This matters
// when the calls wake goroutines, as a broadcast does: each goroutine
// woken is queued ahead of a helper not yet running, so a helper often
// starts only after the caller could have made its call, and waiting for
// it would make every Dispatch wait for thousands of receivers to run.
// Every call is made even if calls panic: a goroutine whose call panics
// makes no more calls, but each of the len(parts) goroutines makes at
// least one while any is left.
func runParallel(parts []int, run func(i int)) {
	var (
		next     atomic.Int32
		calls    sync.WaitGroup // calls not yet returned
		mu       sync.Mutex
		panicked bool
		pval     any
	)
	calls.Add(len(parts))
	// take makes one call not yet made, and reports whether there was one
	// and it returned. On a helper, a panic in the call is recovered and
	// recorded before the call counts as returned (calls.Done), so that
	// the caller sees it once calls.Wait returns.
	take := func(helper bool) (more bool) {
		k := int(next.Add(1)) - 1
		if k >= len(parts) {
			return false
		}
		defer calls.Done()
		if helper {
			defer func() {
				if v := recover(); v != nil {
					mu.Lock()
					if !panicked {
						panicked, pval = true, v
					}
					mu.Unlock()
				}
			}()
		}
		run(parts[k])
		return true
	}
	for range len(parts) - 1 {
		go func() {
			for take(true) {
			}
		}()
	}
	func() {
		defer calls.Wait() // also when a call panics here: no call outlives Dispatch
		for take(false) {
		}
	}()
	if panicked {
		panic(pval)
	}
}

// A DispatchOption changes how Dispatch runs its calls.
type DispatchOption interface{ dispatchOption() }

type dispatchParallel bool

func (dispatchParallel) dispatchOption() {}

// Parallel sets whether Dispatch on a partitioned duplicate registry runs
// its per-partition calls in parallel (true, the default, unlike Elixir's)
// or one after the other on the caller's goroutine.
func Parallel(on bool) DispatchOption { return dispatchParallel(on) }

// All returns an iterator over every entry of the registry. It reads one
// partition at a time: each is copied (a duplicate partition under its
// read lock; a unique one table by table under the partition's directory
// lock, so that no table is replaced meanwhile: writers to tables that
// need no replacing go on, a writer whose table is full waits for the
// copy) and yielded outside any lock, so the loop body may call the
// registry; entries added or removed meanwhile in what is not yet read
// are seen as they are when read.
func (r *Registry[K, V]) All() iter.Seq[Item[K, V]] {
	return func(yield func(Item[K, V]) bool) {
		t := r.live()
		if t == nil {
			return
		}
		var buf []Item[K, V]
		for i := range t.parts {
			buf = t.parts[i].appendItems(buf[:0], r.pidOf)
			for _, it := range buf {
				if !yield(it) {
					return
				}
			}
		}
	}
}

func (pt *partition[K, V]) appendItems(dst []Item[K, V], mk func(uint64) gotp.PID) []Item[K, V] {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	if pt.u != nil {
		pt.u.each(func(s *uslot[K, V]) {
			dst = append(dst, Item[K, V]{Key: s.key, PID: mk(s.id), Value: s.val})
		})
	}
	for k, b := range pt.dup {
		for gi := range b.gs {
			g := &b.gs[gi]
			pid := mk(g.id)
			dst = append(dst, Item[K, V]{Key: k, PID: pid, Value: g.first})
			for _, v := range g.more {
				dst = append(dst, Item[K, V]{Key: k, PID: pid, Value: v})
			}
		}
	}
	return dst
}

// Select returns every entry for which filter returns true (every entry
// if filter is nil), in no particular order: Elixir's Registry.select with
// a Go function in place of a match specification. filter runs outside the
// registry's locks (see All).
func (r *Registry[K, V]) Select(filter func(Item[K, V]) bool) []Item[K, V] {
	var out []Item[K, V]
	for it := range r.All() {
		if filter == nil || filter(it) {
			out = append(out, it)
		}
	}
	return out
}
