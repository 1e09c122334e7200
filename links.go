package gotp

// linkSet is the set of a process's links. Most processes have one link
// (to the process that started them), so the first lives inline and a map
// is made only for more; an idle child then costs no map. It is guarded by
// the process's mu.
//
// A PID is in at most one of one and more. A process with many links (a
// supervisor) keeps them in more, where adding one is a single map
// assignment.
type linkSet struct {
	one  PID // a link, or the zero PID
	more map[PID]struct{}
}

// add adds pid (not the zero PID); adding a link twice keeps one.
func (s *linkSet) add(pid PID) {
	if s.one == pid {
		return
	}
	if s.one.IsZero() && len(s.more) == 0 {
		s.one = pid
		return
	}
	if s.more == nil {
		s.more = make(map[PID]struct{})
	}
	s.more[pid] = struct{}{}
}

// del removes pid and reports whether it was there.
func (s *linkSet) del(pid PID) bool {
	if !pid.IsZero() && s.one == pid {
		s.one = PID{}
		return true
	}
	if _, ok := s.more[pid]; ok {
		delete(s.more, pid)
		return true
	}
	return false
}

// empty reports whether the set holds no link.
func (s *linkSet) empty() bool { return s.one.IsZero() && len(s.more) == 0 }

// all yields every link, in no particular order; for use with range.
func (s *linkSet) all(yield func(PID) bool) {
	if !s.one.IsZero() && !yield(s.one) {
		return
	}
	for pid := range s.more {
		if !yield(pid) {
			return
		}
	}
}
