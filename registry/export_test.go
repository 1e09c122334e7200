package registry

// LockQueue returns how many callers hold or wait for the lock on key
// (Lock), for tests that must know a caller is waiting before they go on.
func LockQueue[K comparable, V any](r *Registry[K, V], key K) int {
	t := r.live()
	if t == nil {
		return 0
	}
	s := t.lockStripe(r.hash(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	if kl := s.locks[key]; kl != nil {
		return len(kl.queue)
	}
	return 0
}
