package registry_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

type triple struct {
	A int
	B string
	C int
}

// Both kinds start with their options: partitions, kind, metadata, and
// the registry process's behaviour label.
func TestStartsConfigured(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		opts.Meta = map[any]any{"custom_key": "custom_value"}
		r := start[string, int](t, n, opts)
		mustEqual(t, "partitions", r.Partitions(), opts.Partitions)
		mustEqual(t, "kind", r.Kind(), opts.Kind)
		if v, ok := r.Meta("custom_key"); !ok || v != "custom_value" {
			t.Fatalf("Meta(custom_key) = %v, %v", v, ok)
		}
		if _, ok := r.Meta("unknown_key"); ok {
			t.Fatal("Meta of an unknown key reported ok")
		}
		if !n.IsAlive(r.PID()) {
			t.Fatal("registry process not alive")
		}
		info, _ := n.ProcessInfo(r.PID())
		if want := "registry " + opts.Kind.String(); info.Behaviour != want {
			t.Fatalf("behaviour label %q, want %q", info.Behaviour, want)
		}
	})
}

func TestUniqueRegistrations(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, registry.Options{Partitions: parts})
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if ks := r.Keys(p.Self()); len(ks) != 0 {
				t.Fatalf("Keys before registering: %v", ks)
			}
			if err := r.Register(p, "hello", "value"); err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[string]{{PID: p.Self(), Value: "value"}})
			mustEqual(t, "keys", r.Keys(p.Self()), []string{"hello"})

			err := r.Register(p, "hello", "value")
			var ae *registry.AlreadyRegisteredError
			if !errors.As(err, &ae) || ae.Owner != p.Self() || ae.Key != "hello" {
				t.Fatalf("second register: %v", err)
			}
			mustEqual(t, "keys after failed register", r.Keys(p.Self()), []string{"hello"})

			if err := r.Register(p, "world", "value"); err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "keys", sortedKeys(r.Keys(p.Self())), []string{"hello", "world"})
			mustEqual(t, "count", r.Count(), 2)
			// A PID of another node with the same number holds nothing.
			foreign := gotp.NewPID("elsewhere", 1, p.Self().ID())
			mustEqual(t, "keys of a foreign pid", len(r.Keys(foreign)), 0)
			mustEqual(t, "values of a foreign pid", len(r.Values("hello", foreign)), 0)
		})
	})
}

func TestUniqueRegistrationsAcrossProcesses(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, registry.Options{Partitions: parts})
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 1); err != nil {
				t.Fatal(err)
			}
		})
		b.Do(t, func(p *gotp.Process) {
			err := r.Register(p, "hello", 2)
			var ae *registry.AlreadyRegisteredError
			if !errors.As(err, &ae) || ae.Owner != a.PID() {
				t.Fatalf("register of a held key: %v, want holder %v", err, a.PID())
			}
			// Lookups from another process see the holder.
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: a.PID(), Value: 1}})
		})
		a.Stop(t)
		b.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 2); err != nil {
				t.Fatalf("register after the holder exited: %v", err)
			}
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: b.PID(), Value: 2}})
		})
	})
}

