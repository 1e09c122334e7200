package registry

import (
	"sync/atomic"

	"github.com/gotp/gotp"
)

// bucket holds the entries of one key in one partition of a duplicate
// registry, grouped by process so that dropping a process's entries is
// O(its entries) rather than O(the key's entries).
type bucket[V any] struct {
	gs  []dgroup[V]
	idx map[uint64]int32 // pid.ID() → index in gs, once gs is large (pids are local: IDs are unique)
	n   int              // entries

	// snap is Dispatch's snapshot of the entries while they do not change:
	// built under the partition's read lock by the first Dispatch that
	// needs it (two may build equal ones at once: either is kept), shared
	// by later ones, and dropped by every change (made under the write
	// lock). A snapshot is never written once built.
	snap atomic.Pointer[[]Entry[V]]
}

// dgroup is one process's entries under a key: first, then more.
type dgroup[V any] struct {
	id    uint64 // PID.ID() of a local process (see uentry)
	first V
	more  []V
}

const bucketIndexAt = 16 // below this many processes a scan beats a map

func (b *bucket[V]) find(pid gotp.PID) int {
	id := pid.ID()
	if b.idx != nil {
		if i, ok := b.idx[id]; ok {
			return int(i)
		}
		return -1
	}
	for i := range b.gs {
		if b.gs[i].id == id {
			return i
		}
	}
	return -1
}

func (b *bucket[V]) add(pid gotp.PID, v V) {
	b.snap.Store(nil)
	b.n++
	if i := b.find(pid); i >= 0 {
		b.gs[i].more = append(b.gs[i].more, v)
		return
	}
	b.gs = append(b.gs, dgroup[V]{id: pid.ID(), first: v})
	if b.idx != nil {
		b.idx[pid.ID()] = int32(len(b.gs) - 1)
	} else if len(b.gs) > bucketIndexAt {
		b.idx = make(map[uint64]int32, len(b.gs)*2)
		for i := range b.gs {
			b.idx[b.gs[i].id] = int32(i)
		}
	}
}

// removePID removes the entries of pid whose values match accepts (all if
// match is nil) and returns how many.
func (b *bucket[V]) removePID(pid gotp.PID, match func(V) bool) int {
	i := b.find(pid)
	if i < 0 {
		return 0
	}
	b.snap.Store(nil)
	g := &b.gs[i]
	if match == nil {
		removed := 1 + len(g.more)
		b.dropGroup(i)
		b.n -= removed
		return removed
	}
	vals := make([]V, 0, 1+len(g.more))
	if !match(g.first) {
		vals = append(vals, g.first)
	}
	for _, v := range g.more {
		if !match(v) {
			vals = append(vals, v)
		}
	}
	removed := 1 + len(g.more) - len(vals)
	b.n -= removed
	if len(vals) == 0 {
		b.dropGroup(i)
		return removed
	}
	g.first, g.more = vals[0], vals[1:]
	if len(g.more) == 0 {
		g.more = nil
	}
	return removed
}

func (b *bucket[V]) dropGroup(i int) {
	last := len(b.gs) - 1
	if b.idx != nil {
		delete(b.idx, b.gs[i].id)
	}
	if i != last {
		b.gs[i] = b.gs[last]
		if b.idx != nil {
			b.idx[b.gs[i].id] = int32(i)
		}
	}
	b.gs[last] = dgroup[V]{}
	b.gs = b.gs[:last]
	if b.idx != nil && len(b.gs) <= bucketIndexAt/2 {
		b.idx = nil
	}
}

// appendEntries appends every entry to dst.
func (b *bucket[V]) appendEntries(dst []Entry[V], node string, creation uint32) []Entry[V] {
	for i := range b.gs {
		g := &b.gs[i]
		pid := gotp.NewPID(node, creation, g.id)
		dst = append(dst, Entry[V]{PID: pid, Value: g.first})
		for _, v := range g.more {
			dst = append(dst, Entry[V]{PID: pid, Value: v})
		}
	}
	return dst
}

// snapshot returns the entries, shared with other callers: they must not
// be modified. The partition's read (or write) lock is held.
func (b *bucket[V]) snapshot(node string, creation uint32) []Entry[V] {
	if p := b.snap.Load(); p != nil {
		return *p
	}
	es := b.appendEntries(make([]Entry[V], 0, b.n), node, creation)
	es = es[:len(es):len(es)] // an append by a caller copies
	b.snap.Store(&es)
	return es
}

// appendValues appends the values of pid to dst.
func (b *bucket[V]) appendValues(dst []V, pid gotp.PID) []V {
	if i := b.find(pid); i >= 0 {
		dst = append(dst, b.gs[i].first)
		dst = append(dst, b.gs[i].more...)
	}
	return dst
}
