package gotp

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// procTable is the node's map of live processes by PID.ID(). Every send
// to a local process looks its receiver up here, from any goroutine, so
// lookups take no lock and write no shared memory: two cores sending at
// once do not pass cache lines back and forth as they would through a
// lock's reader count. Spawns and exits write under a shard's mutex.
//
// Each shard is an open-addressing table (linear probing) of slots that
// are written once: a slot gets an ID and then its process, and when the
// process leaves the table only the process is cleared (the ID stays, so
// that probes go on past it). When 3/4 of the slots have been used, a new
// table of the live entries replaces the table, published with an atomic
// store; readers still in the old one find what it held, which is what
// they would have found a moment earlier. IDs are never reused (a node
// counts them up), so a reader that finds an ID finds the only process
// that ever had it. A process is put in the table before its PID is
// handed to anyone, so whoever looks a PID up loads the table after the
// put and finds it.
type procTable struct {
	shards [procShards]procShard
}

const (
	procShards   = 64
	procMinSlots = 16
)

type procShard struct {
	tab  atomic.Pointer[procSlots]
	mu   sync.Mutex // guards used and live, and writes to tab's slots
	used int        // slots with an ID in the current table
	live int        // slots with a process in the current table
	_    [32]byte   // keep shards on their own cache lines
}

type procSlots struct {
	mask  uint64
	slots []procSlot
}

type procSlot struct {
	id atomic.Uint64           // 0: never used
	p  atomic.Pointer[Process] // nil: not yet set, or gone
}

func (t *procTable) init() {
	for i := range t.shards {
		t.shards[i].tab.Store(newProcSlots(procMinSlots))
	}
}

func newProcSlots(n int) *procSlots {
	return &procSlots{mask: uint64(n - 1), slots: make([]procSlot, n)}
}

func (t *procTable) shard(id uint64) *procShard { return &t.shards[id%procShards] }

// home is the first slot of id's probe sequence: IDs of one shard are
// procShards apart, and consecutive ones take consecutive slots.
func (s *procSlots) home(id uint64) uint64 { return (id / procShards) & s.mask }

// get returns the live process with the given ID, or nil. It takes no lock.
func (t *procTable) get(id uint64) *Process {
	s := t.shard(id).tab.Load()
	for i := s.home(id); ; i = (i + 1) & s.mask {
		switch sid := s.slots[i].id.Load(); sid {
		case id:
			return s.slots[i].p.Load()
		case 0:
			return nil
		}
	}
}

// insert puts p in the empty slot that ends its probe sequence: its ID,
// then the process, so that a reader that finds the ID finds the process
// or nil (not yet there). The shard's mu is held, or s is not published.
func (s *procSlots) insert(p *Process) {
	i := s.home(p.id)
	for s.slots[i].id.Load() != 0 {
		i = (i + 1) & s.mask
	}
	s.slots[i].id.Store(p.id)
	s.slots[i].p.Store(p)
}

func (t *procTable) put(p *Process) {
	sh := t.shard(p.id)
	sh.mu.Lock()
	s := sh.tab.Load()
	if (sh.used+1)*4 > len(s.slots)*3 {
		s = sh.rebuild(s)
	}
	s.insert(p)
	sh.used++
	sh.live++
	sh.mu.Unlock()
}

func (t *procTable) delete(id uint64) {
	sh := t.shard(id)
	sh.mu.Lock()
	s := sh.tab.Load()
	for i := s.home(id); ; i = (i + 1) & s.mask {
		sid := s.slots[i].id.Load()
		if sid == 0 {
			break
		}
		if sid == id {
			if s.slots[i].p.Load() != nil {
				s.slots[i].p.Store(nil)
				sh.live--
			}
			break
		}
	}
	sh.mu.Unlock()
}

// rebuild publishes a table of old's live entries with room for more,
// and returns it. sh.mu is held.
func (sh *procShard) rebuild(old *procSlots) *procSlots {
	n := procMinSlots
	for n < 4*(sh.live+1) { // at most a quarter full: room to grow before the next rebuild
		n *= 2
	}
	s := newProcSlots(n)
	for i := range old.slots {
		p := old.slots[i].p.Load()
		if p == nil {
			continue
		}
		s.insert(p)
	}
	sh.used = sh.live
	sh.tab.Store(s)
	return s
}

// all returns every process in the table, sorted by spawn order.
func (t *procTable) all() []*Process {
	var out []*Process
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		s := sh.tab.Load()
		for j := range s.slots {
			if p := s.slots[j].p.Load(); p != nil {
				out = append(out, p)
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b *Process) int { return cmp.Compare(a.id, b.id) })
	return out
}

// each calls f for every live process, in no particular order, taking no
// lock: it reads each shard's current table as lookups do.
func (t *procTable) each(f func(*Process)) {
	for i := range t.shards {
		s := t.shards[i].tab.Load()
		for j := range s.slots {
			if p := s.slots[j].p.Load(); p != nil {
				f(p)
			}
		}
	}
}