// The equivalent of Elixir's "has unique registrations even if partition
// is delayed": a holder that is dead but not yet cleaned up is replaced.
// The test holds the holder's exit path inside a MonitorFunc of its own,
// set before the registry's: it takes the one monitor a process keeps
// inline, which is told first (the others in no fixed order), so the
// registry's cleanup has not run when the second process registers.
func TestUniqueTakesOverFromDeadHolder(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{Partitions: 4})
	b := gotptest.NewSink(t, n)
	caught := 0
	for range 3 {
		a := gotptest.NewSink(t, n)
		proceed, released := make(chan struct{}), make(chan struct{})
		n.MonitorFunc(a.PID(), func(gotp.Down) {
			close(proceed)
			<-released
		})
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 1); err != nil {
				t.Fatal(err)
			}
		})
		go n.Exit(a.PID(), gotp.ErrKill)
		<-proceed
		b.Do(t, func(p *gotp.Process) {
			if es := r.Lookup("hello"); len(es) == 1 && es[0].PID == a.PID() {
				caught++ // the dead holder is still there: take over
			}
			if err := r.Register(p, "hello", 2); err != nil {
				t.Errorf("register over a dead holder: %v", err)
			}
		})
		close(released)
		gotptest.Recv(t, a.Done())
		mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: b.PID(), Value: 2}})
		mustEqual(t, "count", r.Count(), 1)
		mustEqual(t, "keys of dead", len(r.Keys(a.PID())), 0)
		mustEqual(t, "keys of b", r.Keys(b.PID()), []string{"hello"})
		b.Do(t, func(p *gotp.Process) { r.Unregister(p, "hello") })
	}
	if caught != 3 {
		t.Fatalf("caught a dead holder before its cleanup %d times of 3", caught)
	}
}

func TestUniqueComparesWithEquality(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[any, int](t, n, registry.Options{Partitions: 4})
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) {
		if err := r.Register(p, 1.0, 1); err != nil {
			t.Fatal(err)
		}
		if err := r.Register(p, 1, 2); err != nil {
			t.Fatalf("1 and 1.0 are different keys: %v", err)
		}
		mustEqual(t, "keys", sortedKeys(r.Keys(p.Self())), []string{"1", "1"})
		mustEqual(t, "lookup 1.0", r.Lookup(1.0), []registry.Entry[int]{{PID: p.Self(), Value: 1}})
		mustEqual(t, "lookup 1", r.Lookup(1), []registry.Entry[int]{{PID: p.Self(), Value: 2}})
	})
}

func TestUniqueMatchPatterns(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, triple](t, n, registry.Options{Partitions: parts})
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			self := p.Self()
			value := triple{1, "atom", 1}
			if err := r.Register(p, "hello", value); err != nil {
				t.Fatal(err)
			}
			want := []registry.Entry[triple]{{PID: self, Value: value}}
			mustEqual(t, "{1,_,_}", r.Match("hello", registry.Tuple(registry.Eq(1), registry.Any(), registry.Any())), want)
			mustEqual(t, "{1.0,_,_} (numbers compare by value)", r.Match("hello", registry.Tuple(registry.Eq(1.0), registry.Any(), registry.Any())), want)
			mustEqual(t, "_", r.Match("hello", registry.Any()), want)
			mustEqual(t, "{_,atom,_}", r.Match("hello", registry.Tuple(registry.Any(), registry.Eq("atom"), registry.Any())), want)
			mustEqual(t, "{$1,_,$1}", r.Match("hello", registry.Tuple(registry.Var("x"), registry.Any(), registry.Var("x"))), want)
			mustEqual(t, "{$1,$1,_}", len(r.Match("hello", registry.Tuple(registry.Var("x"), registry.Var("x"), registry.Any()))), 0)
			mustEqual(t, "{2,_,_}", len(r.Match("hello", registry.Tuple(registry.Eq(2), registry.Any(), registry.Any()))), 0)
			mustEqual(t, "wrong arity", len(r.Match("hello", registry.Tuple(registry.Any(), registry.Any()))), 0)
			mustEqual(t, "other key", len(r.Match("world", registry.Any())), 0)
			mustEqual(t, "field", r.Match("hello", registry.Field("B", registry.Eq("atom"))), want)
			mustEqual(t, "missing field", len(r.Match("hello", registry.Field("Z", registry.Any()))), 0)
			// Guards: the predicate form.
			mustEqual(t, "guard A > 0", r.MatchFunc("hello", func(v triple) bool { return v.A > 0 }), want)
			mustEqual(t, "guard A > 1", len(r.MatchFunc("hello", func(v triple) bool { return v.A > 1 })), 0)
			mustEqual(t, "where", r.Match("hello", registry.Tuple(registry.Where(func(v any) bool { return v.(int) == 1 }), registry.Any(), registry.Any())), want)
			mustEqual(t, "count_match", r.CountMatch("hello", registry.Tuple(registry.Var("x"), registry.Any(), registry.Var("x"))), 1)
			mustEqual(t, "count_match none", r.CountMatch("hello", registry.Eq(triple{2, "atom", 2})), 0)
		})
	})
}

