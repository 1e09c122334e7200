package registry_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

// model is the registry as a list of (key, pid, value) entries.
type modelEntry struct {
	key string
	pid gotp.PID
	val int
}

type model struct {
	kind    registry.Kind
	entries []modelEntry
}

func (m *model) register(pid gotp.PID, key string, val int) (holder gotp.PID, ok bool) {
	if m.kind == registry.Unique {
		for _, e := range m.entries {
			if e.key == key {
				return e.pid, false
			}
		}
	}
	m.entries = append(m.entries, modelEntry{key, pid, val})
	return gotp.PID{}, true
}

func (m *model) remove(keep func(modelEntry) bool) int {
	before := len(m.entries)
	m.entries = slices.DeleteFunc(m.entries, func(e modelEntry) bool { return !keep(e) })
	return before - len(m.entries)
}

func (m *model) lookup(key string) []string {
	var out []string
	for _, e := range m.entries {
		if e.key == key {
			out = append(out, fmt.Sprint(e.pid, e.val))
		}
	}
	slices.Sort(out)
	return out
}

func (m *model) keys(pid gotp.PID) []string {
	var out []string
	for _, e := range m.entries {
		if e.pid == pid {
			out = append(out, e.key)
		}
	}
	slices.Sort(out)
	return out
}

func (m *model) values(key string, pid gotp.PID) []string {
	var out []string
	for _, e := range m.entries {
		if e.key == key && e.pid == pid {
			out = append(out, fmt.Sprint(e.val))
		}
	}
	slices.Sort(out)
	return out
}

func entriesText(es []registry.Entry[int]) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprint(e.PID, e.Value))
	}
	slices.Sort(out)
	return out
}

func intsText(vs []int) []string {
	var out []string
	for _, v := range vs {
		out = append(out, fmt.Sprint(v))
	}
	slices.Sort(out)
	return out
}

