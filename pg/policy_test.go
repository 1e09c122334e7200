package pg_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
)

// recorder is a Policy that records every question and denies one
// permission.
type recorder struct {
	mu    sync.Mutex
	deny  pg.Permission
	asked []ask
}

type ask struct {
	perm     pg.Permission
	resource string
	pid      gotp.PID
}

func (r *recorder) Allow(perm pg.Permission, resource string, pid gotp.PID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, ask{perm, resource, pid})
	return perm != r.deny
}

func (r *recorder) set(deny pg.Permission) {
	r.mu.Lock()
	r.deny, r.asked = deny, nil
	r.mu.Unlock()
}

func (r *recorder) questions() []ask {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// TestPolicy checks every permission, denied and allowed: a denied
// operation fails with *DeniedError naming permission, resource and
// process, and changes nothing; the same operation allowed works; the
// policy is asked with Wippy's names and the right resource.
func TestPolicy(t *testing.T) {
	pol := &recorder{}
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "app:pg", pg.Options{Policy: pol})
	m := gotptest.NewSink(t, n)
	g := open(t, m, s)
	other := gotptest.NewSink(t, n)
	og := open(t, other, s)
	gotptest.Must(t, og.Join("g")) // a member to broadcast to and list
	gotptest.Must(t, g.Join("mine"))

	type result struct {
		err   error
		check func(t *testing.T, denied bool) // what changed, or not
	}
	cases := []struct {
		perm     pg.Permission
		resource string
		op       func() result
	}{
		{pg.PermJoin, "j", func() result {
			err := g.Join("j")
			return result{err, func(t *testing.T, denied bool) {
				want := []gotp.PID{m.PID()}
				if denied {
					want = nil
				}
				wantMembers(t, og, "j", want...)
				if !denied {
					gotptest.Must(t, g.Leave("j"))
				}
			}}
		}},
		{pg.PermLeave, "mine", func() result {
			err := g.Leave("mine")
			return result{err, func(t *testing.T, denied bool) {
				if denied {
					wantMembers(t, og, "mine", m.PID())
					return
				}
				wantMembers(t, og, "mine")
				gotptest.Must(t, g.Join("mine"))
			}}
		}},
		{pg.PermGetMembers, "g", func() result {
			got, err := g.Members("g")
			return result{err, func(t *testing.T, denied bool) {
				if denied != (got == nil) {
					t.Fatalf("Members = %v with denied=%v", got, denied)
				}
			}}
		}},
		{pg.PermGetLocalMembers, "g", func() result {
			got, err := g.LocalMembers("g")
			return result{err, func(t *testing.T, denied bool) {
				if denied != (got == nil) {
					t.Fatalf("LocalMembers = %v with denied=%v", got, denied)
				}
			}}
		}},
		{pg.PermWhichGroups, "app:pg", func() result {
			got, err := g.WhichGroups()
			return result{err, func(t *testing.T, denied bool) {
				if denied != (got == nil) {
					t.Fatalf("WhichGroups = %v with denied=%v", got, denied)
				}
			}}
		}},
		{pg.PermWhichLocalGroups, "app:pg", func() result {
			got, err := g.WhichLocalGroups()
			return result{err, func(t *testing.T, denied bool) {
				if denied != (got == nil) {
					t.Fatalf("WhichLocalGroups = %v with denied=%v", got, denied)
				}
			}}
		}},
		{pg.PermBroadcast, "g", func() result {
			err := g.Broadcast("g", "t", 1)
			return result{err, func(t *testing.T, denied bool) {
				if denied {
					other.None(t)
				} else if msg := other.Next(t).(pg.Message); msg.Topic != "t" {
					t.Fatalf("got %#v", msg)
				}
			}}
		}},
		{pg.PermBroadcastLocal, "g", func() result {
			err := g.BroadcastLocal("g", "tl", 1)
			return result{err, func(t *testing.T, denied bool) {
				if denied {
					other.None(t)
				} else if msg := other.Next(t).(pg.Message); msg.Topic != "tl" {
					t.Fatalf("got %#v", msg)
				}
			}}
		}},
		{pg.PermMonitor, "g", func() result {
			sub, members, err := g.Monitor("g")
			return result{err, func(t *testing.T, denied bool) {
				if denied {
					if sub != nil || members != nil || s.Info().Subscriptions != 0 {
						t.Fatalf("denied Monitor left a subscription")
					}
					return
				}
				sub.Close()
			}}
		}},
		{pg.PermEvents, "app:pg", func() result {
			sub, snap, err := g.Events()
			return result{err, func(t *testing.T, denied bool) {
				if denied {
					if sub != nil || snap != nil || s.Info().Subscriptions != 0 {
						t.Fatalf("denied Events left a subscription")
					}
					return
				}
				sub.Close()
			}}
		}},
	}
	seen := map[pg.Permission]bool{}
	for _, c := range cases {
		seen[c.perm] = true
		t.Run(string(c.perm), func(t *testing.T) {
			for _, deny := range []bool{true, false} {
				pol.set("")
				if deny {
					pol.set(c.perm)
				}
				r := c.op()
				if q := pol.questions(); !slices.Contains(q, ask{c.perm, c.resource, m.PID()}) {
					t.Fatalf("policy asked %v, want %s on %q for %v", q, c.perm, c.resource, m.PID())
				}
				if deny {
					var de *pg.DeniedError
					if !errors.As(r.err, &de) || *de != (pg.DeniedError{Permission: c.perm, Resource: c.resource, PID: m.PID()}) {
						t.Fatalf("denied: err = %#v, want *DeniedError{%s %q %v}", r.err, c.perm, c.resource, m.PID())
					}
					wantErr(t, r.err, pg.ErrDenied)
				} else if r.err != nil {
					t.Fatalf("allowed: %v", r.err)
				}
				r.check(t, deny)
			}
		})
	}

	t.Run(string(pg.PermOpen), func(t *testing.T) {
		pol.set(pg.PermOpen)
		p := gotptest.NewSink(t, n)
		_, err := s.Open(p.Process())
		var de *pg.DeniedError
		if !errors.As(err, &de) || *de != (pg.DeniedError{Permission: pg.PermOpen, Resource: "app:pg", PID: p.PID()}) {
			t.Fatalf("Open denied: %#v", err)
		}
		_, err = pg.Open(context.Background(), p.Process(), "app:pg")
		wantErr(t, err, pg.ErrDenied)
		if in := s.Info(); in.Processes != 2 {
			t.Fatalf("denied Open changed the scope: %+v", in)
		}
		pol.set("")
		inst, err := pg.Open(context.Background(), p.Process(), "app:pg")
		gotptest.Must(t, err)
		if q := pol.questions(); !slices.Contains(q, ask{pg.PermOpen, "app:pg", p.PID()}) {
			t.Fatalf("policy asked %v", q)
		}
		inst.Release()
	})
	seen[pg.PermOpen] = true
	for _, p := range pg.Permissions() {
		if !seen[p] {
			t.Errorf("permission %s not tested", p)
		}
	}
}

