package registry

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The entries of a unique partition live in a uindex: a directory of
// utables (extendible hashing, as Go's own maps do), each an
// open-addressing hash table (linear probing) of at most utableMaxSlots
// slots that hold the entries themselves, so that a read takes no lock and
// usually touches one cache line of entries. Each table has its own
// writers' mutex, so writers contend only when their keys fall in the same
// small table. Readers and writers share memory through atomic words only:
// the directory pointer, its table pointers, and each slot's state word:
//
//	0                  empty: the slot ends every probe sequence through it
//	h&^3 | slotLive    the entry of a key whose hash is h
//	h&^3 | slotDead    a removed entry (a tombstone)
//
// A slot is written once: its holder, key and value are written while it
// is empty, then its state is stored (live), and later perhaps stored
// again (dead); a dead slot is never reused. So a reader that loads a live
// state may read the slot's other fields at leisure: they do not change
// any more. Hence:
//
//   - a new key goes into the empty slot that ends its probe sequence;
//   - a new value or a new holder for a key goes into a new slot, which is
//     made live before the old one is made dead: a reader finds the old
//     entry or the new one, never neither, never a mix;
//   - a removed key's slot is made dead;
//   - when 3/4 of a table's slots are used (live or dead), a new table of
//     its live entries replaces it (twice as large, or as large if many
//     were dead), or two of them, each for the keys with one more bit of
//     hash in common, split it (doubling the directory first if needed);
//     they are published with atomic stores of the directory's pointers.
//     A replaced table or directory is never written again: readers still
//     in it read what it held when it was replaced, and writers that reach
//     it find it retired and start again. Growth thus copies one small
//     table at a time, and holds up only the writers of that table.
//
// A reader loads the directory, then the slot reference of the key's table
// (its slots and their number, in one word: see slotRef), and probes the
// slots until it finds the key live or an empty slot. Every table keeps a quarter of
// its slots empty, so probes end. A key's directory index is the
// directory's depth bits of its hash after the top 16 (which choose the
// partition); its probe starts at slot (h>>2)&mask, from the low bits.
//
// The slots hold no pointer unless the key or the value does: the garbage
// collector does not scan the tables of a registry of pointer-free keys and
// values, however large.

// Slot states (the low bits of a slot's state word; the other bits are
// the key's hash).
const (
	slotLive = 1
	slotDead = 2
)

// uslot is one slot of a utable. id, key and val are written once, before
// the slot's state is first stored.
//
// Entries keep the process's number only: every process that holds
// entries is a live local process, so its PID is rebuilt from the node's
// name and creation.
type uslot[K comparable, V any] struct {
	_     [0]atomic.Uint64 // state must be 64-bit aligned, also on 32-bit platforms
	state uint64           // atomic once the table is published (see load and store)
	key   K
	val   V
	id    uint64 // PID.ID() of the holder; last, so that an empty V (a set of names) adds no padding
}

// load and store access a slot's state in a published table. A table
// being built is written with plain stores: atomic ones (a full barrier
// each on amd64) would wait for every cache miss of the copy in turn.
func (s *uslot[K, V]) load() uint64    { return atomic.LoadUint64(&s.state) }
func (s *uslot[K, V]) store(st uint64) { atomic.StoreUint64(&s.state, st) }

// utable is one table of a partition's directory. slots, mask and depth
// never change; the rest is guarded by mu. The struct fits in one cache
// line (64 bytes, the size class it is allocated from), so that a writer,
// which locks the table and then reads where its slots are, takes one
// cache miss for both; readers, which read slots and mask only, share that
// line with the table's writers, which write it once per registration in
// that table.
type utable[K comparable, V any] struct {
	mu    sync.Mutex
	slots []uslot[K, V]
	mask  uint64
	depth uint  // local depth: the table holds the keys whose directory index starts with the same depth bits
	used  int32 // slots not empty (live or dead); at most 3/4 of len(slots)
	live  int32 // live slots
	gone  bool  // replaced in the directory: writers must start again
}

