package registry

import (
	"context"
	"sync"
)

// Lock runs fn on the calling goroutine while holding the registry's lock
// on key, and returns fn's error (Elixir's Registry.lock/3). Calls of Lock
// with equal keys run one at a time, in the order they asked for the lock;
// calls with different keys do not wait for each other. The lock is a
// registry's own: it has nothing to do with the entries under key, and
// works on both kinds of registry.
//
// The lock is released when fn returns, however it returns: a panic (which
// then goes on to Lock's caller) and runtime.Goexit (t.FailNow in a test)
// release it too, so a caller that dies while holding the lock never
// leaves it held. Waiting for the lock ends when ctx ends, with ctx.Err()
// (for a process, pass its p.Context() so that the wait ends with the
// process), and when the registry stops, with ErrNotRunning; fn has not
// run then. Lock fails at once with ErrNotRunning when the registry is
// not running and with ErrBadKey for a key that cannot be compared. fn
// must not take the same key's lock again: it would wait for itself.
//
// Unlike Elixir, a process that an exit signal ends while its goroutine
// is in fn keeps the lock until fn returns: gotp cannot stop a goroutine,
// and releasing the lock under code that still runs would let two calls
// of fn for one key run at once. fn that may run long should watch its
// process's context.
func (r *Registry[K, V]) Lock(ctx context.Context, key K, fn func() error) error {
	if r.badKey(key) {
		return ErrBadKey
	}
	t := r.live()
	if t == nil {
		return ErrNotRunning
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := t.lockStripe(r.hash(key))
	w, err := s.acquire(ctx, key, t.done)
	if err != nil {
		return err
	}
	defer s.release(key, w)
	return fn()
}

// lockStripes is the number of lock tables a registry incarnation keeps;
// a key's hash picks one, so that Lock calls on different keys seldom
// share a mutex.
const lockStripes = 16

// lockStripe is the locks of the keys whose hash selects it: for each key
// that is locked, the queue of its holder and waiters. mu guards locks and
// every keyLock in it.
type lockStripe[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyLock
	_     [40]byte // keep stripes' mutexes on separate cache lines
}

// keyLock is one locked key: queue[0] holds the lock, the others wait in
// order. A waiter is woken by closing its channel once it is at the head.
type keyLock struct {
	queue []*lockWaiter
}

type lockWaiter struct {
	granted chan struct{} // closed when the waiter holds the lock; nil for one that found it free
}

// lockStripe returns the stripe of a key with hash h, making the stripes
// on first use: most registries never lock.
func (t *table[K, V]) lockStripe(h uint64) *lockStripe[K] {
	t.lockOnce.Do(func() {
		t.locks = make([]lockStripe[K], lockStripes)
		for i := range t.locks {
			t.locks[i].locks = make(map[K]*keyLock)
		}
	})
	return &t.locks[h%lockStripes]
}

// acquire queues for key's lock and waits until it is held, ctx ends or
// stopped (the registry's done channel) closes. On failure it has left
// the queue, passing the lock on if it was granted meanwhile.
func (s *lockStripe[K]) acquire(ctx context.Context, key K, stopped <-chan struct{}) (*lockWaiter, error) {
	w := new(lockWaiter)
	s.mu.Lock()
	kl := s.locks[key]
	if kl == nil {
		kl = &keyLock{}
		s.locks[key] = kl
	}
	kl.queue = append(kl.queue, w)
	if len(kl.queue) == 1 {
		s.mu.Unlock()
		return w, nil // the lock was free
	}
	w.granted = make(chan struct{}) // only a waiter needs one
	s.mu.Unlock()
	var err error
	select {
	case <-w.granted:
		return w, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stopped:
		err = ErrNotRunning
	}
	// Granted or not meanwhile, release leaves the queue under the
	// stripe's lock: if w had just been granted the lock, it goes on to
	// the next waiter.
	s.release(key, w)
	return nil, err
}

// release takes w out of key's queue and, if w held the lock, grants it
// to the next waiter.
func (s *lockStripe[K]) release(key K, w *lockWaiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kl := s.locks[key]
	if kl == nil {
		return
	}
	for i, q := range kl.queue {
		if q != w {
			continue
		}
		kl.queue = append(kl.queue[:i], kl.queue[i+1:]...)
		if i == 0 && len(kl.queue) > 0 {
			close(kl.queue[0].granted)
		}
		break
	}
	if len(kl.queue) == 0 {
		delete(s.locks, key)
	}
}
