package registry_test

// Benchmarks W1–W4 (docs/bench/workloads.md),
// each reporting its figure with b.ReportMetric, with a plain sharded map
// of the same partitions as the baseline of W1 and W2. Run:
//
//	go test -run '^$' -bench 'W[1-4]' -count 5 ./registry/

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/registry"
)

const (
	w1Keys    = 1_000_000
	w1Writers = 8
	w2Readers = 8
	w2Lookups = 1_000_000
	w3Subs    = 10_000
	w3Sends   = 100
	w4Procs   = 100_000
)

// shardedMap is the baseline: a map per partition under an RWMutex,
// partitioned by the same hash as the registry.
type shardedMap[K comparable, V any] struct {
	seed   maphash.Seed
	shards []mapShard[K, V]
}

type mapShard[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
	_  [64]byte
}

func newShardedMap[K comparable, V any](parts int) *shardedMap[K, V] {
	s := &shardedMap[K, V]{seed: maphash.MakeSeed(), shards: make([]mapShard[K, V], parts)}
	for i := range s.shards {
		s.shards[i].m = make(map[K]V)
	}
	return s
}

func (s *shardedMap[K, V]) shard(k K) *mapShard[K, V] {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	hi, _ := bits.Mul64(maphash.Comparable(s.seed, k), uint64(len(s.shards)))
	return &s.shards[hi]
}

func (s *shardedMap[K, V]) Put(k K, v V) bool {
	sh := s.shard(k)
	sh.mu.Lock()
	_, taken := sh.m[k]
	if !taken {
		sh.m[k] = v
	}
	sh.mu.Unlock()
	return !taken
}

func (s *shardedMap[K, V]) Get(k K) (V, bool) {
	sh := s.shard(k)
	sh.mu.RLock()
	v, ok := sh.m[k]
	sh.mu.RUnlock()
	return v, ok
}

func benchNode(b *testing.B) *gotp.Node {
	b.Helper()
	n := gotp.NewNode(gotp.Options{Name: "bench"})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = n.Stop(ctx)
	})
	return n
}

// inProcesses runs f(i) in k processes at once, released together, and
// returns the time from release until the last one is done. The processes
// stay alive until keep is closed (so their entries stay), or exit at once
// if keep is nil.
func inProcesses(b *testing.B, n *gotp.Node, k int, keep <-chan struct{}, f func(p *gotp.Process, i int)) time.Duration {
	b.Helper()
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(k)
	done.Add(k)
	for i := range k {
		_, err := n.Spawn(func(p *gotp.Process) error {
			ready.Done()
			<-release
			f(p, i)
			done.Done()
			if keep != nil {
				<-keep
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ready.Wait()
	t0 := time.Now()
	close(release)
	done.Wait()
	return time.Since(t0)
}

func partitionSets() []int {
	if p := runtime.GOMAXPROCS(0); p > 1 {
		return []int{p, 1}
	}
	return []int{1}
}

// W1: unique registry, 1,000,000 distinct keys registered by 8 processes
// (125,000 each); partitions = GOMAXPROCS and 1.
func BenchmarkW1RegistryRegister(b *testing.B) {
	for _, parts := range partitionSets() {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				n := gotp.NewNode(gotp.Options{Name: "bench"})
				r, err := registry.Start[int, struct{}](context.Background(), n, registry.Options{Partitions: parts})
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				keep := make(chan struct{}) // writers stay alive, as in the anchor
				total += inProcesses(b, n, w1Writers, keep, func(p *gotp.Process, i int) {
					base := i * (w1Keys / w1Writers)
					for k := base; k < base+w1Keys/w1Writers; k++ {
						if err := r.Register(p, k, struct{}{}); err != nil {
							panic(err)
						}
					}
				})
				b.StopTimer()
				close(keep)
				_ = n.Stop(context.Background())
				b.StartTimer()
			}
			b.ReportMetric(float64(w1Keys)*float64(b.N)/total.Seconds(), "registrations/s")
		})
	}
}

// The W1 baseline: the same inserts into a plain sharded map, from 8
// goroutines.
func BenchmarkW1Baseline(b *testing.B) {
	for _, parts := range partitionSets() {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				m := newShardedMap[int, gotp.PID](parts)
				runtime.GC()
				var wg sync.WaitGroup
				t0 := time.Now()
				for i := range w1Writers {
					wg.Go(func() {
						base := i * (w1Keys / w1Writers)
						pid := gotp.NewPID("bench", 1, uint64(i+1))
						for k := base; k < base+w1Keys/w1Writers; k++ {
							m.Put(k, pid)
						}
					})
				}
				wg.Wait()
				total += time.Since(t0)
			}
			b.ReportMetric(float64(w1Keys)*float64(b.N)/total.Seconds(), "registrations/s")
		})
	}
}

