package observer

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/supervisor"
)

// Snapshot is everything the observer shows, at one moment. It is what
// the JSON endpoint returns.
type Snapshot struct {
	Node   string    `json:"node"`
	Time   time.Time `json:"time"`
	System System    `json:"system"`
	// Processes holds at most Options.MaxRows rows, in the order asked
	// for; ProcessCount is how many processes there are and
	// ProcessesShown how many matched the filter (before the cut).
	Processes      []Process     `json:"processes"`
	ProcessCount   int           `json:"process_count"`
	ProcessesShown int           `json:"processes_matched"`
	Supervisors    []SupTree     `json:"supervisors"`
	Registries     []Registry    `json:"registries"`
	Scopes         []Scope       `json:"scopes"`
	Inboxes        []InboxTable  `json:"inboxes"`
	Cluster        []ClusterPeer `json:"cluster"`
	// ClusterTotals are the cluster's counters since Join (nil without a
	// ClusterSource).
	ClusterTotals *ClusterTotals `json:"cluster_totals,omitempty"`
}

// Process is one row of the process table.
type Process struct {
	PID         string    `json:"pid"`
	Name        string    `json:"name,omitempty"`
	Label       string    `json:"label,omitempty"`
	Behaviour   string    `json:"behaviour,omitempty"`
	Status      string    `json:"status"`
	MailboxLen  int       `json:"mailbox_len"`
	MailboxMax  int       `json:"mailbox_max,omitempty"` // the mailbox limit; 0: unbounded
	Overflow    string    `json:"overflow,omitempty"`    // the limit's policy: "kill" or "drop"
	Dropped     uint64    `json:"dropped,omitempty"`     // messages the limit dropped
	Handled     uint64    `json:"handled"`
	Links       []string  `json:"links,omitempty"`
	Monitors    []string  `json:"monitors,omitempty"`
	MonitoredBy int       `json:"monitored_by"`
	TrapExit    bool      `json:"trap_exit"`
	Started     time.Time `json:"started"`
}

// SupTree is a supervisor and its children, recursively.
type SupTree struct {
	PID       string     `json:"pid"`
	Name      string     `json:"name,omitempty"`
	Strategy  string     `json:"strategy"`
	Dynamic   bool       `json:"dynamic"`
	Intensity int        `json:"intensity"`
	Period    string     `json:"period"`
	Restarts  uint64     `json:"restarts"`
	Failures  uint64     `json:"start_failures"`
	Children  []SupChild `json:"children"`
	// Path names the supervisor in metrics: its name, or its parent's
	// path and its child id ("dynamic" for a dynamic child), or
	// "unnamed" for an unnamed supervisor at the top.
	Path string `json:"path"`
}

// SupChild is one child of a supervisor.
type SupChild struct {
	ID       string   `json:"id"`
	PID      string   `json:"pid,omitempty"`
	Name     string   `json:"name,omitempty"`  // the child's registered name
	Label    string   `json:"label,omitempty"` // the child's label (gotp.Process.SetLabel)
	State    string   `json:"state"`
	Type     string   `json:"type"`
	Restart  string   `json:"restart"`
	Restarts int      `json:"restarts"`
	Sub      *SupTree `json:"sub,omitempty"`
}

// Registry describes one registry.
type Registry struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Partitions int    `json:"partitions"`
	Entries    int    `json:"entries"`
	Keys       []int  `json:"keys_per_partition"`

	page keyPager // the registry's entries, for the registry page (RegistrySource)
}

// Scope describes one pg scope: how many groups and memberships it has,
// and its largest groups (at most Options.MaxRows) with their members per
// node.
type Scope struct {
	ID          string  `json:"id"`
	GroupCount  int     `json:"group_count"`
	Memberships int     `json:"memberships"`
	Groups      []Group `json:"groups"`
}

// Group is one pg group with its members by node.
type Group struct {
	Name    string              `json:"name"`
	Members map[string][]string `json:"members"` // node name → PIDs
	Size    int                 `json:"size"`
}