// udir is a partition's directory: 1<<depth table pointers, each table
// appearing 1<<(depth - table depth) times in a row, for writers, and as
// many slot references (see slotRef), for readers. A reader thus goes from
// the directory straight to the key's slot: the tables' headers, scattered
// over the heap and written by writers, stay off its path (one dependent
// load less per lookup, often a cache miss in a large registry: W2 1.11×,
// see BENCHMARKS.md).
type udir[K comparable, V any] struct {
	depth  uint
	tables []atomic.Pointer[utable[K, V]]
	refs   []atomic.Pointer[byte]
}

// Slot references. A table's slot reference points into its first slot,
// offset by the table's size code: log2(len(slots)/utableMinSlots) for the
// sizes up to utableMaxSlots, or refBig for a larger table (which only a
// hash that puts hundreds of keys on the same 40 bits makes), whose reader
// reads its size from the table. Slots are 8-byte aligned (they start with
// a 64-bit word), so the code fits in the pointer's low 3 bits, and the
// pointer still points into the slots (a slot is at least 16 bytes), which
// keeps them alive.
const (
	refCodeMask = 7
	refBig      = 7
)

// slotRef returns t's slot reference.
func (t *utable[K, V]) slotRef() *byte {
	code := uintptr(refBig)
	if n := len(t.slots); n <= utableMaxSlots {
		code = uintptr(bits.TrailingZeros(uint(n / utableMinSlots)))
	}
	return (*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t.slots)), code))
}

// uindex is a unique partition's entries. dir is read by anyone; it and
// the directory's pointers are written under dirMu, which writers take
// (after a table's mu) only to replace a table.
type uindex[K comparable, V any] struct {
	dir   atomic.Pointer[udir[K, V]]
	dirMu sync.Mutex
}

const (
	utableMinSlots = 16
	utableMaxSlots = 1024 // a table this large splits rather than grows (a size code of at most 6, see slotRef)
	dirShift       = 16   // the hash's top bits choose the partition (MaxPartitions = 1<<16)
	dirMaxDepth    = 24   // past this depth, tables grow instead (never with a sound hash: 1<<24 tables)
)

func newUindex[K comparable, V any]() *uindex[K, V] {
	x := &uindex[K, V]{}
	x.clear()
	return x
}

// clear drops every entry. Writers still in the old tables write to
// tables no one reads any more (see replaceLocked).
func (x *uindex[K, V]) clear() {
	d := &udir[K, V]{tables: make([]atomic.Pointer[utable[K, V]], 1), refs: make([]atomic.Pointer[byte], 1)}
	t := newUtable[K, V](utableMinSlots, 0)
	d.refs[0].Store(t.slotRef())
	d.tables[0].Store(t)
	x.dirMu.Lock()
	x.dir.Store(d)
	x.dirMu.Unlock()
}

func newUtable[K comparable, V any](n int, depth uint) *utable[K, V] {
	return &utable[K, V]{slots: make([]uslot[K, V], n), mask: uint64(n - 1), depth: depth}
}

func liveState(h uint64) uint64 { return h&^3 | slotLive }

// dirIndex returns the index of hash h (or of a state word) in a directory
// of the given depth.
func dirIndex(h uint64, depth uint) uint64 { return (h << dirShift) >> (64 - depth) }

// table returns the table of hash h (for writers: readers use find).
func (x *uindex[K, V]) table(h uint64) *utable[K, V] {
	d := x.dir.Load()
	return d.tables[dirIndex(h, d.depth)].Load()
}