// lcg is the anchor script's key generator (Numerical Recipes, mod 2^32).
func lcg(x uint32) uint32 { return x*1664525 + 1013904223 }

// W2: after W1, 8 processes each look up 1,000,000 random existing keys
// at once. "lookup" is Lookup (returns a slice, as Elixir's lookup/2
// returns a list); "find" is Find (no allocation).
func BenchmarkW2RegistryLookup(b *testing.B) {
	for _, parts := range partitionSets() {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			n := benchNode(b)
			r, err := registry.Start[int, struct{}](context.Background(), n, registry.Options{Partitions: parts})
			if err != nil {
				b.Fatal(err)
			}
			keep := make(chan struct{})
			defer close(keep)
			inProcesses(b, n, w1Writers, keep, func(p *gotp.Process, i int) {
				base := i * (w1Keys / w1Writers)
				for k := base; k < base+w1Keys/w1Writers; k++ {
					_ = r.Register(p, k, struct{}{})
				}
			})
			if c := r.Count(); c != w1Keys {
				b.Fatalf("count %d", c)
			}
			for _, mode := range []string{"lookup", "find"} {
				b.Run(mode, func(b *testing.B) {
					runtime.GC()
					b.ResetTimer()
					var total time.Duration
					for range b.N {
						total += inProcesses(b, n, w2Readers, nil, func(p *gotp.Process, i int) {
							x := uint32(12345 + i*7919)
							for range w2Lookups {
								x = lcg(x)
								k := int(x>>8) % w1Keys
								if mode == "lookup" {
									if es := r.Lookup(k); len(es) != 1 {
										panic("missing key")
									}
								} else if _, ok := r.Find(k); !ok {
									panic("missing key")
								}
							}
						})
					}
					b.ReportMetric(float64(w2Readers*w2Lookups)*float64(b.N)/total.Seconds(), "lookups/s")
				})
			}
		})
	}
}

// The W2 baseline: the same lookups in a plain sharded map.
func BenchmarkW2Baseline(b *testing.B) {
	for _, parts := range partitionSets() {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			m := newShardedMap[int, gotp.PID](parts)
			for k := range w1Keys {
				m.Put(k, gotp.NewPID("bench", 1, uint64(k%w1Writers+1)))
			}
			w2Read(b, func(i int) {
				x := uint32(12345 + i*7919)
				for range w2Lookups {
					x = lcg(x)
					if _, ok := m.Get(int(x>>8) % w1Keys); !ok {
						panic("missing key")
					}
				}
			})
		})
	}
}

// w2Read times b.N runs of w2Readers goroutines each running read(i)
// (its whole loop of w2Lookups lookups, so that the lookups themselves
// are not behind a call) and reports lookups/s.
func w2Read(b *testing.B, read func(i int)) {
	runtime.GC()
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range w2Readers {
			wg.Go(func() { read(i) })
		}
		wg.Wait()
		total += time.Since(t0)
	}
	b.ReportMetric(float64(w2Readers*w2Lookups)*float64(b.N)/total.Seconds(), "lookups/s")
}

