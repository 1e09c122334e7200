package gotp

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// The process table against a map: random puts (of fresh, increasing IDs,
// as a node hands them out), deletes and lookups, with every read compared.
func TestProcTableAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tab procTable
		tab.init()
		model := map[uint64]*Process{}
		next := uint64(0)
		ids := []uint64{}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				// Skip some IDs: other nodes' or exited processes' gaps.
				next += rapid.Uint64Range(1, 200).Draw(rt, "gap")
				p := &Process{id: next}
				tab.put(p)
				model[next] = p
				ids = append(ids, next)
			},
			"delete": func(rt *rapid.T) {
				if len(ids) == 0 {
					rt.Skip("nothing put")
				}
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				tab.delete(id)
				delete(model, id)
			},
			"get": func(rt *rapid.T) {
				id := rapid.Uint64Range(1, next+10).Draw(rt, "id")
				if got, want := tab.get(id), model[id]; got != want {
					rt.Fatalf("get(%d) = %v, want %v", id, got, want)
				}
			},
			"": func(rt *rapid.T) {
				var want []uint64
				for id := range model {
					want = append(want, id)
				}
				slices.Sort(want)
				var got []uint64
				for _, p := range tab.all() {
					got = append(got, p.id)
				}
				if !slices.Equal(got, want) {
					rt.Fatalf("all() = %v, want %v", got, want)
				}
			},
		})
	})
}

// Readers take no lock: while writers put and delete (so that tables are
// replaced again and again), a reader always finds a process that is in
// the table for the whole of its lookup, and never finds one that never
// was. Run with -race.
func TestProcTableConcurrentReaders(t *testing.T) {
	var tab procTable
	tab.init()
	const stable = 500
	for id := uint64(1); id <= stable; id++ {
		tab.put(&Process{id: id})
	}
	var next atomic.Uint64
	next.Store(stable)
	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	for range 2 {
		writers.Go(func() {
			for i := 0; i < 20000; i++ {
				id := next.Add(1)
				tab.put(&Process{id: id})
				tab.delete(id)
			}
		})
	}
	var bad atomic.Int64
	for r := range 2 {
		readers.Go(func() {
			for i := uint64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := 1 + (i*7+uint64(r))%stable
				if p := tab.get(id); p == nil || p.id != id {
					bad.Add(1)
				}
				if p := tab.get(1 << 62); p != nil {
					bad.Add(1)
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d wrong lookups", n)
	}
	if got := len(tab.all()); got != stable {
		t.Fatalf("all() has %d processes, want %d", got, stable)
	}
}

// A Process is 256 bytes, a size class of its own size: every Process then
// starts on a cache line, and the fields a send and a receive touch (the
// first 64 bytes) are one line.
func TestProcessIsFourCacheLines(t *testing.T) {
	if s := unsafe.Sizeof(procShard{}); s != 64 {
		t.Fatalf("a process table shard is %d bytes, want 64 (one cache line)", s)
	}
	if s := unsafe.Sizeof(Process{}); s != 256 {
		t.Fatalf("Process is %d bytes, want 256", s)
	}
	if o := unsafe.Offsetof(Process{}.wake); o >= 64 {
		t.Fatalf("wake at offset %d, want it in the first 64 bytes", o)
	}
}