func TestUniqueUpdateValue(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, registry.Options{Partitions: parts})
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 1); err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: p.Self(), Value: 1}})
			nv, ov, err := r.UpdateValue(p, "hello", func(v int) int { return v + 1 })
			if err != nil || nv != 2 || ov != 1 {
				t.Fatalf("UpdateValue = %v, %v, %v; want 2, 1, nil", nv, ov, err)
			}
			mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: p.Self(), Value: 2}})
			if _, _, err := r.UpdateValue(p, "world", func(v int) int { return v }); !errors.Is(err, registry.ErrNotRegistered) {
				t.Fatalf("UpdateValue of a key not held: %v", err)
			}
		})
		b.Do(t, func(p *gotp.Process) {
			called := false
			if _, _, err := r.UpdateValue(p, "hello", func(v int) int { called = true; return v }); !errors.Is(err, registry.ErrNotRegistered) {
				t.Fatalf("UpdateValue of another's key: %v", err)
			}
			if called {
				t.Fatal("callback ran for a key held by another process")
			}
		})
		mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: a.PID(), Value: 2}})
	})
}

func TestUniqueDispatch(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, registry.Options{Partitions: parts})
		calls := 0
		r.Dispatch("hello", func([]registry.Entry[int]) { calls++ })
		mustEqual(t, "calls for a missing key", calls, 0)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 7); err != nil {
				t.Fatal(err)
			}
		})
		var got []registry.Entry[int]
		r.Dispatch("hello", func(es []registry.Entry[int]) { calls++; got = es })
		mustEqual(t, "calls", calls, 1)
		mustEqual(t, "entries", got, []registry.Entry[int]{{PID: a.PID(), Value: 7}})
	})
}

func TestUniqueUnregister(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, registry.Options{Partitions: parts})
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "hello", "foo")
			_ = r.Register(p, "world", "bar")
			mustEqual(t, "keys", sortedKeys(r.Keys(p.Self())), []string{"hello", "world"})
		})
		b.Do(t, func(p *gotp.Process) {
			r.Unregister(p, "hello") // not b's: a no-op
		})
		mustEqual(t, "lookup after another's unregister", len(r.Lookup("hello")), 1)
		a.Do(t, func(p *gotp.Process) {
			r.Unregister(p, "hello")
			mustEqual(t, "keys", r.Keys(p.Self()), []string{"world"})
			mustEqual(t, "lookup", len(r.Lookup("hello")), 0)
			r.Unregister(p, "hello") // unregister with no entries
			r.Unregister(p, "world")
			mustEqual(t, "keys", len(r.Keys(p.Self())), 0)
			mustEqual(t, "count", r.Count(), 0)
			// The key is free again, for anyone.
		})
		b.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", "b"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestUniqueUnregisterMatch(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, string](t, n, registry.Options{Partitions: parts})
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "hello", "foo")
			mustEqual(t, "no match", r.UnregisterMatch(p, "hello", registry.Eq("bar")), 0)
			mustEqual(t, "lookup", len(r.Lookup("hello")), 1)
			mustEqual(t, "match", r.UnregisterMatch(p, "hello", registry.Eq("foo")), 1)
			mustEqual(t, "lookup", len(r.Lookup("hello")), 0)
			mustEqual(t, "keys", len(r.Keys(p.Self())), 0)
			_ = r.Register(p, "hello", "foo")
			mustEqual(t, "func", r.UnregisterMatchFunc(p, "hello", func(v string) bool { return v == "foo" }), 1)
			mustEqual(t, "count", r.Count(), 0)
		})
	})
}