// TestPropertyAgainstModel runs random register / unregister / unregister
// by match / update / exit sequences by a few processes and compares every
// read with a model after every step.
func TestPropertyAgainstModel(t *testing.T) {
	keys := []string{"a", "b", "c"}
	rapid.Check(t, func(rt *rapid.T) {
		kind := registry.Kind(rapid.IntRange(0, 1).Draw(rt, "kind"))
		parts := rapid.SampledFrom([]int{1, 2, 5}).Draw(rt, "partitions")
		n := gotp.NewNode(gotp.Options{Name: "prop"})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = n.Stop(ctx)
		}()
		r, err := registry.Start[string, int](context.Background(), n, registry.Options{Kind: kind, Partitions: parts})
		if err != nil {
			rt.Fatal(err)
		}
		m := &model{kind: kind}
		actors := make([]*gotptest.Sink, 3)
		for i := range actors {
			actors[i] = gotptest.NewSink(t, n)
		}
		check := func(step string) {
			for _, k := range keys {
				if got, want := entriesText(r.Lookup(k)), m.lookup(k); !slices.Equal(got, want) {
					rt.Fatalf("%s: Lookup(%s) = %v, model %v", step, k, got, want)
				}
				// Dispatch, twice: the second may reuse the first's
				// snapshot, which must still be the key's entries.
				for range 2 {
					var mu sync.Mutex
					var dispatched []registry.Entry[int]
					r.Dispatch(k, func(es []registry.Entry[int]) {
						mu.Lock()
						dispatched = append(dispatched, es...)
						mu.Unlock()
					})
					if got, want := entriesText(dispatched), m.lookup(k); !slices.Equal(got, want) {
						rt.Fatalf("%s: Dispatch(%s) = %v, model %v", step, k, got, want)
					}
				}
				// Find returns one of the key's entries, if it has any.
				e, found := r.Find(k)
				if want := m.lookup(k); found != (len(want) > 0) || found && !slices.Contains(want, fmt.Sprint(e.PID, e.Value)) {
					rt.Fatalf("%s: Find(%s) = %v, %v, model %v", step, k, e, found, want)
				}
				for v := range 3 {
					want := 0
					for _, e := range m.entries {
						if e.key == k && e.val == v {
							want++
						}
					}
					if got := r.CountMatch(k, registry.Eq(v)); got != want {
						rt.Fatalf("%s: CountMatch(%s, %d) = %d, model %d", step, k, v, got, want)
					}
				}
				for _, a := range actors {
					if got, want := intsText(r.Values(k, a.PID())), m.values(k, a.PID()); !slices.Equal(got, want) {
						rt.Fatalf("%s: Values(%s, %v) = %v, model %v", step, k, a.PID(), got, want)
					}
				}
			}
			for _, a := range actors {
				if got, want := sortedKeys(r.Keys(a.PID())), m.keys(a.PID()); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					rt.Fatalf("%s: Keys(%v) = %v, model %v", step, a.PID(), got, want)
				}
			}
			if got := r.Count(); got != len(m.entries) {
				rt.Fatalf("%s: Count = %d, model %d", step, got, len(m.entries))
			}
			var selected, modelled []string
			for _, it := range r.Select(nil) {
				selected = append(selected, fmt.Sprint(it.Key, " ", it.PID, it.Value))
			}
			for _, e := range m.entries {
				modelled = append(modelled, fmt.Sprint(e.key, " ", e.pid, e.val))
			}
			slices.Sort(selected)
			slices.Sort(modelled)
			if !slices.Equal(selected, modelled) {
				rt.Fatalf("%s: Select = %v, model %v", step, selected, modelled)
			}
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for s := range steps {
			i := rapid.IntRange(0, len(actors)-1).Draw(rt, "actor")
			a := actors[i]
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			val := rapid.IntRange(0, 2).Draw(rt, "value")
			op := rapid.SampledFrom([]string{"register", "register", "register", "unregister", "unregister_match", "update", "exit", "kill"}).Draw(rt, "op")
			step := fmt.Sprintf("step %d: %s(%d, %s, %d)", s, op, i, key, val)
			switch op {
			case "register":
				var err error
				a.Do(t, func(p *gotp.Process) { err = r.Register(p, key, val) })
				holder, ok := m.register(a.PID(), key, val)
				var ae *registry.AlreadyRegisteredError
				switch {
				case ok && err != nil:
					rt.Fatalf("%s: %v, model accepts", step, err)
				case !ok && (!errors.As(err, &ae) || ae.Owner != holder):
					rt.Fatalf("%s: %v, model says held by %v", step, err, holder)
				}
			case "unregister":
				a.Do(t, func(p *gotp.Process) { r.Unregister(p, key) })
				m.remove(func(e modelEntry) bool { return e.pid != a.PID() || e.key != key })
			case "unregister_match":
				var got int
				a.Do(t, func(p *gotp.Process) { got = r.UnregisterMatch(p, key, registry.Eq(val)) })
				want := m.remove(func(e modelEntry) bool { return e.pid != a.PID() || e.key != key || e.val != val })
				if got != want {
					rt.Fatalf("%s: removed %d, model %d", step, got, want)
				}
			case "update":
				var nv, ov int
				var err error
				a.Do(t, func(p *gotp.Process) {
					nv, ov, err = r.UpdateValue(p, key, func(v int) int { return (v + 1) % 3 })
				})
				if kind == registry.Duplicate {
					if !errors.Is(err, registry.ErrNotUnique) {
						rt.Fatalf("%s: %v on a duplicate registry", step, err)
					}
					break
				}
				idx := slices.IndexFunc(m.entries, func(e modelEntry) bool { return e.key == key && e.pid == a.PID() })
				if idx < 0 {
					if !errors.Is(err, registry.ErrNotRegistered) {
						rt.Fatalf("%s: %v, model: not held", step, err)
					}
					break
				}
				old := m.entries[idx].val
				m.entries[idx].val = (old + 1) % 3
				if err != nil || ov != old || nv != m.entries[idx].val {
					rt.Fatalf("%s: (%d, %d, %v), model (%d, %d)", step, nv, ov, err, m.entries[idx].val, old)
				}
			case "exit", "kill":
				if op == "exit" {
					a.Stop(t)
				} else {
					a.Exit(t, gotp.ErrKill)
				}
				m.remove(func(e modelEntry) bool { return e.pid != a.PID() })
				check(step + " (dead actor)")
				actors[i] = gotptest.NewSink(t, n)
			}
			check(step)
		}
	})
}