// InboxTable describes one inbox table.
type InboxTable struct {
	Name      string           `json:"name"`
	Ready     int64            `json:"ready"`
	InWork    int64            `json:"in_work"`
	Delayed   int64            `json:"delayed"`
	Dead      int64            `json:"dead"`
	Processed int64            `json:"processed"`          // acked rows kept (a table with Columns.ProcessedAt)
	Invalid   int64            `json:"invalid"`            // rows no claim will take (see inbox.Stats)
	Cancelled int64            `json:"cancelled"`          // cancelled by inbox.Queue.Cancel
	Outcomes  map[string]int64 `json:"outcomes,omitempty"` // outcome → jobs since start
	// Health is what the table's subscriptions in this process met (see
	// inbox.Health), when the value reports it.
	Health *InboxHealth `json:"health,omitempty"`
	Err    string       `json:"error,omitempty"`
	// Jobs is set when the table's jobs can be listed and acted on (the
	// inbox page of the table).
	Jobs bool `json:"jobs,omitempty"`

	timings *inbox.Timings // for the metrics, when the value keeps them
}

// InboxHealth is what an inbox table's subscriptions in this process met
// since they started: failed claims, lost locks, unreadable rows.
type InboxHealth struct {
	ClaimErrors     int64     `json:"claim_errors"`
	PermanentErrors int64     `json:"permanent_errors"` // of claim_errors: the table refuses the statement
	LocksLost       int64     `json:"locks_lost"`
	BadRows         int64     `json:"bad_rows"`
	Failing         int64     `json:"failing"`       // claimers backing off now
	LimitHeld       int64     `json:"limit_held"`    // places of Limits held in TABLE_limits now
	LimitWaiting    int64     `json:"limit_waiting"` // jobs held waiting for a place of Limits now
	Prepared        int64     `json:"prepared"`      // statements kept prepared now (SQLite)
	LastError       string    `json:"last_error,omitempty"`
	LastErrorAt     time.Time `json:"last_error_at,omitzero"`
}

// ClusterPeer is one node of the cluster as this node sees it: up (with
// the messages exchanged with this incarnation of it), down (seen since
// the observer started), or refused (an address whose credentials were
// refused, either way: see cluster.AuthError).
type ClusterPeer struct {
	Node          string    `json:"node"`
	Up            bool      `json:"up"`
	Self          bool      `json:"self,omitempty"`
	Refused       string    `json:"refused,omitempty"` // why, for a refused peer
	LastHeartbeat time.Time `json:"last_heartbeat"`
	MessagesIn    uint64    `json:"messages_in"`
	MessagesOut   uint64    `json:"messages_out"`
	Pending       int       `json:"pending_bytes"`
}

// ClusterTotals are a cluster's counters (cluster.Stats).
type ClusterTotals struct {
	MessagesIn   uint64 `json:"messages_in"`
	MessagesOut  uint64 `json:"messages_out"`
	BytesIn      uint64 `json:"bytes_in"`
	BytesOut     uint64 `json:"bytes_out"`
	Dropped      uint64 `json:"dropped"`
	EncodeErrors uint64 `json:"encode_errors"`
	DecodeErrors uint64 `json:"decode_errors"`
	AuthFailures int    `json:"auth_failures"`
}

// snapshot gathers a Snapshot of n and of the sources in o: with rows,
// the system panel and a row for every process (the page and the JSON
// cut them); without, neither (what metrics need: they see each process
// through each instead, if not nil).
func (o *Observer) snapshot(ctx context.Context, rows bool, each func(gotp.ProcessBrief)) Snapshot {
	n := o.n
	s := Snapshot{Node: n.Name(), Time: time.Now()}
	var sups []gotp.PID
	n.EachProcess(func(b gotp.ProcessBrief) {
		s.ProcessCount++
		if strings.HasPrefix(b.Behaviour, "server ") {
			sups = append(sups, b.PID) // maybe a supervisor: Inspect tells
		}
		if each != nil {
			each(b)
		}
	})
	if rows {
		s.System = o.system()
		pids := n.Processes()
		s.Processes = make([]Process, 0, len(pids))
		for _, pid := range pids {
			if in, ok := n.ProcessInfo(pid); ok {
				s.Processes = append(s.Processes, processRow(in))
			}
		}
	}
	s.Supervisors = o.supervisors(sups)
	for _, src := range o.opts.Sources {
		src.Observe(ctx, &s)
	}
	return s
}

