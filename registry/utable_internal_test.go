package registry

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// The tests of the unique partitions' table drive a uindex as the
// registry's writers do (under the tables' locks) and compare it with a
// map, or read it from other goroutines while it grows, splits and loses
// keys.

type tkey = int

// tindex is a uindex with its hash.
type tindex struct {
	x    *uindex[tkey, int]
	seed maphash.Seed
	weak bool // keep the slot bits of every hash equal: long probe chains
}

func newTindex(weak bool) *tindex {
	return &tindex{x: newUindex[tkey, int](), seed: maphash.MakeSeed(), weak: weak}
}

func (ti *tindex) hash(k tkey) uint64 {
	h := maphash.Comparable(ti.seed, k)
	if ti.weak {
		h &^= 1<<14 - 1 // every key of a table starts its probe at slot 0
	}
	return h
}

// set makes k held by id with value v (a new entry, or a new holder and
// value for it), as registerUnique and UpdateValue do.
func (ti *tindex) set(k tkey, id uint64, v int) {
	h := ti.hash(k)
	t := ti.x.lockRoom(h)
	at, free := t.probe(h, k)
	t.put(free, h, k, id, v)
	if at >= 0 {
		t.kill(at)
	}
	t.mu.Unlock()
}

// del removes k if held by id.
func (ti *tindex) del(k tkey, id uint64) bool { return ti.x.killHeld(ti.hash(k), k, id) }

func (ti *tindex) get(k tkey) (id uint64, v int, ok bool) {
	if s := ti.x.find(ti.hash(k), k); s != nil {
		return s.id, s.val, true
	}
	return 0, 0, false
}

type tentry struct {
	id uint64
	v  int
}

// check compares every key of the domain, and an iteration of every
// entry, with the model.
func (ti *tindex) check(t interface{ Fatalf(string, ...any) }, m map[tkey]tentry, domain int) {
	for k := range domain {
		id, v, ok := ti.get(k)
		want, wok := m[k]
		if ok != wok || (ok && (id != want.id || v != want.v)) {
			t.Fatalf("key %d: (%d, %d, %v), model (%d, %d, %v)", k, id, v, ok, want.id, want.v, wok)
		}
	}
	seen := 0
	ti.x.each(func(s *uslot[tkey, int]) {
		seen++
		if want, ok := m[s.key]; !ok || want.id != s.id || want.v != s.val {
			t.Fatalf("each: key %d (%d, %d), model %v %v", s.key, s.id, s.val, want, ok)
		}
	})
	if seen != len(m) {
		t.Fatalf("each: %d entries, model %d", seen, len(m))
	}
}

// TestUtableAgainstMap runs random inserts, updates, takeovers, deletes
// (single and in bulk, to make tables grow, fill with tombstones, be
// rebuilt and split) and compares the table with a map after every step.
func TestUtableAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		weak := rapid.Bool().Draw(rt, "weak")
		domain := rapid.SampledFrom([]int{16, 300, 3000}).Draw(rt, "domain")
		ti := newTindex(weak)
		m := map[tkey]tentry{}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 5).Draw(rt, "op"); op {
			case 0, 1: // set one key
				k := rapid.IntRange(0, domain-1).Draw(rt, "key")
				id := rapid.Uint64Range(1, 3).Draw(rt, "id")
				v := rapid.Int().Draw(rt, "value")
				ti.set(k, id, v)
				m[k] = tentry{id, v}
			case 2: // delete one key if held by id
				k := rapid.IntRange(0, domain-1).Draw(rt, "key")
				id := rapid.Uint64Range(1, 3).Draw(rt, "id")
				e, ok := m[k]
				want := ok && e.id == id
				if got := ti.del(k, id); got != want {
					rt.Fatalf("del(%d, %d) = %v, model %v", k, id, got, want)
				}
				if want {
					delete(m, k)
				}
			case 3: // set a range of keys
				lo := rapid.IntRange(0, domain-1).Draw(rt, "lo")
				n := rapid.IntRange(1, domain).Draw(rt, "n")
				for k := lo; k < min(lo+n, domain); k++ {
					ti.set(k, 1, k)
					m[k] = tentry{1, k}
				}
			case 4: // delete a range of keys
				lo := rapid.IntRange(0, domain-1).Draw(rt, "lo")
				n := rapid.IntRange(1, domain).Draw(rt, "n")
				for k := lo; k < min(lo+n, domain); k++ {
					if e, ok := m[k]; ok {
						if !ti.del(k, e.id) {
							rt.Fatalf("del(%d, %d) failed", k, e.id)
						}
						delete(m, k)
					}
				}
			case 5: // clear
				if rapid.IntRange(0, 9).Draw(rt, "clear") == 0 {
					ti.x.clear()
					clear(m)
				}
			}
			ti.check(rt, m, domain)
		}
	})
}

