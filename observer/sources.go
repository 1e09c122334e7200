package observer

import (
	"context"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/registry"
)

// registryInfo is what RegistrySource needs of a registry: every
// *registry.Registry[K, V] has it.
type registryInfo interface{ Info() registry.Info }

// RegistrySource shows the registry r under name.
func RegistrySource(name string, r registryInfo) Source {
	return SourceFunc(func(_ context.Context, s *Snapshot) {
		in := r.Info()
		s.Registries = append(s.Registries, Registry{
			Name:       name,
			Kind:       in.Kind.String(),
			Partitions: in.Partitions,
			Entries:    in.Entries,
			Keys:       in.Keys,
		})
	})
}

// ScopeSource shows the pg scope id of node n: its groups and their
// members per node. The scope is looked up by id on every request (one
// call to the scope's process, bounded by the request's context), so a
// scope that a supervisor restarts stays visible.
func ScopeSource(n *gotp.Node, id string) Source {
	return SourceFunc(func(ctx context.Context, s *Snapshot) {
		scope, err := pg.Lookup(ctx, n, id)
		if err != nil {
			return
		}
		sc := Scope{ID: id, Groups: []Group{}}
		for _, g := range scope.Groups() {
			grp := Group{Name: g.Name, Members: map[string][]string{}}
			for node, pids := range g.Members {
				for _, p := range pids {
					grp.Members[node] = append(grp.Members[node], p.String())
				}
				grp.Size += len(pids)
			}
			sc.Groups = append(sc.Groups, grp)
		}
		s.Scopes = append(s.Scopes, sc)
	})
}

// inboxStats is what InboxSource needs of an inbox table: every
// *inbox.Queue[T] has it.
type inboxStats interface {
	Table() string
	Stats(ctx context.Context) (inbox.Stats, error)
}

// outcomeCounter is implemented by inbox values that count how their jobs
// ended (acked, retried, dropped, dead-lettered...).
type outcomeCounter interface{ Outcomes() map[string]int64 }

// healthReporter is implemented by inbox values that report the failures
// their subscriptions met (failed claims, lost locks, unreadable rows).
type healthReporter interface{ Health() inbox.Health }

// InboxSource shows inbox tables: ready, in work, delayed, dead and invalid
// jobs (one statement per table and request), job outcomes when the value
// counts them, and the failures its subscriptions met (inbox.Health) when
// the value reports them.
func InboxSource(tables ...inboxStats) Source {
	return SourceFunc(func(ctx context.Context, s *Snapshot) {
		for _, q := range tables {
			row := InboxTable{Name: q.Table()}
			st, err := q.Stats(ctx)
			if err != nil {
				row.Err = fmt.Sprint(err)
			} else {
				row.Ready, row.InWork, row.Delayed, row.Dead, row.Invalid = st.Ready, st.InWork, st.Delayed, st.Dead, st.Invalid
			}
			if oc, ok := q.(outcomeCounter); ok {
				row.Outcomes = oc.Outcomes()
			}
			if hr, ok := q.(healthReporter); ok {
				h := hr.Health()
				row.Health = &InboxHealth{
					ClaimErrors: h.ClaimErrors, PermanentErrors: h.PermanentErrors,
					LocksLost: h.LocksLost, BadRows: h.BadRows, Failing: h.Failing,
					LastError: h.LastError, LastErrorAt: h.LastErrorAt,
				}
			}
			s.Inboxes = append(s.Inboxes, row)
		}
	})
}
