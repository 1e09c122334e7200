package registry_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

func kinds(t *testing.T, f func(t *testing.T, opts registry.Options)) {
	for _, k := range []registry.Kind{registry.Unique, registry.Duplicate} {
		for _, parts := range partitionCounts {
			t.Run(k.String()+"/"+string(rune('0'+parts)), func(t *testing.T) {
				f(t, registry.Options{Kind: k, Partitions: parts})
			})
		}
	}
}

// Cleanup on exit, for every kind of exit: entries, keys and count go.
func TestCleansUpOnExit(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		reasons := []error{nil, gotp.ErrShutdown, gotp.ErrKill, errors.New("crash")}
		for i, reason := range reasons {
			a := gotptest.NewSink(t, n)
			a.Do(t, func(p *gotp.Process) {
				for _, k := range []string{"a", "b", "c"} {
					if err := r.Register(p, k, i); err != nil {
						t.Fatal(err)
					}
				}
			})
			mustEqual(t, "count before", r.Count(), 3)
			if reason == nil {
				a.Stop(t)
			} else {
				a.Exit(t, reason)
			}
			mustEqual(t, "lookup", len(r.Lookup("a")), 0)
			mustEqual(t, "keys", len(r.Keys(a.PID())), 0)
			mustEqual(t, "count", r.Count(), 0)
			mustEqual(t, "select", len(r.Select(nil)), 0)
		}
	})
}

// One monitor per (registry, process), whatever the number of keys; none
// left once the registry stops.
func TestOneMonitorPerProcess(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[int, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			for k := range 50 {
				_ = r.Register(p, k, k)
			}
			r.Unregister(p, 3)
			_ = r.Register(p, 3, 3)
		})
		info, _ := n.ProcessInfo(a.PID())
		mustEqual(t, "monitors of a registered process", len(info.MonitoredBy), 1)
		// Still one after it gave up every key and registered again.
		a.Do(t, func(p *gotp.Process) {
			for k := range 50 {
				r.Unregister(p, k)
			}
			_ = r.Register(p, 7, 7)
		})
		info, _ = n.ProcessInfo(a.PID())
		mustEqual(t, "monitors after unregistering all and registering again", len(info.MonitoredBy), 1)
		if err := r.Stop(gotptest.Context(t)); err != nil {
			t.Fatal(err)
		}
		info, _ = n.ProcessInfo(a.PID())
		mustEqual(t, "monitors after the registry stopped", len(info.MonitoredBy), 0)
	})
}