func TestUniqueValuesAndSelect(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, registry.Options{Partitions: parts})
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "a1", 1); _ = r.Register(p, "a2", 2) })
		b.Do(t, func(p *gotp.Process) { _ = r.Register(p, "b1", 3) })
		mustEqual(t, "values", r.Values("a1", a.PID()), []int{1})
		mustEqual(t, "values of another", len(r.Values("a1", b.PID())), 0)
		mustEqual(t, "values missing", len(r.Values("zz", a.PID())), 0)
		all := r.Select(nil)
		mustEqual(t, "select all", len(all), 3)
		big := r.Select(func(it registry.Item[string, int]) bool { return it.Value >= 2 })
		mustEqual(t, "select >= 2", len(big), 2)
		ofB := r.Select(func(it registry.Item[string, int]) bool { return it.PID == b.PID() })
		mustEqual(t, "select by pid", ofB, []registry.Item[string, int]{{Key: "b1", PID: b.PID(), Value: 3}})
		seen := 0
		for range r.All() {
			seen++
			break
		}
		mustEqual(t, "All stops early", seen, 1)
	})
}

func TestEmptyRegistry(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, kind := range []registry.Kind{registry.Unique, registry.Duplicate} {
		r := start[string, int](t, n, registry.Options{Kind: kind, Partitions: 3})
		mustEqual(t, "lookup", len(r.Lookup("x")), 0)
		mustEqual(t, "match", len(r.Match("x", registry.Any())), 0)
		mustEqual(t, "count", r.Count(), 0)
		mustEqual(t, "select", len(r.Select(nil)), 0)
		mustEqual(t, "keys", len(r.Keys(r.PID())), 0)
		if _, ok := r.Find("x"); ok {
			t.Fatal("Find on empty registry")
		}
	}
}

// Reads allocate only what they return: Find nothing, Lookup one slice.
// (An allocation per read makes the collector rescan a large registry
// again and again.)
func TestReadAllocations(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, opts := range []registry.Options{{Partitions: 4}, {Kind: registry.Duplicate, Partitions: 4}} {
		r := start[int, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, 1, 1) })
		if got := testing.AllocsPerRun(100, func() { r.Find(1) }); got != 0 {
			t.Errorf("%v: Find allocates %v times", opts.Kind, got)
		}
		if got := testing.AllocsPerRun(100, func() { r.Lookup(1) }); got != 1 {
			t.Errorf("%v: Lookup allocates %v times", opts.Kind, got)
		}
		if got := testing.AllocsPerRun(100, func() { r.Count() }); got != 0 {
			t.Errorf("%v: Count allocates %v times", opts.Kind, got)
		}
		a.Do(t, func(p *gotp.Process) {
			k := 100
			next := func() int { // distinct keys (unique), one key (duplicate)
				if opts.Kind == registry.Unique {
					k++
				}
				return k
			}
			if got := testing.AllocsPerRun(1000, func() { _ = r.Register(p, next(), k) }); got > 0.5 {
				t.Errorf("%v: Register allocates %v times", opts.Kind, got)
			}
		})
	}
}

// User code (Dispatch and UpdateValue callbacks, MatchFunc predicates, All
// loop bodies, Select filters) runs outside the registry's locks: it may
// write to the registry, here the very key and table it is reading. Were a
// lock held, the actor would deadlock and a.do would fail the test.
func TestCallbacksMayCallRegistry(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "k", 1); err != nil {
				t.Fatal(err)
			}
			write := func(key string) {
				if err := r.Register(p, key, 2); err != nil {
					t.Errorf("register %q from a callback: %v", key, err)
				}
				r.Unregister(p, key)
			}
			calls := 0
			r.Dispatch("k", func([]registry.Entry[int]) { calls++; write("k2"); write("k3") })
			mustEqual(t, "dispatch calls", calls, 1)
			mustEqual(t, "match func", len(r.MatchFunc("k", func(int) bool { write("k2"); return true })), 1)
			for range r.All() {
				write("k2")
			}
			mustEqual(t, "select", len(r.Select(func(registry.Item[string, int]) bool { write("k2"); return true })), 1)
			if opts.Kind == registry.Unique {
				nv, ov, err := r.UpdateValue(p, "k", func(v int) int { write("k2"); return v + 1 })
				if err != nil || nv != 2 || ov != 1 {
					t.Fatalf("UpdateValue = %v, %v, %v", nv, ov, err)
				}
			}
			mustEqual(t, "keys", r.Keys(p.Self()), []string{"k"})
		})
	})
}

