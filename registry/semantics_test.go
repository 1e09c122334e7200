package registry_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
)

// Elixir's "delete_meta" doctest: a deleted key is gone, and deleting it
// again (or a key never set) does nothing; Options.Meta keys can be
// deleted too, until the registry restarts.
func TestDeleteMeta(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{Meta: map[any]any{"initial": 1}})
	gotptest.Must(t, r.PutMeta("custom_key", "custom_value"))
	if v, ok := r.Meta("custom_key"); !ok || v != "custom_value" {
		t.Fatalf("Meta = %v, %v", v, ok)
	}
	gotptest.Must(t, r.DeleteMeta("custom_key"))
	if v, ok := r.Meta("custom_key"); ok {
		t.Fatalf("Meta after DeleteMeta = %v, want none", v)
	}
	gotptest.Must(t, r.DeleteMeta("custom_key"))
	gotptest.Must(t, r.DeleteMeta("never_set"))
	gotptest.Must(t, r.DeleteMeta("initial"))
	if _, ok := r.Meta("initial"); ok {
		t.Fatal("initial meta survived DeleteMeta")
	}
	if err := r.DeleteMeta([]int{1}); !errors.Is(err, registry.ErrBadMetaKey) {
		t.Fatalf("DeleteMeta with a slice key: %v", err)
	}
	gotptest.Must(t, r.Stop(gotptest.Context(t)))
	if err := r.DeleteMeta("initial"); !errors.Is(err, registry.ErrNotRunning) {
		t.Fatalf("DeleteMeta when stopped: %v", err)
	}
	_, err := r.Start(gotptest.Context(t))
	gotptest.Must(t, err)
	if v, ok := r.Meta("initial"); !ok || v != 1 {
		t.Fatalf("initial meta after restart = %v, %v", v, ok)
	}
}

// Elixir tells listeners of an unregister_match only when it removed every
// entry the process had under the key: removing some of them leaves the
// process registered.
func TestListenersPartialUnregisterMatch(t *testing.T) {
	eachPartitions(t, func(t *testing.T, parts int) {
		n := gotptest.NewNode(t)
		listener := gotptest.NewSink(t, n)
		r := start[string, int](t, n, registry.Options{Kind: registry.Duplicate, Partitions: parts, Listeners: []gotp.Dest{listener.PID()}})
		a := gotptest.NewSink(t, n)
		a.Do(t, func(p *gotp.Process) {
			for v := range 3 {
				gotptest.Must(t, r.Register(p, "hello", v))
			}
			gotptest.Must(t, r.Register(p, "other", 9))
		})
		for range 4 {
			if _, ok := listener.Next(t).(registry.RegisterEvent[string, int]); !ok {
				t.Fatal("want a register event")
			}
		}
		a.Do(t, func(p *gotp.Process) {
			if got := r.UnregisterMatch(p, "hello", registry.Eq(0)); got != 1 {
				t.Fatalf("removed %d, want 1", got)
			}
			if got := r.UnregisterMatchFunc(p, "hello", func(v int) bool { return v == 1 }); got != 1 {
				t.Fatalf("removed %d, want 1", got)
			}
		})
		listener.None(t) // "hello" still has an entry of a: no unregister yet
		a.Do(t, func(p *gotp.Process) {
			if got := r.UnregisterMatch(p, "hello", registry.Any()); got != 1 {
				t.Fatalf("removed %d, want 1", got)
			}
		})
		want := registry.UnregisterEvent[string]{Registry: r.PID(), Key: "hello", PID: a.PID()}
		if got := listener.Next(t); got != any(want) {
			t.Fatalf("event %#v, want %#v", got, want)
		}
		a.Do(t, func(p *gotp.Process) { gotptest.Must(t, r.Register(p, "marker", 0)) })
		if ev := listener.Next(t); ev != any(registry.RegisterEvent[string, int]{Registry: r.PID(), Key: "marker", PID: a.PID()}) {
			t.Fatalf("got %#v, want the marker's register (one unregister event only)", ev)
		}
	})
}

// A via name whose holder has exited but whose entry is not cleaned up yet
// resolves to nothing: SendTo reports no destination and server.Call fails
// with gotp.ErrNoProc without calling the dead PID. The holder's exit is
// held inside a MonitorFunc set before it registered (the one monitor a
// process keeps inline, told first), so the registry's cleanup has not
// run while the test looks.
func TestViaDeadHolderResolvesToNothing(t *testing.T) {
	n := gotptest.NewNode(t)
	r := start[string, int](t, n, registry.Options{Partitions: 4})
	holder := gotptest.NewSink(t, n)
	inExit, release := make(chan struct{}), make(chan struct{})
	n.MonitorFunc(holder.PID(), func(gotp.Down) {
		close(inExit)
		<-release
	})
	name := r.Via("svc")
	gotptest.Must(t, name.RegisterName(n, holder.PID()))
	if pid, ok := name.Resolve(n); !ok || pid != holder.PID() {
		t.Fatalf("Resolve of a live holder = %v, %v", pid, ok)
	}
	go n.Exit(holder.PID(), gotp.ErrKill)
	gotptest.Recv(t, inExit)
	if es := r.Lookup("svc"); len(es) != 1 || es[0].PID != holder.PID() {
		t.Fatalf("the dead holder's entry is gone already (%v): the test holds nothing", es)
	}
	if pid, ok := name.Resolve(n); ok {
		t.Fatalf("Resolve of a dead holder = %v, want nothing", pid)
	}
	if n.SendTo(name, "x") {
		t.Fatal("SendTo a dead holder's via name reported a destination")
	}
	_, err := server.Call[int](gotptest.Context(t), n, name, getCount{})
	var ce *server.CallError
	if !errors.As(err, &ce) || !errors.Is(err, gotp.ErrNoProc) || !ce.Server.IsZero() {
		t.Fatalf("Call through a dead holder's via name: %v, want noproc without a server", err)
	}
	close(release)
	gotptest.Recv(t, holder.Done())
	gotptest.Eventually(t, "the entry is cleaned up", func() bool { return len(r.Lookup("svc")) == 0 })
}
