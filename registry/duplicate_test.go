package registry_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

func dupOpts(parts int) registry.Options {
	return registry.Options{Kind: registry.Duplicate, Partitions: parts}
}

func TestDuplicateRegistrations(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, dupOpts(parts))
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			self := p.Self()
			mustEqual(t, "keys", len(r.Keys(self)), 0)
			if err := r.Register(p, "hello", "value"); err != nil {
				t.Fatal(err)
			}
			if err := r.Register(p, "hello", "value"); err != nil {
				t.Fatalf("duplicate registration refused: %v", err)
			}
			mustEqual(t, "keys", r.Keys(self), []string{"hello", "hello"})
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[string]{{PID: self, Value: "value"}, {PID: self, Value: "value"}})
			_ = r.Register(p, "world", "value")
			mustEqual(t, "keys", sortedKeys(r.Keys(self)), []string{"hello", "hello", "world"})
			mustEqual(t, "values", r.Values("hello", self), []string{"value", "value"})
			mustEqual(t, "count", r.Count(), 3)
			// Values come in registration order, also after a removal.
			for _, v := range []string{"c", "a", "b", "a"} {
				_ = r.Register(p, "order", v)
			}
			mustEqual(t, "values in registration order", r.Values("order", self), []string{"c", "a", "b", "a"})
			r.UnregisterMatch(p, "order", registry.Eq("a"))
			mustEqual(t, "values in order after unregister_match", r.Values("order", self), []string{"c", "b"})
		})
	})
}

func TestDuplicateRegistrationsAcrossProcesses(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, dupOpts(parts))
		var actors []*gotptest.Sink
		var want []registry.Entry[int]
		for i := range 10 {
			a := gotptest.NewSink(t, n)
			actors = append(actors, a)
			a.Do(t, func(p *gotp.Process) {
				if err := r.Register(p, "hello", i); err != nil {
					t.Fatal(err)
				}
			})
			want = append(want, registry.Entry[int]{PID: a.PID(), Value: i})
		}
		mustEqual(t, "lookup", sortEntries(r.Lookup("hello")), sortEntries(want))
		// Find on a duplicate registry returns one of the key's entries.
		if e, ok := r.Find("hello"); !ok || !slices.Contains(want, e) {
			t.Fatalf("Find = %v, %v; want one of %v", e, ok, want)
		}
		if e, ok := r.Find("world"); ok {
			t.Fatalf("Find of a key without entries = %v", e)
		}
		for i, a := range actors {
			mustEqual(t, "keys", r.Keys(a.PID()), []string{"hello"})
			mustEqual(t, "values", r.Values("hello", a.PID()), []int{i})
		}
		actors[3].Stop(t)
		mustEqual(t, "lookup after exit", len(r.Lookup("hello")), 9)
		mustEqual(t, "count", r.Count(), 9)
	})
}

func TestDuplicateMatchPatterns(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, triple](t, n, dupOpts(parts))
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			self := p.Self()
			v1, v2 := triple{1, "atom", 1}, triple{2, "atom", 2}
			_ = r.Register(p, "hello", v1)
			_ = r.Register(p, "hello", v2)
			e1, e2 := registry.Entry[triple]{PID: self, Value: v1}, registry.Entry[triple]{PID: self, Value: v2}
			mustEqual(t, "{1,_,_}", r.Match("hello", registry.Tuple(registry.Eq(1), registry.Any(), registry.Any())), []registry.Entry[triple]{e1})
			mustEqual(t, "{2,_,_}", r.Match("hello", registry.Tuple(registry.Eq(2), registry.Any(), registry.Any())), []registry.Entry[triple]{e2})
			mustEqual(t, "{_,atom,_}", sortEntries(r.Match("hello", registry.Tuple(registry.Any(), registry.Eq("atom"), registry.Any()))), []registry.Entry[triple]{e1, e2})
			mustEqual(t, "{$1,_,$1}", sortEntries(r.Match("hello", registry.Tuple(registry.Var("1"), registry.Any(), registry.Var("1")))), []registry.Entry[triple]{e1, e2})
			mustEqual(t, "guard $1 > 1", r.MatchFunc("hello", func(v triple) bool { return v.A > 1 }), []registry.Entry[triple]{e2})
			mustEqual(t, "count_match", r.CountMatch("hello", registry.Tuple(registry.Any(), registry.Eq("atom"), registry.Any())), 2)
			mustEqual(t, "count_match none", r.CountMatch("hello", registry.Tuple(registry.Eq(3), registry.Any(), registry.Any())), 0)
			// count_match with a guard: {:_, :_, :"$1"} when $1 > 1.
			gt1 := registry.Where(func(v any) bool { return v.(int) > 1 })
			mustEqual(t, "count_match guard $1 > 1", r.CountMatch("hello", registry.Tuple(registry.Any(), registry.Any(), gt1)), 1)
			_ = r.Register(p, "hello", triple{1, "other", 2})
			mustEqual(t, "{$1,_,$1} excludes unequal", len(r.Match("hello", registry.Tuple(registry.Var("1"), registry.Any(), registry.Var("1")))), 2)
		})
	})
}

