package registry_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

// The tests of Lock port Elixir's registry_test.exs "lock" cases, for
// both kinds of registry.

// lockHolder takes the lock on key in a goroutine and holds it until
// release is closed; it returns once the lock is held, and the channel
// that receives Lock's error.
func lockHolder(t *testing.T, r *registry.Registry[string, int], key string, release <-chan struct{}, fn func() error) <-chan error {
	t.Helper()
	held := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		errs <- r.Lock(context.Background(), key, func() error {
			close(held)
			<-release
			if fn != nil {
				return fn()
			}
			return nil
		})
	}()
	gotptest.Recv(t, held)
	return errs
}

// lockWaiter asks for the lock on key in a goroutine and returns once it
// is queued behind the holder; ran is closed when its fn runs.
func lockWaiter(t *testing.T, r *registry.Registry[string, int], ctx context.Context, key string, ran chan<- string, name string) <-chan error {
	t.Helper()
	before := registry.LockQueue(r, key)
	errs := make(chan error, 1)
	go func() {
		errs <- r.Lock(ctx, key, func() error {
			ran <- name
			return nil
		})
	}()
	gotptest.Eventually(t, "the waiter is queued", func() bool { return registry.LockQueue(r, key) == before+1 })
	return errs
}

func TestLockDifferentKeysDoNotWait(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		release := make(chan struct{})
		first := lockHolder(t, r, "1", release, nil)
		second := lockHolder(t, r, "2", release, nil) // returns only once "2" is held
		close(release)
		gotptest.Must(t, gotptest.Recv(t, first))
		gotptest.Must(t, gotptest.Recv(t, second))
		for _, k := range []string{"1", "2"} {
			if err := r.Lock(gotptest.Context(t), k, func() error { return nil }); err != nil {
				t.Fatalf("lock %s after release: %v", k, err)
			}
		}
	})
}

func TestLockSameKeySerialises(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		release := make(chan struct{})
		holder := lockHolder(t, r, "k", release, nil)
		ran := make(chan string, 3)
		var waiters []<-chan error
		for _, name := range []string{"a", "b", "c"} {
			waiters = append(waiters, lockWaiter(t, r, gotptest.Context(t), "k", ran, name))
		}
		gotptest.NoRecv(t, ran) // queued, not running, while the lock is held
		close(release)
		gotptest.Must(t, gotptest.Recv(t, holder))
		for _, want := range []string{"a", "b", "c"} { // in the order they asked
			if got := gotptest.Recv(t, ran); got != want {
				t.Fatalf("waiter %s ran, want %s first", got, want)
			}
		}
		for _, w := range waiters {
			gotptest.Must(t, gotptest.Recv(t, w))
		}
		if q := registry.LockQueue(r, "k"); q != 0 {
			t.Fatalf("%d callers still queued", q)
		}
	})
}

func TestLockReturnsFnError(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{})
	boom := errors.New("boom")
	if err := r.Lock(gotptest.Context(t), "k", func() error { return boom }); err != boom {
		t.Fatalf("Lock = %v, want fn's error", err)
	}
}

// "locks when the one holding the lock raises": a panic releases the lock
// and goes on to the caller.
func TestLockReleasedByPanic(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		release := make(chan struct{})
		panicked := make(chan any, 1)
		held := make(chan struct{})
		go func() {
			defer func() { panicked <- recover() }()
			_ = r.Lock(context.Background(), "k", func() error {
				close(held)
				<-release
				panic("oops")
			})
		}()
		gotptest.Recv(t, held)
		ran := make(chan string, 1)
		waiter := lockWaiter(t, r, gotptest.Context(t), "k", ran, "next")
		close(release)
		if v := gotptest.Recv(t, panicked); v != "oops" {
			t.Fatalf("recovered %v, want the panic to reach Lock's caller", v)
		}
		gotptest.Recv(t, ran)
		gotptest.Must(t, gotptest.Recv(t, waiter))
	})
}

// A runtime.Goexit in fn (t.FailNow) releases the lock.
func TestLockReleasedByGoexit(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Lock(context.Background(), "k", func() error {
			runtime.Goexit()
			return nil
		})
	}()
	gotptest.Recv(t, done)
	gotptest.Must(t, r.Lock(gotptest.Context(t), "k", func() error { return nil }))
}