// TestConcurrentStress runs processes that register, unregister and exit
// at random while readers read, under -race; then checks that everything
// is gone once they have all exited. GOTP_REGISTRY_STRESS=1 makes it run
// ten times longer.
func TestConcurrentStress(t *testing.T) {
	rounds := 300
	if os.Getenv("GOTP_REGISTRY_STRESS") == "1" {
		rounds = 3000
	}
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[int, int](t, n, opts)
		const workers = 8
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var violations atomic.Int32
		// Readers.
		for range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(1, 2))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := rng.IntN(16)
					es := r.Lookup(k)
					if opts.Kind == registry.Unique && len(es) > 1 {
						violations.Add(1)
					}
					r.Dispatch(k, func(es []registry.Entry[int]) {
						if len(es) == 0 {
							violations.Add(1)
						}
						for _, e := range es {
							n.Send(e.PID, "ping")
						}
					})
					_ = r.Count()
					if len(es) > 0 {
						_ = r.Keys(es[0].PID)
					}
					_ = r.Match(k, registry.Any())
					if rng.IntN(20) == 0 {
						_ = r.Select(nil)
					}
				}
			})
		}
		// Writers: processes that live a little and exit (normally, by
		// crashing, or killed by another), and are replaced.
		var spawned sync.WaitGroup
		var writers sync.WaitGroup
		var pids sync.Map  // PID → true
		var exits sync.Map // PID → its Done channel
		for w := range workers {
			writers.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for i := 0; i < rounds/workers*4; i++ {
					ops := rng.IntN(8)
					crash := rng.IntN(3) == 0
					seed := rng.Uint64()
					spawned.Add(1)
					done, started := make(chan struct{}), make(chan struct{})
					pid, err := n.Spawn(func(p *gotp.Process) error {
						defer close(done)
						exits.Store(p.Self(), p.Done())
						close(started)
						prng := rand.New(rand.NewPCG(seed, 1))
						for range ops {
							k := prng.IntN(16)
							switch prng.IntN(4) {
							case 0, 1:
								_ = r.Register(p, k, prng.IntN(3))
							case 2:
								r.Unregister(p, k)
							case 3:
								r.UnregisterMatch(p, k, registry.Eq(prng.IntN(3)))
							}
						}
						if crash {
							return errors.New("crash")
						}
						return nil
					})
					if err != nil {
						spawned.Done()
						return
					}
					pids.Store(pid, true)
					if rng.IntN(4) == 0 {
						// Killed while it registers: its goroutine goes on
						// (and its late registrations must not stick).
						// Killed only once started, so that fn runs and
						// closes done.
						<-started
						n.Exit(pid, gotp.ErrKill)
					}
					<-done
					spawned.Done()
				}
			})
		}
		writers.Wait()
		spawned.Wait()
		close(stop)
		wg.Wait()
		if v := violations.Load(); v != 0 {
			t.Fatalf("%d invariant violations", v)
		}
		// Every writer has returned; wait for their exits to be complete
		// (a process's Done channel closes after the registry's cleanup;
		// ProcessCount drops before it).
		timeout := time.After(10 * time.Second)
		exits.Range(func(k, v any) bool {
			select {
			case <-v.(<-chan struct{}):
				return true
			case <-timeout:
				t.Fatalf("%v has not exited", k)
				return false
			}
		})
		if c := r.Count(); c != 0 {
			t.Fatalf("Count = %d after every process exited; left: %v", c, r.Select(nil))
		}
		if s := r.Select(nil); len(s) != 0 {
			t.Fatalf("entries left: %v", s)
		}
		pids.Range(func(k, _ any) bool {
			if ks := r.Keys(k.(gotp.PID)); len(ks) != 0 {
				t.Errorf("keys left for %v: %v", k, ks)
			}
			return true
		})
	})
}