func TestDuplicateUnregister(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, dupOpts(parts))
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		b.Do(t, func(p *gotp.Process) { _ = r.Register(p, "hello", "b") })
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "hello", "foo")
			_ = r.Register(p, "hello", "bar")
			_ = r.Register(p, "world", "baz")
			r.Unregister(p, "hello")
			mustEqual(t, "keys", r.Keys(p.Self()), []string{"world"})
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[string]{{PID: b.PID(), Value: "b"}})
			r.Unregister(p, "world")
			r.Unregister(p, "world")
			mustEqual(t, "keys", len(r.Keys(p.Self())), 0)
			mustEqual(t, "count", r.Count(), 1)
		})
	})
}

func TestDuplicateUnregisterMatch(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, dupOpts(parts))
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		b.Do(t, func(p *gotp.Process) { _ = r.Register(p, "hello", "foo") })
		a.Do(t, func(p *gotp.Process) {
			self := p.Self()
			_ = r.Register(p, "hello", "foo")
			_ = r.Register(p, "hello", "bar")
			_ = r.Register(p, "hello", "foo")
			mustEqual(t, "no match", r.UnregisterMatch(p, "hello", registry.Eq("baz")), 0)
			mustEqual(t, "removed foo twice", r.UnregisterMatch(p, "hello", registry.Eq("foo")), 2)
			mustEqual(t, "keys", r.Keys(self), []string{"hello"})
			mustEqual(t, "values", r.Values("hello", self), []string{"bar"})
			mustEqual(t, "b untouched", r.Values("hello", b.PID()), []string{"foo"})
			_ = r.Register(p, "hello", "baz")
			mustEqual(t, "guard", r.UnregisterMatchFunc(p, "hello", func(v string) bool { return v > "bar" }), 1)
			mustEqual(t, "values after guard", r.Values("hello", self), []string{"bar"})
			mustEqual(t, "wildcard", r.UnregisterMatch(p, "hello", registry.Any()), 1)
			mustEqual(t, "keys", len(r.Keys(self)), 0)
			mustEqual(t, "count", r.Count(), 1)
		})
	})
}

func TestDuplicateUpdateValueAndViaRefused(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(2))
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) {
		_ = r.Register(p, "hello", 1)
		if _, _, err := r.UpdateValue(p, "hello", func(v int) int { return v }); !errors.Is(err, registry.ErrNotUnique) {
			t.Fatalf("UpdateValue on a duplicate registry: %v", err)
		}
		if err := r.Via("x").RegisterName(n, p.Self()); !errors.Is(err, registry.ErrNotUnique) {
			t.Fatalf("via on a duplicate registry: %v", err)
		}
	})
	if _, ok := r.Via("hello").Resolve(n); ok {
		t.Fatal("a duplicate registry resolved a via name")
	}
}