// find returns the live slot of key (whose hash is h), or nil. It takes no
// lock and is safe at any time; the slot's id and val may be read without
// one. It reaches the slots through the directory's slot references, not
// through the table (see slotRef).
func (x *uindex[K, V]) find(h uint64, key K) *uslot[K, V] {
	d := x.dir.Load()
	i := dirIndex(h, d.depth)
	base, mask := decodeRef(d.refs[i].Load())
	if base == nil {
		t := d.tables[i].Load()
		base, mask = unsafe.Pointer(unsafe.SliceData(t.slots)), t.mask
	}
	want := liveState(h)
	size := unsafe.Sizeof(uslot[K, V]{})
	for j := (h >> 2) & mask; ; j = (j + 1) & mask {
		s := (*uslot[K, V])(unsafe.Add(base, uintptr(j)*size))
		st := s.load()
		if st == 0 {
			return nil
		}
		if st == want && s.key == key {
			return s
		}
	}
}

// decodeRef returns the first slot and the mask of the table whose slot
// reference is ref, or nil if its reader must read them from the table.
func decodeRef(ref *byte) (base unsafe.Pointer, mask uint64) {
	code := uintptr(unsafe.Pointer(ref)) & refCodeMask
	if code == refBig {
		return nil, 0
	}
	return unsafe.Add(unsafe.Pointer(ref), -int(code)), utableMinSlots<<code - 1
}

// lock returns the table of hash h, locked. Before it takes the table's
// lock (a cache miss on the table's header), it prefetches the key's first
// slot through the directory's slot reference, so that the slot's miss,
// which the writer's probe takes next, overlaps the lock's.
func (x *uindex[K, V]) lock(h uint64) *utable[K, V] {
	for {
		d := x.dir.Load()
		i := dirIndex(h, d.depth)
		if base, mask := decodeRef(d.refs[i].Load()); base != nil {
			prefetch(unsafe.Add(base, uintptr((h>>2)&mask)*unsafe.Sizeof(uslot[K, V]{})))
		}
		t := d.tables[i].Load()
		t.mu.Lock()
		if !t.gone {
			return t
		}
		t.mu.Unlock()
	}
}

// lockRoom returns the table of hash h, locked, with room for one more
// slot: it replaces the table first if needed.
func (x *uindex[K, V]) lockRoom(h uint64) *utable[K, V] {
	for {
		t := x.lock(h)
		if (int(t.used)+1)*4 <= len(t.slots)*3 {
			return t
		}
		x.replaceLocked(t, h)
		t.mu.Unlock()
	}
}

// probe looks key up for a writer (under t.mu): it returns the index of its
// live slot in t, or -1, and the index of the empty slot that ends its
// probe sequence.
func (t *utable[K, V]) probe(h uint64, key K) (at, free int) {
	want := liveState(h)
	at = -1
	for i := (h >> 2) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		st := s.load()
		if st == 0 {
			return at, int(i)
		}
		if at < 0 && st == want && s.key == key {
			at = int(i)
		}
	}
}

// put stores a live entry for key in t's empty slot free (as probe found
// it, with room). t.mu is held.
func (t *utable[K, V]) put(free int, h uint64, key K, id uint64, val V) {
	s := &t.slots[free]
	s.id, s.key, s.val = id, key, val
	s.store(liveState(h))
	t.used++
	t.live++
}

// kill removes the live entry in t's slot at. t.mu is held.
func (t *utable[K, V]) kill(at int) {
	s := &t.slots[at]
	s.store(s.load()&^3 | slotDead)
	t.live--
}