// TestPolicyBatch checks that a batch is refused as a whole when one of
// its groups is refused, and that the policy is asked for each group.
func TestPolicyBatch(t *testing.T) {
	pol := pg.PolicyFunc(func(perm pg.Permission, group string, _ gotp.PID) bool {
		return group != "secret"
	})
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{Policy: pol})
	g := open(t, gotptest.NewSink(t, n), s)
	var de *pg.DeniedError
	if err := g.Join("a", "secret", "b"); !errors.As(err, &de) || de.Resource != "secret" || de.Permission != pg.PermJoin {
		t.Fatalf("Join batch = %v, want denied on secret", err)
	}
	wantGroups(t, g)
	gotptest.Must(t, g.Join("a", "b"))
	if err := g.Leave("a", "secret"); !errors.As(err, &de) || de.Permission != pg.PermLeave {
		t.Fatalf("Leave batch = %v, want denied", err)
	}
	wantGroups(t, g, "a", "b")
}

// TestPolicyNotAskedWhenReleased checks that a released instance fails
// before the policy is asked.
func TestPolicyNotAskedWhenReleased(t *testing.T) {
	pol := &recorder{}
	n := gotptest.NewNode(t, gotptest.Name("a"))
	s := newScope(t, n, "s", pg.Options{Policy: pol})
	g := open(t, gotptest.NewSink(t, n), s)
	g.Release()
	pol.set("")
	for name, err := range allOps(g) {
		if !errors.Is(err, pg.ErrReleased) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if q := pol.questions(); len(q) != 0 {
		t.Fatalf("policy asked %v for a released instance", q)
	}
}