// The package documentation's statement: once a process has seen the Down
// of a monitor of P, or an exit signal from a link to P, no read returns
// P. Repeated, since callback order would otherwise be left to chance.
func TestNoStaleEntryAfterDownOrLinkExit(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		const rounds = 200
		for i := range rounds {
			registered := make(chan gotp.PID, 1)
			// Watcher: links to and monitors the subject, then checks the
			// registry on the exit signal and on the Down.
			checked := make(chan string, 2)
			_, err := n.Spawn(func(w *gotp.Process) error {
				w.TrapExit(true)
				subject, err := w.SpawnLink(func(p *gotp.Process) error {
					if err := r.Register(p, "k", i); err != nil {
						return err
					}
					registered <- p.Self()
					_, err := p.Receive(context.Background())
					return err
				})
				if err != nil {
					return err
				}
				<-registered
				w.Monitor(subject)
				w.Send(subject, "go") // the subject returns normally... or
				if i%2 == 1 {
					w.Exit(subject, gotp.ErrKill) // is killed
				}
				for range 2 {
					m, err := w.Receive(context.Background())
					if err != nil {
						return err
					}
					var what string
					switch m.(type) {
					case gotp.Exit:
						what = "exit signal"
					case gotp.Down:
						what = "down"
					default:
						continue
					}
					_, found := r.Find("k")
					dispatched := false
					r.Dispatch("k", func([]registry.Entry[int]) { dispatched = true })
					_, resolved := r.Via("k").Resolve(n)
					if len(r.Lookup("k")) != 0 || r.Count() != 0 || len(r.Keys(subject)) != 0 ||
						found || dispatched || resolved || len(r.Values("k", subject)) != 0 ||
						len(r.Match("k", registry.Any())) != 0 || len(r.Select(nil)) != 0 {
						checked <- "stale entry after " + what
					} else {
						checked <- ""
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				select {
				case msg := <-checked:
					if msg != "" {
						t.Fatalf("round %d: %s", i, msg)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("watcher did not report")
				}
			}
		}
	})
}

func TestStopAndRestart(t *testing.T) {
	n := gotptest.NewNode(t)
	r, err := registry.New[string, int](n, registry.Options{Meta: map[any]any{"m": 1}})
	if err != nil {
		t.Fatal(err)
	}
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) {
		if err := r.Register(p, "k", 1); !errors.Is(err, registry.ErrNotRunning) {
			t.Fatalf("register before start: %v", err)
		}
	})
	pid1, err := r.Start(gotptest.Context(t), gotp.Named("my_registry"))
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := n.Whereis("my_registry"); w != pid1 {
		t.Fatal("registry process not named")
	}
	if in := r.Info(); !in.Running || in.Entries != 0 || in.Processes != 0 {
		t.Fatalf("Info of an empty registry: %+v", in)
	}
	if _, err := r.Start(gotptest.Context(t)); !errors.Is(err, registry.ErrAlreadyRunning) {
		t.Fatalf("second Start: %v", err)
	}
	a.Do(t, func(p *gotp.Process) {
		_ = r.Register(p, "k", 1)
		_ = r.Register(p, "k2", 1)
		_ = r.PutMeta("m", 2)
	})
	// Introspection: the registry's process carries an Infoer.
	var in registry.Info
	if v, _ := n.ProcessValue(pid1, registry.InfoKey); v != nil {
		if inf, ok := v.(registry.Infoer); ok {
			in = inf.Info()
		}
	}
	if !in.Running || in.Entries != 2 || in.Processes != 1 || in.Kind != registry.Unique || in.Partitions != 1 {
		t.Fatalf("Info through the process dictionary: %+v", in)
	}
	// A crash of the registry's process drops everything.
	n.Exit(pid1, errors.New("crash"))
	deadline := time.Now().Add(10 * time.Second)
	for r.Running() {
		if time.Now().After(deadline) {
			t.Fatal("registry still running")
		}
		time.Sleep(time.Millisecond)
	}
	mustEqual(t, "lookup when stopped", len(r.Lookup("k")), 0)
	mustEqual(t, "count when stopped", r.Count(), 0)
	if _, ok := r.Meta("m"); ok {
		t.Fatal("meta when stopped")
	}
	if err := r.PutMeta("m", 3); !errors.Is(err, registry.ErrNotRunning) {
		t.Fatalf("PutMeta when stopped: %v", err)
	}
	a.Do(t, func(p *gotp.Process) {
		if err := r.Register(p, "k", 1); !errors.Is(err, registry.ErrNotRunning) {
			t.Fatalf("register when stopped: %v", err)
		}
	})
	info, _ := n.ProcessInfo(a.PID())
	mustEqual(t, "monitors after crash", len(info.MonitoredBy), 0)

	// Restarted (as a supervisor would): empty, initial meta, usable.
	pid2, err := r.Start(gotptest.Context(t))
	if err != nil || pid2 == pid1 {
		t.Fatalf("restart: %v, %v", pid2, err)
	}
	mustEqual(t, "count after restart", r.Count(), 0)
	if v, _ := r.Meta("m"); v != 1 {
		t.Fatalf("meta after restart = %v, want the initial 1", v)
	}
	a.Do(t, func(p *gotp.Process) {
		if err := r.Register(p, "k", 5); err != nil {
			t.Fatal(err)
		}
	})
	mustEqual(t, "lookup after restart", r.Lookup("k"), []registry.Entry[int]{{PID: a.PID(), Value: 5}})
	if err := r.Stop(gotptest.Context(t)); err != nil {
		t.Fatal(err)
	}
	if n.IsAlive(pid2) || r.Running() {
		t.Fatal("Stop left the registry running")
	}
	if err := r.Stop(gotptest.Context(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestLinkedToParent(t *testing.T) {
	n := gotptest.NewNode(t)
	parent := gotptest.NewSink(t, n)
	r, err := registry.Start[string, int](gotptest.Context(t), n, registry.Options{}, gotp.LinkTo(parent.PID()))
	if err != nil {
		t.Fatal(err)
	}
	parent.Exit(t, errors.New("parent crashed"))
	deadline := time.Now().Add(10 * time.Second)
	for r.Running() {
		if time.Now().After(deadline) {
			t.Fatal("registry survived its parent's crash")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBadOptionsAndMeta(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, o := range []registry.Options{
		{Partitions: -1},
		{Partitions: registry.MaxPartitions + 1},
		{Kind: 7},
		{Listeners: []gotp.Dest{nil}},
	} {
		if _, err := registry.New[string, int](n, o); !errors.Is(err, registry.ErrBadOptions) {
			t.Fatalf("New(%+v) = %v", o, err)
		}
	}
	r := start[string, int](t, n, registry.Options{})
	type tuple struct {
		a string
		b int
	}
	if err := r.PutMeta("custom_key", "custom_value"); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Meta("custom_key"); !ok || v != "custom_value" {
		t.Fatalf("Meta = %v, %v", v, ok)
	}
	if err := r.PutMeta(tuple{"tuple", 1}, "tuple_value"); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Meta(tuple{"tuple", 1}); !ok || v != "tuple_value" {
		t.Fatalf("Meta(tuple) = %v, %v", v, ok)
	}
	if err := r.PutMeta([]int{1}, 1); !errors.Is(err, registry.ErrBadMetaKey) {
		t.Fatalf("PutMeta with a slice key: %v", err)
	}
	if _, ok := r.Meta(map[int]int{}); ok {
		t.Fatal("Meta with an uncomparable key")
	}
}

// Keys of an interface type may hold values that are not comparable: a
// typed error, not a panic.
func TestUncomparableKeys(t *testing.T) {
	type holder struct{ v any }
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[any, int](t, n, opts)
		r2 := start[holder, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, []int{1}, 1); !errors.Is(err, registry.ErrBadKey) {
				t.Fatalf("register of a slice key: %v", err)
			}
			if err := r2.Register(p, holder{map[int]int{}}, 1); !errors.Is(err, registry.ErrBadKey) {
				t.Fatalf("register of a struct key holding a map: %v", err)
			}
			if err := r2.Register(p, holder{1}, 1); err != nil {
				t.Fatal(err)
			}
			r.Unregister(p, []int{1})
			r.UnregisterMatch(p, []int{1}, registry.Any())
			if _, _, err := r.UpdateValue(p, []int{1}, func(v int) int { return v }); err == nil {
				t.Fatal("UpdateValue with a slice key")
			}
		})
		mustEqual(t, "lookup", len(r.Lookup([]int{1})), 0)
		mustEqual(t, "match", len(r.Match([]int{1}, registry.Any())), 0)
		mustEqual(t, "values", len(r.Values([]int{1}, a.PID())), 0)
		r.Dispatch([]int{1}, func([]registry.Entry[int]) { t.Fatal("dispatched") })
		if _, ok := r.Find([]int{1}); ok {
			t.Fatal("found")
		}
		if _, ok := r.Via([]int{1}).Resolve(n); ok {
			t.Fatal("resolved")
		}
		mustEqual(t, "lookup struct key", len(r2.Lookup(holder{1})), 1)
	})
}

// Keys that hold a NaN are never equal to themselves: stored, they could
// not be found again, not even by the holder's cleanup, so they are
// refused with ErrBadKey, in a float, in a struct and in an interface.
// Negative and positive zero are equal, and are one key.
func TestNaNKeys(t *testing.T) {
	type point struct{ X, Y float64 }
	nan := math.NaN()
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		rf := start[float64, int](t, n, opts)
		rs := start[point, int](t, n, opts)
		ra := start[any, int](t, n, opts)
		ra2 := start[[2]complex128, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			for what, err := range map[string]error{
				"float":   rf.Register(p, nan, 1),
				"struct":  rs.Register(p, point{1, nan}, 1),
				"any":     ra.Register(p, nan, 1),
				"complex": ra2.Register(p, [2]complex128{0, complex(0, nan)}, 1),
			} {
				if !errors.Is(err, registry.ErrBadKey) {
					t.Errorf("register of a NaN key (%s): %v", what, err)
				}
			}
			if _, _, err := rf.UpdateValue(p, nan, func(v int) int { return v }); opts.Kind == registry.Unique && !errors.Is(err, registry.ErrBadKey) {
				t.Errorf("UpdateValue with a NaN key: %v", err)
			}
			if err := rf.Register(p, math.Copysign(0, -1), 7); err != nil {
				t.Errorf("register -0: %v", err)
			}
			if err := rs.Register(p, point{1, 2}, 1); err != nil {
				t.Errorf("register of a point: %v", err)
			}
		})
		mustEqual(t, "count of NaN-keyed registries", rf.Count()+rs.Count()+ra.Count()+ra2.Count(), 2)
		mustEqual(t, "lookup NaN", len(rf.Lookup(nan)), 0)
		mustEqual(t, "+0 finds -0", rf.Lookup(0), []registry.Entry[int]{{PID: a.PID(), Value: 7}})
		a.Stop(t)
		mustEqual(t, "count after the holder's exit", rf.Count()+rs.Count(), 0)
	})
}

