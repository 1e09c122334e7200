package registry

import "sync/atomic"

// The entries of a unique partition live in a utable: an open-addressing
// hash table (linear probing) whose slots hold the entries themselves, so
// that a read takes no lock and usually touches one cache line. Writers
// serialise on the partition's mutex. Readers and writers share memory in
// one way only, each slot's atomic state word:
//
//	0                  empty: the slot ends every probe sequence through it
//	h&^3 | slotLive    the entry of a key whose hash is h
//	h&^3 | slotDead    a removed entry (a tombstone)
//
// A slot is written once: its key, holder and value are written while it is
// empty, then its state is stored (live), and later perhaps stored again
// (dead); a dead slot is never reused. So a reader that loads a live state
// may read the slot's other fields at leisure: they do not change any
// more. Hence:
//
//   - a new key goes into the empty slot that ends its probe sequence;
//   - a new value or a new holder for a key goes into a new slot, which is
//     made live before the old one is made dead: a reader finds the old
//     entry or the new one, never neither, never a mix;
//   - a removed key's slot is made dead;
//   - when 3/4 of the slots are used (live or dead), the partition builds
//     a new table of the live entries and publishes it with one atomic
//     store; the old table is never written again, and readers still in
//     it read what it held when it was replaced.
//
// A reader loads the table once and probes it until it finds the key live
// or an empty slot. Every table keeps a quarter of its slots empty, so
// probes end. The slots hold no pointer unless the key or value does: the
// garbage collector does not scan the table of a registry of pointer-free
// keys and values.

// Slot states (the low bits of a slot's state word; the other bits are
// the key's hash).
const (
	slotLive = 1
	slotDead = 2
)

// uslot is one slot of a utable. id, key and val are written once, before
// the slot's state is first stored. pos is the key's index in its holder's
// pidKeys.list (so that removing a key is O(1)): it is read and written by
// writers only, under the partition's lock; readers never read it.
//
// Entries keep the process's number only: every process that holds
// entries is a live local process, so its PID is rebuilt from the node's
// name and creation.
type uslot[K comparable, V any] struct {
	state atomic.Uint64
	id    uint64 // PID.ID() of the holder
	key   K
	val   V
	pos   int32
}

// utable is one generation of a partition's slots.
type utable[K comparable, V any] struct {
	slots []uslot[K, V]
	mask  uint64
}

// uindex is a unique partition's table. t is read by anyone; used and live
// are guarded by the partition's mu.
type uindex[K comparable, V any] struct {
	t    atomic.Pointer[utable[K, V]]
	_    [64]byte // readers read t, writers write the fields below
	used int      // slots of t not empty (live or dead)
	live int      // live slots of t
}

const utableMinSlots = 8

func newUindex[K comparable, V any]() *uindex[K, V] {
	x := &uindex[K, V]{}
	x.clearLocked()
	return x
}

// clearLocked drops every entry.
func (x *uindex[K, V]) clearLocked() {
	x.t.Store(newUtable[K, V](utableMinSlots))
	x.used, x.live = 0, 0
}

func newUtable[K comparable, V any](n int) *utable[K, V] {
	return &utable[K, V]{slots: make([]uslot[K, V], n), mask: uint64(n - 1)}
}

func liveState(h uint64) uint64 { return h&^3 | slotLive }

// A key's probe sequence starts at slot (h>>2)&mask: its hash's bits
// above the two that the state word uses for flags, so that a rebuild
// finds it from the state alone.

// find returns the live slot of key (whose hash is h), or nil. It takes no
// lock and is safe at any time; the slot's id and val may be read without
// one.
func (x *uindex[K, V]) find(h uint64, key K) *uslot[K, V] {
	t := x.t.Load()
	want := liveState(h)
	for i := (h >> 2) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		st := s.state.Load()
		if st == 0 {
			return nil
		}
		if st == want && s.key == key {
			return s
		}
	}
}

// probeLocked looks key up for a writer: it returns the index of its live
// slot, or -1, and the index of the empty slot that ends its probe
// sequence.
func (x *uindex[K, V]) probeLocked(h uint64, key K) (at, free int) {
	t := x.t.Load()
	want := liveState(h)
	at = -1
	for i := (h >> 2) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		st := s.state.Load()
		if st == 0 {
			return at, int(i)
		}
		if at < 0 && st == want && s.key == key {
			at = int(i)
		}
	}
}

// getLocked returns the live slot of key and its index, or nil, for a
// writer.
func (x *uindex[K, V]) getLocked(h uint64, key K) (int, *uslot[K, V]) {
	at, _ := x.probeLocked(h, key)
	if at < 0 {
		return -1, nil
	}
	return at, &x.t.Load().slots[at]
}

// reserveLocked makes sure one more slot may be used, building a new table
// if needed.
func (x *uindex[K, V]) reserveLocked() {
	if (x.used+1)*4 > len(x.t.Load().slots)*3 {
		x.rebuildLocked(x.live + 1)
	}
}

// putLocked stores a live entry for key in the empty slot free (as
// probeLocked found it in the current table, after reserveLocked).
func (x *uindex[K, V]) putLocked(free int, h uint64, key K, id uint64, val V, pos int32) {
	s := &x.t.Load().slots[free]
	s.id, s.key, s.val, s.pos = id, key, val, pos
	s.state.Store(liveState(h))
	x.used++
	x.live++
}

// setLocked gives key, which has a live slot, a new holder and value.
func (x *uindex[K, V]) setLocked(h uint64, key K, id uint64, val V, pos int32) {
	x.reserveLocked()
	at, free := x.probeLocked(h, key)
	x.putLocked(free, h, key, id, val, pos) // live before the old one is dead
	x.killLocked(at)
}

// killLocked removes the live entry in slot at.
func (x *uindex[K, V]) killLocked(at int) {
	s := &x.t.Load().slots[at]
	s.state.Store(s.state.Load()&^3 | slotDead)
	x.live--
}

// rebuildLocked publishes a new table for at least n entries, at most 3/8
// full once they are in, holding the current live entries and no dead
// ones.
func (x *uindex[K, V]) rebuildLocked(n int) {
	size := utableMinSlots
	for size*3 < n*8 {
		size *= 2
	}
	old := x.t.Load()
	t := newUtable[K, V](size)
	for i := range old.slots {
		o := &old.slots[i]
		st := o.state.Load()
		if st&3 != slotLive {
			continue
		}
		j := (st >> 2) & t.mask
		for t.slots[j].state.Load() != 0 {
			j = (j + 1) & t.mask
		}
		s := &t.slots[j]
		s.id, s.key, s.val, s.pos = o.id, o.key, o.val, o.pos
		s.state.Store(st)
	}
	x.used = x.live
	x.t.Store(t)
}

// each calls f with every live slot, under the partition's lock (read or
// write).
func (x *uindex[K, V]) each(f func(*uslot[K, V])) {
	t := x.t.Load()
	for i := range t.slots {
		if s := &t.slots[i]; s.state.Load()&3 == slotLive {
			f(s)
		}
	}
}