// Dispatch on a partitioned duplicate registry: once per partition that
// has entries, in parallel, never for a key without entries.
func TestDuplicateDispatchPerPartition(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, dupOpts(parts))
		var calls atomic.Int32
		r.Dispatch("hello", func([]registry.Entry[int]) { calls.Add(1) })
		mustEqual(t, "calls on missing key", calls.Load(), int32(0))

		var actors []*gotptest.Sink
		for i := range 20 {
			a := gotptest.NewSink(t, n)
			actors = append(actors, a)
			a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "hello", i) })
		}
		// Partitions that hold entries: by the pids' partition.
		want := map[int]bool{}
		for _, a := range actors {
			want[int(a.PID().ID()%uint64(parts))] = true
		}
		var mu sync.Mutex
		var got []registry.Entry[int]
		sizes := []int{}
		r.Dispatch("hello", func(es []registry.Entry[int]) {
			calls.Add(1)
			mu.Lock()
			got = append(got, es...)
			sizes = append(sizes, len(es))
			mu.Unlock()
		})
		mustEqual(t, "calls", int(calls.Load()), len(want))
		mustEqual(t, "entries", len(got), 20)
		for _, s := range sizes {
			if s == 0 {
				t.Fatal("called with no entries")
			}
		}
		// Serial: the same calls, one after the other, on this goroutine.
		calls.Store(0)
		var serialEntries int
		inside := false
		r.Dispatch("hello", func(es []registry.Entry[int]) {
			if inside {
				t.Error("serial calls overlap")
			}
			inside = true
			calls.Add(1)
			serialEntries += len(es)
			inside = false
		}, registry.Parallel(false))
		mustEqual(t, "serial calls", int(calls.Load()), len(want))
		mustEqual(t, "serial entries", serialEntries, 20)
		// Parallel: with ≥ 2 partitions holding entries, every call can be
		// inside fn at once.
		if len(want) >= 2 {
			var inside sync.WaitGroup
			inside.Add(len(want))
			all := make(chan struct{})
			go func() { inside.Wait(); close(all) }()
			timeout := make(chan struct{}) // closed: every waiting call sees it
			defer time.AfterFunc(20*time.Second, func() { close(timeout) }).Stop()
			r.Dispatch("hello", func([]registry.Entry[int]) {
				inside.Done()
				select { // every call waits until all are inside fn
				case <-all:
				case <-timeout:
				}
			})
			select {
			case <-all:
			default:
				t.Fatalf("the %d calls were never inside fn at once", len(want))
			}
		}
		// Partitions without entries under the key get no call.
		if parts > 1 {
			calls.Store(0)
			r2 := start[string, int](t, n, dupOpts(parts))
			a := actors[0]
			a.Do(t, func(p *gotp.Process) { _ = r2.Register(p, "one", 1) })
			r2.Dispatch("one", func(es []registry.Entry[int]) {
				calls.Add(1)
				mustEqual(t, "entries of the one partition", es, []registry.Entry[int]{{PID: a.PID(), Value: 1}})
			})
			mustEqual(t, "calls with one partition of "+fmt.Sprint(parts)+" holding the key", calls.Load(), int32(1))
		}
	})
}

func TestDispatchPanicReachesCaller(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(4))
	withEntries := map[uint64]bool{} // partitions holding entries under k
	for range 8 {
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 1) })
		withEntries[a.PID().ID()%4] = true
	}
	var returned atomic.Int32
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		r.Dispatch("k", func([]registry.Entry[int]) {
			defer returned.Add(1)
			panic("boom")
		})
	}()
	// Dispatch panics only once every call has returned.
	if got := int(returned.Load()); got != len(withEntries) {
		t.Fatalf("%d calls had returned when Dispatch panicked, want all %d", got, len(withEntries))
	}
	// In a process, the panic ends the process with a *gotp.PanicError.
	err := exitOf(t, n, func(p *gotp.Process) error {
		r.Dispatch("k", func([]registry.Entry[int]) { panic("boom") })
		return nil
	})
	var pe *gotp.PanicError
	if !errors.As(err, &pe) || pe.Value != "boom" {
		t.Fatalf("process ended with %v", err)
	}
}

// TestDispatchHelperPanicReachesCaller: a panic in a call made on a
// helper goroutine reaches the caller even when every other call returns
// normally, also when the caller's own call returns just after the
// helper's panic. The first call in waits, spinning, until the other has
// started (so the two run on different goroutines), and returns at once;
// the other panics, on a helper whenever the first call is the caller's.
func TestDispatchHelperPanicReachesCaller(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the first call spins until the second starts")
	}
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(2))
	withEntries := map[uint64]bool{}
	for len(withEntries) < 2 {
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 1) })
		withEntries[a.PID().ID()%2] = true
	}
	for i := range 200 {
		var entered atomic.Int32
		var second atomic.Bool
		got := func() (v any) {
			defer func() { v = recover() }()
			r.Dispatch("k", func([]registry.Entry[int]) {
				if entered.Add(1) == 1 {
					for !second.Load() {
					}
					return
				}
				second.Store(true)
				panic("boom")
			})
			return "Dispatch returned"
		}()
		if got != "boom" {
			t.Fatalf("round %d: %v, want the helper's panic boom", i, got)
		}
	}
}

// TestDispatchTakesCallsOfLateHelpers: a parallel Dispatch does not wait
// for a helper goroutine to be scheduled. With one processor and calls
// that never block, no helper can start before the caller is done, so the
// caller makes every call itself, and Dispatch returns with every
// partition's call made; the helpers, started late, find nothing to do.
func TestDispatchTakesCallsOfLateHelpers(t *testing.T) {
	const parts = 4
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(parts))
	withEntries := map[uint64]bool{}
	for len(withEntries) < parts {
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 1) })
		withEntries[a.PID().ID()%parts] = true
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runtime.GC() // so that no collection starts in the middle of Dispatch
	caller := goroutineID()
	on := make([]uint64, 0, parts) // each call's goroutine; no lock: see below
	r.Dispatch("k", func([]registry.Entry[int]) {
		// Calls on other goroutines than the caller's would race here
		// (-race reports it) and fail the check below.
		on = append(on, goroutineID())
	})
	if len(on) != parts {
		t.Fatalf("%d calls, want %d", len(on), parts)
	}
	for i, g := range on {
		if g != caller {
			t.Fatalf("call %d ran on goroutine %d, not the caller's %d: Dispatch waited for a helper", i, g, caller)
		}
	}
}