// A predicate of UnregisterMatchFunc, or a Where pattern of
// UnregisterMatch, runs under a duplicate partition's lock. If it panics
// the lock is released and the entries are as they were; the process
// then exits with the panic, and its cleanup (which takes the same lock)
// removes them.
func TestUnregisterMatchPanics(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		r := start[string, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "k", 1)
			for _, unregister := range []func(){
				func() { r.UnregisterMatchFunc(p, "k", func(int) bool { panic("boom") }) },
				func() { r.UnregisterMatch(p, "k", registry.Where(func(any) bool { panic("boom") })) },
			} {
				func() {
					defer func() {
						if v := recover(); v != "boom" {
							t.Errorf("recovered %v, want boom", v)
						}
					}()
					unregister()
				}()
				mustEqual(t, "values after a panicking predicate", r.Values("k", p.Self()), []int{1})
				mustEqual(t, "lookup after a panicking predicate", len(r.Lookup("k")), 1)
			}
		})
		// Unrecovered, the panic ends the process; its cleanup must not
		// wait for a lock the panic left held (exitOf fails if the exit
		// never completes).
		err := exitOf(t, n, func(p *gotp.Process) error {
			_ = r.Register(p, "k2", 2)
			r.UnregisterMatchFunc(p, "k2", func(int) bool { panic("boom") })
			return nil
		})
		var pe *gotp.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("process ended with %v", err)
		}
		mustEqual(t, "lookup after the panicking process's exit", len(r.Lookup("k2")), 0)
		mustEqual(t, "lookup of the other process's key", r.Lookup("k"), []registry.Entry[int]{{PID: a.PID(), Value: 1}})
	})
}

func TestRegisterDeadProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{})
	var handle *gotp.Process
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) { handle = p })
	a.Stop(t)
	if err := r.Register(handle, "k", 1); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("register of an exited process: %v", err)
	}
	if err := r.Register(nil, "k", 1); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("register of nil: %v", err)
	}
	mustEqual(t, "count", r.Count(), 0)
}

// ---- listeners ----

func TestListeners(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		lpidSink := gotptest.NewSink(t, n, gotp.Named("listener"))
		lpid, events := lpidSink.PID(), lpidSink.C()
		opts.Listeners = []gotp.Dest{gotp.Name("listener"), lpid}
		r := start[string, int](t, n, opts)
		a := gotptest.NewSink(t, n)
		next := func() any { return gotptest.Recv(t, events) }
		a.Do(t, func(p *gotp.Process) {
			_ = r.Register(p, "hello", 1)
		})
		want := registry.RegisterEvent[string, int]{Registry: r.PID(), Key: "hello", PID: a.PID(), Value: 1}
		mustEqual(t, "register event (by name)", next(), any(want))
		mustEqual(t, "register event (by pid)", next(), any(want))
		a.Do(t, func(p *gotp.Process) {
			r.Unregister(p, "nothing") // removes nothing: no event
			r.Unregister(p, "hello")
		})
		wantU := registry.UnregisterEvent[string]{Registry: r.PID(), Key: "hello", PID: a.PID()}
		mustEqual(t, "unregister event", next(), any(wantU))
		mustEqual(t, "unregister event", next(), any(wantU))
		// An exit is not an unregister event (listeners monitor if they care).
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "bye", 2) })
		next()
		next()
		a.Stop(t)
		a2 := gotptest.NewSink(t, n)
		a2.Do(t, func(p *gotp.Process) { _ = r.Register(p, "marker", 3) })
		if e, ok := next().(registry.RegisterEvent[string, int]); !ok || e.Key != "marker" {
			t.Fatalf("event after an exit: %#v, want the marker's register", e)
		}
	})
}

