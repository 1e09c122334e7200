package observer

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/internal/render"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/registry"
)

// RegistrySource shows the registry r under name: its sizes on the page
// and in metrics, and its entries on the registry page (paged, filterable
// by the text of key, PID and value).
func RegistrySource[K comparable, V any](name string, r *registry.Registry[K, V]) Source {
	page := func(filter string, offset, limit int) ([]KeyRow, int) {
		return registryEntries(r, filter, offset, limit)
	}
	return SourceFunc(func(_ context.Context, s *Snapshot) {
		in := r.Info()
		s.Registries = append(s.Registries, Registry{
			Name:       name,
			Kind:       in.Kind.String(),
			Partitions: in.Partitions,
			Entries:    in.Entries,
			Keys:       in.Keys,
			page:       page,
		})
	})
}

// KeyRow is one entry of a registry, as the registry page shows it.
type KeyRow struct {
	Key   string `json:"key"`
	PID   string `json:"pid"`
	Value string `json:"value,omitempty"`
}

// keyPager returns the entries matching filter, sorted by key then PID,
// from offset, at most limit of them, and how many matched.
type keyPager func(filter string, offset, limit int) ([]KeyRow, int)

// keyTextLimit bounds the text of one key or value on the registry page.
const keyTextLimit = 200

// registryEntries reads every entry of r (one partition at a time, see
// registry.All), keeps those matching filter and returns one page of
// them. It costs O(entries) per request: the page is for an operator, not
// for polling.
func registryEntries[K comparable, V any](r *registry.Registry[K, V], filter string, offset, limit int) ([]KeyRow, int) {
	f := strings.ToLower(filter)
	var rows []KeyRow
	for it := range r.All() {
		row := KeyRow{Key: render.Value(it.Key, keyTextLimit), PID: it.PID.String()}
		if _, empty := any(it.Value).(struct{}); !empty {
			row.Value = render.Value(it.Value, keyTextLimit)
		}
		if f != "" && !strings.Contains(strings.ToLower(row.Key+" "+row.PID+" "+row.Value), f) {
			continue
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b KeyRow) int { return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.PID, b.PID)) })
	matched := len(rows)
	offset = min(max(offset, 0), matched)
	return rows[offset:min(offset+limit, matched)], matched
}

// ScopeSource shows the pg scope id of node n: how many groups and
// memberships it has (in metrics too) and its largest groups with their
// members per node (at most Options.MaxRows groups, on the page). The
// scope is looked up by id on every request (one call to the scope's
// process, bounded by the request's context), so a scope that a
// supervisor restarts stays visible.
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
			sc.GroupCount++
			sc.Memberships += grp.Size
			sc.Groups = append(sc.Groups, grp)
		}
		slices.SortStableFunc(sc.Groups, func(a, b Group) int {
			return cmp.Or(cmp.Compare(b.Size, a.Size), strings.Compare(a.Name, b.Name))
		})
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

// timingReporter is implemented by inbox values that time their handlers
// and the delay from publish to start.
type timingReporter interface{ Timings() inbox.Timings }

// healthReporter is implemented by inbox values that report the failures
// their subscriptions met (failed claims, lost locks, unreadable rows).
type healthReporter interface{ Health() inbox.Health }

// InboxSource shows inbox tables: ready, in work, delayed, dead and invalid
// jobs (one statement per table and request), job outcomes when the value
// counts them, and the failures its subscriptions met (inbox.Health) when
// the value reports them. Every *inbox.Queue[T] also gets a page of its
// jobs by state (/observer/inbox?table=...), a page per job, and, with
// Options.AllowKill, the job actions retry, delete and cancel.
func InboxSource(tables ...inboxStats) Source { return inboxSource(tables) }

// inboxSource is the Source InboxSource makes; the job pages find their
// table through it.
type inboxSource []inboxStats

// inboxTable returns the table named name, the first of that name.
func (src inboxSource) inboxTable(name string) (inboxStats, bool) {
	for _, q := range src {
		if q.Table() == name {
			return q, true
		}
	}
	return nil, false
}

// Observe adds a row per table to s.Inboxes.
func (src inboxSource) Observe(ctx context.Context, s *Snapshot) {
	for _, q := range src {
		row := InboxTable{Name: q.Table()}
		st, err := q.Stats(ctx)
		if err != nil {
			row.Err = fmt.Sprint(err)
		} else {
			row.Ready, row.InWork, row.Delayed, row.Dead, row.Invalid, row.Cancelled = st.Ready, st.InWork, st.Delayed, st.Dead, st.Invalid, st.Cancelled
			row.Processed = st.Processed
		}
		if oc, ok := q.(outcomeCounter); ok {
			row.Outcomes = oc.Outcomes()
		}
		if hr, ok := q.(healthReporter); ok {
			h := hr.Health()
			row.Health = &InboxHealth{
				ClaimErrors: h.ClaimErrors, PermanentErrors: h.PermanentErrors,
				LocksLost: h.LocksLost, BadRows: h.BadRows, Failing: h.Failing,
				LimitHeld: h.LimitHeld, LimitWaiting: h.LimitWaiting, Prepared: h.Prepared,
				LastError: h.LastError, LastErrorAt: h.LastErrorAt,
			}
		}
		_, row.Jobs = q.(inboxJobs)
		if tr, ok := q.(timingReporter); ok {
			t := tr.Timings()
			row.timings = &t
		}
		s.Inboxes = append(s.Inboxes, row)
	}
}