// replaceLocked replaces t, the table of hash h, which is full: by a table
// twice as large, or as large (if many of its slots are dead), or by two
// tables of one more bit of depth. t.mu is held; t is gone afterwards.
func (x *uindex[K, V]) replaceLocked(t *utable[K, V], h uint64) {
	x.dirMu.Lock()
	defer x.dirMu.Unlock()
	t.gone = true
	if x.table(h) != t {
		return // cleared meanwhile
	}
	size := sizeFor(int(t.live) + 1)
	d := x.dir.Load()
	if size <= utableMaxSlots || t.depth >= dirMaxDepth {
		nt := newUtable[K, V](size, t.depth)
		t.copyInto(func(uint64) *utable[K, V] { return nt })
		publish(d, h, nt)
		return
	}
	if t.depth == d.depth {
		n := 2 * len(d.tables)
		nd := &udir[K, V]{depth: d.depth + 1, tables: make([]atomic.Pointer[utable[K, V]], n), refs: make([]atomic.Pointer[byte], n)}
		for i := range d.tables {
			tt, ref := d.tables[i].Load(), d.refs[i].Load()
			nd.tables[2*i].Store(tt)
			nd.tables[2*i+1].Store(tt)
			nd.refs[2*i].Store(ref)
			nd.refs[2*i+1].Store(ref)
		}
		x.dir.Store(nd)
		d = nd
	}
	// t holds at most 3/4 utableMaxSlots entries: either half fits in a
	// table of utableMaxSlots.
	depth := t.depth + 1
	t0 := newUtable[K, V](utableMaxSlots, depth)
	t1 := newUtable[K, V](utableMaxSlots, depth)
	t.copyInto(func(st uint64) *utable[K, V] {
		if dirIndex(st, depth)&1 == 1 {
			return t1
		}
		return t0
	})
	bit := uint64(1) << (63 - dirShift - t.depth) // the hash bit that tells t0 from t1
	publish(d, h&^bit, t0)
	publish(d, h|bit, t1)
}

// sizeFor returns the number of slots of a new table for n entries: a
// power of two, at least twice n.
func sizeFor(n int) int {
	size := utableMinSlots
	for size < 2*n {
		size *= 2
	}
	return size
}

// publish stores t in the entries of directory d for the hashes whose
// first t.depth directory bits are those of h: its slot references first,
// so that when a writer finds t in the directory, and its registration
// there returns, every reader finds t's slots too.
func publish[K comparable, V any](d *udir[K, V], h uint64, t *utable[K, V]) {
	lo := dirIndex(h, t.depth) << (d.depth - t.depth)
	n := uint64(1) << (d.depth - t.depth)
	ref := t.slotRef()
	for i := range n {
		d.refs[lo+i].Store(ref)
	}
	for i := range n {
		d.tables[lo+i].Store(t)
	}
}

// copyInto copies each live entry of t into the table into returns for
// its state word: a new table, not yet published, so written with plain
// stores.
func (t *utable[K, V]) copyInto(into func(st uint64) *utable[K, V]) {
	for i := range t.slots {
		o := &t.slots[i]
		st := o.load()
		if st&3 != slotLive {
			continue
		}
		nt := into(st)
		j := (st >> 2) & nt.mask
		for nt.slots[j].state != 0 {
			j = (j + 1) & nt.mask
		}
		s := &nt.slots[j]
		s.state, s.id, s.key, s.val = st, o.id, o.key, o.val
		nt.used++
		nt.live++
	}
}

// each calls f with every live slot, one table at a time, under dirMu
// (so that no table is replaced meanwhile). f must not call the registry.
func (x *uindex[K, V]) each(f func(*uslot[K, V])) {
	x.dirMu.Lock()
	defer x.dirMu.Unlock()
	d := x.dir.Load()
	for i := uint64(0); i < uint64(len(d.tables)); {
		t := d.tables[i].Load()
		for j := range t.slots {
			if s := &t.slots[j]; s.load()&3 == slotLive {
				f(s)
			}
		}
		i += 1 << (d.depth - t.depth)
	}
}

// killHeld removes the entry of key (hash h) if process id holds it, and
// reports whether it did.
func (x *uindex[K, V]) killHeld(h uint64, key K, id uint64) bool {
	t := x.lock(h)
	defer t.mu.Unlock()
	if at, _ := t.probe(h, key); at >= 0 && t.slots[at].id == id {
		t.kill(at)
		return true
	}
	return false
}