// ---- via ----

type agent struct {
	server.Defaults
	n int
}

type getCount struct{}
type addCount struct{ by int }

func (g *agent) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	switch r := req.(type) {
	case getCount:
		return g.n, nil
	case addCount:
		g.n += r.by
		return g.n, nil
	}
	return nil, errors.New("unknown")
}

func TestViaNamesAServer(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{Partitions: 4})
	name := r.Via("agent")
	first, err := server.Start(gotptest.Context(t), n, &agent{}, server.WithVia(name))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := server.Call[int](gotptest.Context(t), n, name, getCount{}); err != nil || v != 0 {
		t.Fatalf("get = %v, %v", v, err)
	}
	if _, err := server.Call[int](gotptest.Context(t), n, name, addCount{1}); err != nil {
		t.Fatal(err)
	}
	if v, _ := server.Call[int](gotptest.Context(t), n, name, getCount{}); v != 1 {
		t.Fatalf("get = %v, want 1", v)
	}
	mustEqual(t, "lookup", r.Lookup("agent"), []registry.Entry[int]{{PID: first, Value: 0}})
	mustEqual(t, "keys", r.Keys(first), []string{"agent"})

	_, err = server.Start(gotptest.Context(t), n, &agent{}, server.WithVia(name))
	var ae *server.AlreadyStartedError
	if !errors.As(err, &ae) || ae.PID != first {
		t.Fatalf("second start: %v, want already started as %v", err, first)
	}
	mustEqual(t, "count after a failed start", r.Count(), 1)

	// Stopped, the name is free again; sends to it go nowhere.
	if err := server.Stop(gotptest.Context(t), n, name, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := name.Resolve(n); ok {
		t.Fatal("name still resolves after the server stopped")
	}
	if n.SendTo(name, "x") {
		t.Fatal("SendTo a free via name reported a destination")
	}
	second, err := server.Start(gotptest.Context(t), n, &agent{}, server.WithVia(r.ViaValue("agent", 42)))
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "value given in via", r.Lookup("agent"), []registry.Entry[int]{{PID: second, Value: 42}})
	name.UnregisterName(n)
	mustEqual(t, "after UnregisterName", len(r.Lookup("agent")), 0)
	mustEqual(t, "keys after UnregisterName", len(r.Keys(second)), 0)
}

func TestViaRegisterNameErrors(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[int, int](t, n, registry.Options{})
	a, b := gotptest.NewSink(t, n), gotptest.NewSink(t, n)
	if err := r.Via(1).RegisterName(n, a.PID()); err != nil {
		t.Fatal(err)
	}
	err := r.Via(1).RegisterName(n, b.PID())
	var ae *gotp.AlreadyRegisteredError
	if !errors.As(err, &ae) || ae.Owner != a.PID() || ae.Name != "1" {
		t.Fatalf("taken via name: %v", err)
	}
	b.Stop(t)
	if err := r.Via(2).RegisterName(n, b.PID()); !errors.Is(err, gotp.ErrNoProc) {
		t.Fatalf("via name for a dead process: %v", err)
	}
	other := gotp.NewNode(gotp.Options{Name: "other"})
	defer other.Stop(context.Background())
	if err := r.Via(3).RegisterName(other, a.PID()); err == nil {
		t.Fatal("via name registered through another node")
	}
	if pid, ok := r.Via(1).Resolve(n); !ok || pid != a.PID() {
		t.Fatalf("Resolve = %v, %v", pid, ok)
	}
}