// goroutineID returns the ID of the calling goroutine, read from the
// first line of its stack trace ("goroutine 42 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	line := buf[:runtime.Stack(buf[:], false)]
	line = bytes.TrimPrefix(line, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(line[:bytes.IndexByte(line, ' ')]), 10, 64)
	return id
}

// Many processes under one key in one partition: the bucket's index
// (built past a few processes) must follow every removal.
func TestDuplicateManyProcessesOneKey(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(1))
	var actors []*gotptest.Sink
	want := map[gotp.PID][]int{}
	for i := range 60 {
		a := gotptest.NewSink(t, n)
		actors = append(actors, a)
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "k", i)
			if i%3 == 0 {
				_ = r.Register(p, "k", -i)
			}
		})
		want[a.PID()] = append(want[a.PID()], i)
		if i%3 == 0 {
			want[a.PID()] = append(want[a.PID()], -i)
		}
	}
	check := func(what string) {
		t.Helper()
		got := map[gotp.PID][]int{}
		for _, e := range r.Lookup("k") {
			got[e.PID] = append(got[e.PID], e.Value)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d processes, want %d", what, len(got), len(want))
		}
		for pid, vs := range want {
			mustEqual(t, what, sortedKeys(got[pid]), sortedKeys(vs))
			mustEqual(t, what+" values", sortedKeys(r.Values("k", pid)), sortedKeys(vs))
		}
	}
	check("all registered")
	for i, a := range actors {
		switch i % 4 {
		case 0:
			a.Exit(t, gotp.ErrKill)
			delete(want, a.PID())
		case 1:
			a.Do(t, func(p *gotp.Process) { r.UnregisterMatch(p, "k", registry.Eq(i)) })
			if vs := slices.DeleteFunc(want[a.PID()], func(v int) bool { return v == i }); len(vs) > 0 {
				want[a.PID()] = vs
			} else {
				delete(want, a.PID())
			}
		case 2:
			a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 1000+i) })
			want[a.PID()] = append(want[a.PID()], 1000+i)
		}
	}
	check("after removals")
	for _, a := range actors[:50] {
		if _, ok := want[a.PID()]; ok {
			a.Stop(t)
			delete(want, a.PID())
		}
	}
	check("after most exited")
}

// While a key's entries do not change, Dispatch calls share one snapshot;
// a change (register, unregister, exit) is seen by the next Dispatch, and
// a callback that appends to its slice does not write into the snapshot.
func TestDispatchSnapshotFollowsChanges(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, dupOpts(1))
	var actors []*gotptest.Sink
	for i := range 3 {
		a := gotptest.NewSink(t, n)
		actors = append(actors, a)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", i) })
	}
	dispatch := func() []registry.Entry[int] {
		var got []registry.Entry[int]
		r.Dispatch("k", func(es []registry.Entry[int]) {
			got = es
			_ = append(es, registry.Entry[int]{Value: 99}) // must not reach the snapshot
		})
		return got
	}
	first, second := dispatch(), dispatch()
	mustEqual(t, "entries", len(second), 3)
	if &first[0] != &second[0] {
		t.Error("two dispatches to unchanged entries did not share a snapshot")
	}
	if cap(second) != len(second) {
		t.Errorf("snapshot has spare capacity %d: a callback's append would write into it", cap(second)-len(second))
	}

	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 3) })
	mustEqual(t, "after register", entriesText(dispatch()), entriesText(r.Lookup("k")))
	mustEqual(t, "after register, count", len(dispatch()), 4)

	actors[0].Do(t, func(p *gotp.Process) { r.Unregister(p, "k") })
	mustEqual(t, "after unregister", len(dispatch()), 3)

	actors[1].Stop(t)
	mustEqual(t, "count after exit", r.Count(), 2)
	got := dispatch()
	mustEqual(t, "after exit", entriesText(got), entriesText(r.Lookup("k")))
	for _, e := range got {
		if e.Value == 99 {
			t.Fatal("a callback's append reached the snapshot")
		}
	}
}