// supervisors returns the trees of the supervisors among candidates,
// each drawn once, inside its parent if it has one.
func (o *Observer) supervisors(candidates []gotp.PID) []SupTree {
	var infos []supervisor.Info
	children := map[gotp.PID]bool{}
	for _, pid := range candidates {
		if si, ok := supervisor.Inspect(o.n, pid); ok {
			infos = append(infos, si)
			for _, c := range si.Children {
				children[c.PID] = true
			}
		}
	}
	slices.SortFunc(infos, func(a, b supervisor.Info) int { return cmp.Compare(a.PID.ID(), b.PID.ID()) })
	var out []SupTree
	for _, si := range infos {
		if children[si.PID] {
			continue // drawn inside its parent
		}
		if t, ok := supervisor.Tree(o.n, si.PID); ok {
			out = append(out, o.supTree(t, ""))
		}
	}
	return out
}

func processRow(in gotp.ProcessInfo) Process {
	r := Process{
		PID:         in.PID.String(),
		Name:        in.Name,
		Label:       in.Label,
		Behaviour:   in.Behaviour,
		Status:      string(in.Status),
		MailboxLen:  in.MailboxLen,
		MailboxMax:  in.MailboxMax,
		Dropped:     in.Dropped,
		Handled:     in.Handled,
		MonitoredBy: len(in.MonitoredBy),
		TrapExit:    in.TrapExit,
		Started:     in.Started,
	}
	if in.MailboxMax > 0 {
		r.Overflow = in.Overflow.String()
	}
	for _, l := range in.Links {
		r.Links = append(r.Links, l.String())
	}
	for _, m := range in.Monitors {
		r.Monitors = append(r.Monitors, m.String())
	}
	return r
}

// supTree converts a supervisor's Info; path is the parent's part of its
// metrics path ("" at the top).
func (o *Observer) supTree(in supervisor.Info, path string) SupTree {
	t := SupTree{
		PID:       in.PID.String(),
		Strategy:  in.Strategy.String(),
		Dynamic:   in.Dynamic,
		Intensity: in.Intensity,
		Period:    in.Period.String(),
		Restarts:  in.Restarts,
		Failures:  in.StartFailures,
	}
	if pi, ok := o.n.ProcessInfo(in.PID); ok {
		t.Name = pi.Name
	}
	switch {
	case t.Name != "":
		t.Path = t.Name
	case path != "":
		t.Path = path
	default:
		t.Path = "unnamed"
	}
	for _, c := range in.Children {
		sc := SupChild{
			ID:       c.ID,
			State:    string(c.State),
			Type:     c.Type.String(),
			Restart:  c.Restart.String(),
			Restarts: c.Restarts,
		}
		if !c.PID.IsZero() {
			sc.PID = c.PID.String()
			if pi, ok := o.n.ProcessInfo(c.PID); ok {
				sc.Name, sc.Label = pi.Name, pi.Label
			}
		}
		if c.Sub != nil {
			id := c.ID
			if id == "" {
				id = "dynamic"
			}
			sub := o.supTree(*c.Sub, t.Path+"/"+id)
			sc.Sub = &sub
		}
		t.Children = append(t.Children, sc)
	}
	return t
}

// rows orders process rows by the column key ("mailbox" by default: the
// longest mailboxes first), keeps those whose PID, name, label, behaviour
// or status contains filter, and cuts them to MaxRows; it returns them and
// how many matched.
func (o *Observer) rows(rows []Process, key, filter string) ([]Process, int) {
	if filter != "" {
		f := strings.ToLower(filter)
		rows = slices.DeleteFunc(rows, func(r Process) bool {
			return !strings.Contains(strings.ToLower(r.PID+" "+r.Name+" "+r.Label+" "+r.Behaviour+" "+r.Status), f)
		})
	}
	less := func(a, b Process) int { return b.MailboxLen - a.MailboxLen }
	switch key {
	case "pid":
		less = func(a, b Process) int { return a.Started.Compare(b.Started) }
	case "name":
		less = func(a, b Process) int { return strings.Compare(a.Name+a.Label, b.Name+b.Label) }
	case "behaviour":
		less = func(a, b Process) int { return strings.Compare(a.Behaviour, b.Behaviour) }
	case "status":
		less = func(a, b Process) int { return strings.Compare(a.Status, b.Status) }
	case "handled":
		less = func(a, b Process) int { return cmp.Compare(b.Handled, a.Handled) }
	}
	slices.SortStableFunc(rows, less)
	matched := len(rows)
	if len(rows) > o.opts.MaxRows {
		rows = rows[:o.opts.MaxRows]
	}
	return rows, matched
}
