package gotp

import (
	"maps"
	"testing"

	"pgregory.net/rapid"
)

// The set agrees with a plain map through any sequence of adds (of new
// Refs and of Refs already there), gets and takes, and every monitor is in
// one place only.
func TestRefSetMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s *refSet[watcher] // nil until the first add, as in a Process
		model := map[Ref]watcher{}
		refs := []Ref{{node: "a", id: 1}, {node: "a", id: 2}, {node: "a", id: 3}, {node: "b", id: 1}, {}}
		for range rapid.IntRange(0, 40).Draw(t, "steps") {
			ref := rapid.SampledFrom(refs).Draw(t, "ref")
			if rapid.Bool().Draw(t, "add") {
				if ref.IsZero() {
					continue // never added: a monitor's Ref is never zero
				}
				// Adding a Ref that is there already sets its value.
				w := watcher{pid: PID{node: "w", id: rapid.Uint64().Draw(t, "watcher")}}
				if s == nil {
					s = new(refSet[watcher])
				}
				s.add(ref, w)
				model[ref] = w
			} else if rapid.Bool().Draw(t, "take") {
				w, ok := s.take(ref)
				mw, mok := model[ref]
				if ok != mok || w.pid != mw.pid {
					t.Fatalf("take(%v) = %v, %v; want %v, %v", ref, w, ok, mw, mok)
				}
				delete(model, ref)
			} else {
				w, ok := s.get(ref)
				mw, mok := model[ref]
				if ok != mok || w.pid != mw.pid {
					t.Fatalf("get(%v) = %v, %v; want %v, %v", ref, w, ok, mw, mok)
				}
			}
			got := map[Ref]PID{}
			for ref, w := range s.all {
				if _, dup := got[ref]; dup {
					t.Fatalf("%v yielded twice", ref)
				}
				got[ref] = w.pid
			}
			if !maps.EqualFunc(got, model, func(p PID, w watcher) bool { return p == w.pid }) {
				t.Fatalf("set holds %v, want %v", got, model)
			}
		}
	})
}

// all stops when its caller does, in the inline monitor and in the map.
func TestRefSetAllStops(t *testing.T) {
	s := new(refSet[watcher])
	for i := range 5 {
		s.add(Ref{node: "a", id: uint64(i + 1)}, watcher{})
	}
	for stopAt := 1; stopAt <= 5; stopAt++ {
		seen := 0
		for range s.all {
			if seen++; seen == stopAt {
				break
			}
		}
		if seen != stopAt {
			t.Fatalf("stopping at %d, saw %d", stopAt, seen)
		}
	}
}