// UpdateValue fails with ErrNotRegistered when the caller no longer holds
// the key once fn returns, and then leaves the key as it is: here fn
// unregisters it and another process takes it meanwhile.
func TestUniqueUpdateValueKeyLostMeanwhile(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, registry.Options{Partitions: parts})
		a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 1); err != nil {
				t.Fatal(err)
			}
			_, _, err := r.UpdateValue(p, "hello", func(v int) int {
				r.Unregister(p, "hello")
				b.Do(t, func(bp *gotp.Process) {
					if err := r.Register(bp, "hello", 7); err != nil {
						t.Errorf("b's register: %v", err)
					}
				})
				return v + 100
			})
			if !errors.Is(err, registry.ErrNotRegistered) {
				t.Fatalf("UpdateValue after losing the key: %v", err)
			}
			mustEqual(t, "keys of a", len(r.Keys(p.Self())), 0)
		})
		mustEqual(t, "lookup", r.Lookup("hello"), []registry.Entry[int]{{PID: b.PID(), Value: 7}})
		mustEqual(t, "count", r.Count(), 1)
	})
}

// Integer keys are hashed by their bits (see Registry.hash), for every size
// of integer; each key, negative ones included, must be found, and found
// only under itself, also once enough keys make the tables split.
func TestUniqueIntegerKeysOfEverySize(t *testing.T) {
	type userID int64
	t.Run("int8", func(t *testing.T) { testIntegerKeys[int8](t, -128, 127) })
	t.Run("uint8", func(t *testing.T) { testIntegerKeys[uint8](t, 0, 255) })
	t.Run("int16", func(t *testing.T) { testIntegerKeys[int16](t, -1500, 1500) })
	t.Run("uint16", func(t *testing.T) { testIntegerKeys[uint16](t, 65535-3000, 65535) })
	t.Run("int32", func(t *testing.T) { testIntegerKeys[int32](t, -1500, 1500) })
	t.Run("uint32", func(t *testing.T) { testIntegerKeys[uint32](t, 1<<32-3000, 1<<32-1) })
	t.Run("int", func(t *testing.T) { testIntegerKeys[int](t, -1500, 1500) })
	t.Run("uint64", func(t *testing.T) { testIntegerKeys[uint64](t, 1<<64-3000, 1<<64-1) })
	t.Run("uintptr", func(t *testing.T) { testIntegerKeys[uintptr](t, 0, 3000) })
	t.Run("named", func(t *testing.T) { testIntegerKeys[userID](t, -1500, 1500) })
}

func testIntegerKeys[K interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int | ~int64 | ~uint64 | ~uintptr
}](t *testing.T, lo, hi K) {
	n := gotptest.NewNode(t)
	r := start[K, K](t, n, registry.Options{Partitions: 3})
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) {
		keys := 0
		for k := lo; ; k++ {
			if err := r.Register(p, k, k); err != nil {
				t.Fatalf("register %v: %v", k, err)
			}
			keys++
			if k == hi {
				break
			}
		}
		mustEqual(t, "count", r.Count(), keys)
		for k := lo; ; k++ {
			if e, ok := r.Find(k); !ok || e.Value != k || e.PID != p.Self() {
				t.Fatalf("find %v: %v, %v", k, e, ok)
			}
			if k%2 == 0 {
				r.Unregister(p, k)
			}
			if k == hi {
				break
			}
		}
		for k := lo; ; k++ {
			if _, ok := r.Find(k); ok != (k%2 != 0) {
				t.Fatalf("find %v after unregistering the even keys: %v", k, ok)
			}
			if k == hi {
				break
			}
		}
	})
}