// TestUtableConcurrentReaders reads a table while a writer grows it,
// splits it, updates values and deletes keys, under -race: stable keys are
// always found with their value, churned keys are found whole (holder and
// value from the same write) or not at all, absent keys never.
func TestUtableConcurrentReaders(t *testing.T) {
	for _, weak := range []bool{false, true} {
		ti := newTindex(weak)
		const (
			stable = 2000 // keys 0..stable-1, set before the readers start, never removed
			churn  = 6000 // keys stable..stable+churn-1: set, updated, deleted
			absent = -1   // and below: never set
		)
		for k := range stable {
			ti.set(k, uint64(k+1), k*10)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		fail := func(s string) {
			select {
			case errs <- s:
			default:
			}
			stop.Store(true)
		}
		for r := range 3 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), 9))
				for !stop.Load() {
					k := rng.IntN(stable)
					if id, v, ok := ti.get(k); !ok || id != uint64(k+1) || v != k*10 {
						fail("stable key lost or torn")
						return
					}
					k = stable + rng.IntN(churn)
					// A churned key is written with holder k+1+g and value
					// (k+1+g)*7 for some generation g.
					if id, v, ok := ti.get(k); ok && (id <= uint64(k) || v != int(id)*7) {
						fail("torn churned entry")
						return
					}
					if _, _, ok := ti.get(absent - rng.IntN(1000)); ok {
						fail("absent key found")
						return
					}
				}
			})
		}
		rng := rand.New(rand.NewPCG(7, 7))
		held := map[int]uint64{}
		for range 30_000 {
			if stop.Load() {
				break
			}
			k := stable + rng.IntN(churn)
			switch id, ok := held[k]; {
			case !ok || rng.IntN(3) == 0:
				nid := uint64(k+1) + uint64(rng.IntN(5))
				ti.set(k, nid, int(nid)*7)
				held[k] = nid
			default:
				if !ti.del(k, id) {
					fail("delete failed")
				}
				delete(held, k)
			}
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("weak=%v: %s", weak, e)
		}
		m := map[tkey]tentry{}
		for k := range stable {
			m[k] = tentry{uint64(k + 1), k * 10}
		}
		for k, id := range held {
			m[k] = tentry{id, int(id) * 7}
		}
		ti.check(t, m, stable+churn)
		if d := ti.x.dir.Load(); d.depth == 0 {
			t.Errorf("weak=%v: the table never split", weak)
		}
	}
}

// A table's header is one cache line: its size class is 64 bytes, so a
// writer's lock and its read of the slots share one miss (see utable).
func TestUtableHeaderIsOneCacheLine(t *testing.T) {
	if s := unsafe.Sizeof(utable[string, any]{}); s > 64 {
		t.Fatalf("utable is %d bytes, want at most 64", s)
	}
}

// A slot reference gives a reader the first slot and the mask of every
// table size up to utableMaxSlots, and sends it to the table for larger
// ones.
func TestSlotRefEncodesTableSize(t *testing.T) {
	for n := utableMinSlots; n <= utableMaxSlots; n *= 2 {
		tb := newUtable[string, struct{}](n, 0)
		base, mask := decodeRef(tb.slotRef())
		if base != unsafe.Pointer(&tb.slots[0]) || mask != uint64(n-1) {
			t.Fatalf("%d slots: decoded %p and mask %d, want %p and %d", n, base, mask, &tb.slots[0], n-1)
		}
	}
	if base, _ := decodeRef(newUtable[int, int](2*utableMaxSlots, 0).slotRef()); base != nil {
		t.Fatalf("a table of %d slots decoded to %p, want nil (read the table)", 2*utableMaxSlots, base)
	}
}

// A table larger than utableMaxSlots, which only a hash that puts hundreds
// of keys on the same directory bits makes, is read through its header.
func TestUtableFindsInTableTooLargeForRef(t *testing.T) {
	ti := newTindex(false)
	big := newUtable[tkey, int](4*utableMaxSlots, 0)
	for k := range 2 * utableMaxSlots {
		h := ti.hash(k)
		_, free := big.probe(h, k)
		big.put(free, h, k, uint64(k+1), -k)
	}
	d := ti.x.dir.Load()
	publish(d, 0, big)
	for k := range 2 * utableMaxSlots {
		if id, v, ok := ti.get(k); !ok || id != uint64(k+1) || v != -k {
			t.Fatalf("key %d: (%d, %d, %v)", k, id, v, ok)
		}
	}
	if _, _, ok := ti.get(-1); ok {
		t.Fatal("found a key never put")
	}
}

// A key a writer has set is found by every read that starts after the
// writer said so, while other writers split and replace tables. It fails
// at once if a new table's slot references are not published; the narrow
// window that publishing them after the table pointers would open (see
// publish) is too short for it to catch reliably.
func TestUtableSetVisibleAfterReturn(t *testing.T) {
	const writers, perWriter = 4, 30_000
	ti := newTindex(false)
	var done [writers]atomic.Int64 // keys set by writer w: w, w+writers, ... below done[w]*writers
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := i*writers + w
				ti.set(k, uint64(w+1), k)
				done[w].Store(int64(i + 1))
			}
		})
	}
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for !stop.Load() {
				w := rng.IntN(writers)
				n := int(done[w].Load())
				if n == 0 {
					continue
				}
				// The newest key of writer w, and one before it.
				for _, i := range []int{n - 1, rng.IntN(n)} {
					k := i*writers + w
					if _, v, ok := ti.get(k); !ok || v != k {
						select {
						case errs <- fmt.Sprintf("key %d, set before the read began, not found", k):
						default:
						}
						stop.Store(true)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