// Listeners are told of UnregisterMatch that removed something (not of one
// that removed nothing), of via names taken and freed, and not of
// UpdateValue; a listener that has exited simply misses events.
func TestListenersOtherEvents(t *testing.T) {
	kinds(t, func(t *testing.T, opts registry.Options) {
		n := gotptest.NewNode(t)
		lpidSink := gotptest.NewSink(t, n)
		lpid, events := lpidSink.PID(), lpidSink.C()
		gone := gotptest.NewSink(t, n)
		gone.Stop(t)
		opts.Listeners = []gotp.Dest{gone.PID(), lpid}
		r := start[string, int](t, n, opts)
		next := func() any { return gotptest.Recv(t, events) }
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			if err := r.Register(p, "hello", 1); err != nil {
				t.Fatalf("register with an exited listener: %v", err)
			}
		})
		mustEqual(t, "register event", next(), any(registry.RegisterEvent[string, int]{Registry: r.PID(), Key: "hello", PID: a.PID(), Value: 1}))
		a.Do(t, func(p *gotp.Process) {
			mustEqual(t, "unregister_match of nothing", r.UnregisterMatch(p, "hello", registry.Eq(2)), 0)
			if opts.Kind == registry.Unique {
				if _, _, err := r.UpdateValue(p, "hello", func(v int) int { return v + 1 }); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.UnregisterMatch(p, "hello", registry.Any()); got != 1 {
				t.Fatalf("unregister_match removed %d", got)
			}
		})
		mustEqual(t, "unregister_match event", next(), any(registry.UnregisterEvent[string]{Registry: r.PID(), Key: "hello", PID: a.PID()}))
		if opts.Kind == registry.Unique {
			if err := r.Via("name").RegisterName(n, a.PID()); err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "via register event", next(), any(registry.RegisterEvent[string, int]{Registry: r.PID(), Key: "name", PID: a.PID()}))
			r.Via("name").UnregisterName(n)
			mustEqual(t, "via unregister event", next(), any(registry.UnregisterEvent[string]{Registry: r.PID(), Key: "name", PID: a.PID()}))
			r.Via("name").UnregisterName(n) // frees nothing: no event
		}
		a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "marker", 3) })
		if e, ok := next().(registry.RegisterEvent[string, int]); !ok || e.Key != "marker" {
			t.Fatalf("got %#v, want the marker's register event (no other event before it)", e)
		}
	})
}

// The registry runs under a real supervisor: when its process crashes the
// supervisor starts it again (the same *Registry), empty and usable.
func TestSupervisedRestart(t *testing.T) {
	n := gotptest.NewNode(t)
	r, err := registry.New[string, int](n, registry.Options{Kind: registry.Duplicate, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
		Strategy: supervisor.OneForOne,
		Children: []supervisor.ChildSpec{{
			ID: "registry",
			Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
				return r.Start(ctx, gotp.LinkTo(sup.Self()), gotp.Named("supervised_registry"))
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := r.PID()
	if w, _ := n.Whereis("supervised_registry"); w != first || !r.Running() {
		t.Fatalf("registry not started by its supervisor: %v, %v", w, first)
	}
	a := gotptest.NewSink(t, n)
	a.Do(t, func(p *gotp.Process) { _ = r.Register(p, "k", 1) })
	n.Exit(first, errors.New("crash"))
	which, err := supervisor.WhichChildren(gotptest.Context(t), n, sup)
	if err != nil || len(which) != 1 || which[0].Restarts != 1 || which[0].PID == first {
		t.Fatalf("children after the registry crashed: %+v, %v", which, err)
	}
	if r.PID() != which[0].PID || !r.Running() {
		t.Fatalf("registry's PID %v, running %v; supervisor's child %v", r.PID(), r.Running(), which[0].PID)
	}
	mustEqual(t, "entries after restart", r.Count(), 0)
	a.Do(t, func(p *gotp.Process) {
		if err := r.Register(p, "k", 2); err != nil {
			t.Fatal(err)
		}
	})
	mustEqual(t, "lookup after restart", r.Lookup("k"), []registry.Entry[int]{{PID: a.PID(), Value: 2}})
}
