package gotp

// refSet maps monitor references to V: a process's monitors (who is told
// when it exits, V = watcher) and the monitors it holds (V = the PID
// watched). Most processes are watched by at most one monitor at a time
// (the registry that holds their keys, or a caller waiting for a reply)
// and hold at most one (a call they make), so one entry lives inline and a
// map is made only for more. A Go map of one monitor takes 752 bytes, and
// keeps them after the monitor ends; a refSet of watchers takes 96. It is
// guarded by the process's mu; its methods other than add accept a nil set
// as empty.
//
// A Ref is in at most one of one and more.
type refSet[V any] struct {
	one  refEntry[V] // an entry, or the zero Ref
	more map[Ref]V
}

type refEntry[V any] struct {
	ref Ref
	v   V
}

// add sets the value of ref (not the zero Ref) to v, adding ref if it is
// not in the set. (A peer node may ask for the same monitor twice.)
func (s *refSet[V]) add(ref Ref, v V) {
	if s.one.ref == ref {
		s.one.v = v
		return
	}
	if _, ok := s.more[ref]; ok {
		s.more[ref] = v
		return
	}
	if s.one.ref.IsZero() {
		s.one = refEntry[V]{ref, v}
		return
	}
	if s.more == nil {
		s.more = make(map[Ref]V)
	}
	s.more[ref] = v
}

// get returns the value of ref, and whether it is in the set.
func (s *refSet[V]) get(ref Ref) (V, bool) {
	if s == nil || ref.IsZero() {
		var zero V
		return zero, false
	}
	if s.one.ref == ref {
		return s.one.v, true
	}
	v, ok := s.more[ref]
	return v, ok
}

// take removes ref and returns its value, and whether it was there.
func (s *refSet[V]) take(ref Ref) (V, bool) {
	v, ok := s.get(ref)
	if ok {
		if s.one.ref == ref {
			s.one = refEntry[V]{}
		} else {
			delete(s.more, ref)
		}
	}
	return v, ok
}

// all yields every entry, in no particular order; for use with range. The
// loop may take the entry it is given.
func (s *refSet[V]) all(yield func(Ref, V) bool) {
	if s == nil {
		return
	}
	if !s.one.ref.IsZero() && !yield(s.one.ref, s.one.v) {
		return
	}
	for ref, v := range s.more {
		if !yield(ref, v) {
			return
		}
	}
}