// The W2 floor: the same lookups in one plain Go map, read with no lock at
// all (it is never written while read). No concurrent registry can be
// faster than this by much: what it measures is one hash and one cache
// miss per lookup, which is what a lookup in a large table costs on the
// machine at hand.
func BenchmarkW2BaselinePlainMap(b *testing.B) {
	m := make(map[int]gotp.PID, w1Keys)
	for k := range w1Keys {
		m[k] = gotp.NewPID("bench", 1, uint64(k%w1Writers+1))
	}
	w2Read(b, func(i int) {
		x := uint32(12345 + i*7919)
		for range w2Lookups {
			x = lcg(x)
			if _, ok := m[int(x>>8)%w1Keys]; !ok {
				panic("missing key")
			}
		}
	})
}

type w3msg struct{ n int }

// W3: duplicate registry, 10,000 processes under "topic"; 100 dispatches
// that send a message to every entry; time until every receiver has
// drained its 100 messages. Partitions = GOMAXPROCS (parallel dispatch)
// and 1. Receivers are handler-mode processes (gotp's light process, the
// shape of a gen_server) or function processes receiving in a loop (the
// anchor script's shape, each a parked goroutine); the dispatch callback
// sends through a gotp.Batch, which wakes idle handler processes together.
func BenchmarkW3RegistryDispatch(b *testing.B) {
	type config struct {
		parts    int
		parallel bool
	}
	var configs []config
	for _, parts := range partitionSets() {
		configs = append(configs, config{parts, true})
		if parts > 1 {
			configs = append(configs, config{parts, false})
		}
	}
	for _, kind := range []string{"handler", "receive-loop"} {
		for _, c := range configs {
			parts := c.parts
			name := fmt.Sprintf("%s/partitions=%d", kind, parts)
			if parts > 1 && !c.parallel {
				name += "/serial"
			}
			b.Run(name, func(b *testing.B) { w3Dispatch(b, kind == "handler", parts, c.parallel) })
		}
	}
}

func w3Dispatch(b *testing.B, handlers bool, parts int, parallel bool) {
	n := benchNode(b)
	r, err := registry.Start[string, struct{}](context.Background(), n, registry.Options{Kind: registry.Duplicate, Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	var drained sync.WaitGroup
	register := func(p *gotp.Process) error { return r.Register(p, "topic", struct{}{}) }
	for range w3Subs {
		if handlers {
			got := 0
			_, err = n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
				if got++; got == w3Sends {
					got = 0
					drained.Done()
				}
				return false, nil
			}), register)
		} else {
			registered := make(chan error, 1)
			_, err = n.Spawn(func(p *gotp.Process) error {
				registered <- register(p)
				for {
					for range w3Sends {
						if _, err := p.Receive(context.Background()); err != nil {
							return nil
						}
					}
					drained.Done()
				}
			})
			if err == nil {
				err = <-registered
			}
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	w3Rounds(b, &drained, func(msg any) {
		r.Dispatch("topic", func(es []registry.Entry[struct{}]) {
			n.Batch(func(bt *gotp.Batch) {
				for _, e := range es {
					bt.Send(e.PID, msg)
				}
			})
		}, registry.Parallel(parallel))
	})
}

// w3Rounds times b.N runs of w3Sends rounds, each sending one message
// value to every subscriber with send (one value per round, as in the
// anchor), until the subscribers have drained them, and reports
// deliveries/s.
func w3Rounds(b *testing.B, drained *sync.WaitGroup, send func(msg any)) {
	runtime.GC()
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		drained.Add(w3Subs)
		t0 := time.Now()
		for i := range w3Sends {
			send(any(w3msg{i}))
		}
		drained.Wait()
		total += time.Since(t0)
	}
	b.ReportMetric(float64(w3Subs*w3Sends)*float64(b.N)/total.Seconds(), "deliveries/s")
}