// "locks when the one holding the lock terminates": a process killed while
// it holds the lock releases it once its fn, which watches the process's
// context, returns.
func TestLockReleasedWhenHolderProcessDies(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		held := make(chan struct{})
		pid, err := n.Spawn(func(p *gotp.Process) error {
			return r.Lock(p.Context(), "k", func() error {
				close(held)
				_, err := p.Receive(p.Context()) // ends when the process is killed
				return err
			})
		})
		gotptest.Must(t, err)
		gotptest.Recv(t, held)
		ran := make(chan string, 1)
		waiter := lockWaiter(t, r, gotptest.Context(t), "k", ran, "next")
		n.Exit(pid, gotp.ErrKill)
		gotptest.Recv(t, ran)
		gotptest.Must(t, gotptest.Recv(t, waiter))
	})
}

// "locks when the one waiting for the lock terminates": a waiter that
// gives up leaves the queue; the lock goes to the next.
func TestLockWaiterGivesUp(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		release := make(chan struct{})
		holder := lockHolder(t, r, "k", release, nil)
		ran := make(chan string, 2)
		ctx, cancel := context.WithCancel(context.Background())
		quitter := lockWaiter(t, r, ctx, "k", ran, "quitter")
		stayer := lockWaiter(t, r, gotptest.Context(t), "k", ran, "stayer")
		cancel()
		if err := gotptest.Recv(t, quitter); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
		if q := registry.LockQueue(r, "k"); q != 2 {
			t.Fatalf("queue %d after a waiter left, want holder and one waiter", q)
		}
		close(release)
		gotptest.Must(t, gotptest.Recv(t, holder))
		if got := gotptest.Recv(t, ran); got != "stayer" {
			t.Fatalf("%s ran, want stayer", got)
		}
		gotptest.Must(t, gotptest.Recv(t, stayer))
		gotptest.NoRecv(t, ran)
	})
}

// A waiter whose wait ends at the moment the lock is handed to it passes
// the lock on: the key never stays locked by nobody.
func TestLockCancelRaceNeverStrandsTheLock(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{})
	for range 200 {
		release := make(chan struct{})
		holder := lockHolder(t, r, "k", release, nil)
		ran := make(chan string, 1)
		ctx, cancel := context.WithCancel(context.Background())
		w := lockWaiter(t, r, ctx, "k", ran, "w")
		go cancel()
		close(release)
		gotptest.Must(t, gotptest.Recv(t, holder))
		if err := gotptest.Recv(t, w); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		gotptest.Must(t, r.Lock(gotptest.Context(t), "k", func() error { return nil }))
	}
}

func TestLockWhenStopped(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{})
	release := make(chan struct{})
	holder := lockHolder(t, r, "k", release, nil)
	ran := make(chan string, 1)
	waiter := lockWaiter(t, r, gotptest.Context(t), "k", ran, "w")
	gotptest.Must(t, r.Stop(gotptest.Context(t)))
	if err := gotptest.Recv(t, waiter); !errors.Is(err, registry.ErrNotRunning) {
		t.Fatalf("waiter when the registry stopped: %v, want ErrNotRunning", err)
	}
	close(release)
	gotptest.Must(t, gotptest.Recv(t, holder)) // the holder's fn ran to its end
	gotptest.NoRecv(t, ran)
	if err := r.Lock(gotptest.Context(t), "k", func() error { return nil }); !errors.Is(err, registry.ErrNotRunning) {
		t.Fatalf("Lock on a stopped registry: %v", err)
	}
	bad := start[any, int](t, n, registry.Options{})
	if err := bad.Lock(gotptest.Context(t), []int{1}, func() error { return nil }); !errors.Is(err, registry.ErrBadKey) {
		t.Fatalf("Lock with an uncomparable key: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bad.Lock(ctx, 1, func() error { t.Error("fn ran"); return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a done context: %v", err)
	}
}

// Many goroutines lock a few keys: never two fns of one key at once, and
// every call runs.
func TestLockMutualExclusion(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{Partitions: 4})
	keys := []string{"a", "b", "c"}
	inside := make([]atomic.Int32, len(keys))
	var runs atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				k := (g + i) % len(keys)
				err := r.Lock(context.Background(), keys[k], func() error {
					if inside[k].Add(1) != 1 {
						t.Errorf("two holders of %q at once", keys[k])
					}
					runtime.Gosched()
					inside[k].Add(-1)
					runs.Add(1)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := runs.Load(); got != 8*300 {
		t.Fatalf("%d fns ran, want %d", got, 8*300)
	}
}