// The W3 baseline: no registry and no gotp, only what a receive-loop
// subscriber is underneath. 10,000 goroutines each wait on a channel of
// its own; 100 rounds send one value to each channel, and each receiver
// drains its 100. "serial": one goroutine sends every round; "parallel":
// two goroutines each send to half of the channels, and the round ends
// when both have, as a parallel Dispatch over 2 partitions does. Every
// delivery wakes a parked goroutine here, since a sender blocks on a
// channel whose receiver has not yet taken the last value; a gotp mailbox
// has no such bound, so a receive-loop subscriber woken late takes the
// messages of several rounds at once, and gotp can pass this baseline.
func BenchmarkW3BaselineChannels(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) { w3BaselineChannels(b, parallel) })
	}
}

func w3BaselineChannels(b *testing.B, parallel bool) {
	chans := make([]chan any, w3Subs)
	var drained, exited sync.WaitGroup
	for i := range chans {
		c := make(chan any, 1)
		chans[i] = c
		exited.Go(func() {
			for {
				for range w3Sends {
					if _, ok := (<-c).(w4stop); ok {
						return
					}
				}
				drained.Done()
			}
		})
	}
	defer func() {
		for _, c := range chans {
			c <- w4stop{}
		}
		exited.Wait()
	}()
	send := func(cs []chan any, msg any) {
		for _, c := range cs {
			c <- msg
		}
	}
	w3Rounds(b, &drained, func(msg any) {
		if !parallel {
			send(chans, msg)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { send(chans[w3Subs/2:], msg) })
		send(chans[:w3Subs/2], msg)
		wg.Wait()
	})
}

type w4stop struct{}

// W4: 100,000 processes each register one key, then exit; time from
// telling them to exit until the registry's Count is 0 (the anchor's
// "cleanup only" case; the processes are handler-mode, registering in
// their init). The cycle variant times spawn → register → exit of
// 100,000 processes until Count is 0.
func BenchmarkW4RegistryCleanup(b *testing.B) {
	parts := runtime.GOMAXPROCS(0)
	b.Run("cleanup", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			b.StopTimer()
			n := gotp.NewNode(gotp.Options{Name: "bench"})
			r, err := registry.Start[int, struct{}](context.Background(), n, registry.Options{Partitions: parts})
			if err != nil {
				b.Fatal(err)
			}
			h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) { return true, nil })
			pids := make([]gotp.PID, w4Procs)
			for i := range w4Procs {
				pids[i], err = n.SpawnHandler(h, func(p *gotp.Process) error { return r.Register(p, i, struct{}{}) })
				if err != nil {
					b.Fatal(err)
				}
			}
			if c := r.Count(); c != w4Procs {
				b.Fatalf("count %d", c)
			}
			runtime.GC()
			b.StartTimer()
			t0 := time.Now()
			for _, pid := range pids {
				n.Send(pid, w4stop{})
			}
			for r.Count() != 0 {
				runtime.Gosched()
			}
			total += time.Since(t0)
			b.StopTimer()
			_ = n.Stop(context.Background())
			b.StartTimer()
		}
		b.ReportMetric(float64(w4Procs)*float64(b.N)/total.Seconds(), "cleanups/s")
	})
	b.Run("cycle", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			b.StopTimer()
			n := gotp.NewNode(gotp.Options{Name: "bench"})
			r, err := registry.Start[int, struct{}](context.Background(), n, registry.Options{Partitions: parts})
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			b.StartTimer()
			t0 := time.Now()
			var wg sync.WaitGroup
			for i := range w4Procs {
				wg.Add(1)
				_, err := n.Spawn(func(p *gotp.Process) error {
					defer wg.Done()
					return r.Register(p, i, struct{}{})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			for r.Count() != 0 {
				runtime.Gosched()
			}
			total += time.Since(t0)
			b.StopTimer()
			_ = n.Stop(context.Background())
			b.StartTimer()
		}
		b.ReportMetric(float64(w4Procs)*float64(b.N)/total.Seconds(), "cycles/s")
	})
}
