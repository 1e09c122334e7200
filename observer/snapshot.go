package observer

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/supervisor"
)

// Snapshot is everything the observer shows, at one moment. It is what
// the JSON endpoint returns.
type Snapshot struct {
	Node        string        `json:"node"`
	Time        time.Time     `json:"time"`
	Processes   []Process     `json:"processes"`
	Supervisors []SupTree     `json:"supervisors"`
	Registries  []Registry    `json:"registries"`
	Scopes      []Scope       `json:"scopes"`
	Inboxes     []InboxTable  `json:"inboxes"`
	Cluster     []ClusterPeer `json:"cluster"`
}

// Process is one row of the process table.
type Process struct {
	PID         string    `json:"pid"`
	Name        string    `json:"name,omitempty"`
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
	Children  []SupChild `json:"children"`
}

// SupChild is one child of a supervisor.
type SupChild struct {
	ID       string   `json:"id"`
	PID      string   `json:"pid,omitempty"`
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
}

// Scope describes one pg scope: its groups and their members per node.
type Scope struct {
	ID     string  `json:"id"`
	Groups []Group `json:"groups"`
}

// Group is one pg group with its members by node.
type Group struct {
	Name    string              `json:"name"`
	Members map[string][]string `json:"members"` // node name → PIDs
	Size    int                 `json:"size"`
}

// InboxTable describes one inbox table.
type InboxTable struct {
	Name     string           `json:"name"`
	Ready    int64            `json:"ready"`
	InWork   int64            `json:"in_work"`
	Delayed  int64            `json:"delayed"`
	Dead     int64            `json:"dead"`
	Invalid  int64            `json:"invalid"`            // rows no claim will take (see inbox.Stats)
	Outcomes map[string]int64 `json:"outcomes,omitempty"` // outcome → jobs since start
	// Health is what the table's subscriptions in this process met (see
	// inbox.Health), when the value reports it.
	Health *InboxHealth `json:"health,omitempty"`
	Err    string       `json:"error,omitempty"`
}

// InboxHealth is what an inbox table's subscriptions in this process met
// since they started: failed claims, lost locks, unreadable rows.
type InboxHealth struct {
	ClaimErrors     int64     `json:"claim_errors"`
	PermanentErrors int64     `json:"permanent_errors"` // of claim_errors: the table refuses the statement
	LocksLost       int64     `json:"locks_lost"`
	BadRows         int64     `json:"bad_rows"`
	Failing         int64     `json:"failing"` // claimers backing off now
	LastError       string    `json:"last_error,omitempty"`
	LastErrorAt     time.Time `json:"last_error_at,omitzero"`
}

// ClusterPeer is one node of the cluster as this node sees it.
type ClusterPeer struct {
	Node          string    `json:"node"`
	Up            bool      `json:"up"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	MessagesIn    uint64    `json:"messages_in"`
	MessagesOut   uint64    `json:"messages_out"`
}

// snapshot gathers a Snapshot of n and of the sources in o.
func (o *Observer) snapshot(ctx context.Context) Snapshot {
	n := o.n
	s := Snapshot{Node: n.Name(), Time: time.Now()}
	pids := n.Processes()
	s.Processes = make([]Process, 0, len(pids))
	var sups []supervisor.Info
	children := map[gotp.PID]bool{}
	for _, pid := range pids {
		in, ok := n.ProcessInfo(pid)
		if !ok {
			continue
		}
		s.Processes = append(s.Processes, processRow(in))
		if si, ok := supervisor.Inspect(n, pid); ok {
			sups = append(sups, si)
			for _, c := range si.Children {
				children[c.PID] = true
			}
		}
	}
	for _, si := range sups {
		if children[si.PID] {
			continue // drawn inside its parent
		}
		if t, ok := supervisor.Tree(n, si.PID); ok {
			s.Supervisors = append(s.Supervisors, o.supTree(t))
		}
	}
	for _, src := range o.opts.Sources {
		src.Observe(ctx, &s)
	}
	return s
}

func processRow(in gotp.ProcessInfo) Process {
	r := Process{
		PID:         in.PID.String(),
		Name:        in.Name,
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

func (o *Observer) supTree(in supervisor.Info) SupTree {
	t := SupTree{
		PID:       in.PID.String(),
		Strategy:  in.Strategy.String(),
		Dynamic:   in.Dynamic,
		Intensity: in.Intensity,
		Period:    in.Period.String(),
		Restarts:  in.Restarts,
	}
	if pi, ok := o.n.ProcessInfo(in.PID); ok {
		t.Name = pi.Name
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
		}
		if c.Sub != nil {
			sub := o.supTree(*c.Sub)
			sc.Sub = &sub
		}
		t.Children = append(t.Children, sc)
	}
	return t
}

// sortProcesses orders rows by the column key ("mailbox" by default: the
// longest mailboxes first) and keeps those whose PID, name or behaviour
// contains filter.
func sortProcesses(rows []Process, key, filter string) []Process {
	if filter != "" {
		f := strings.ToLower(filter)
		rows = slices.DeleteFunc(slices.Clone(rows), func(r Process) bool {
			return !strings.Contains(strings.ToLower(r.PID+" "+r.Name+" "+r.Behaviour+" "+r.Status), f)
		})
	}
	cmp := func(a, b Process) int { return b.MailboxLen - a.MailboxLen }
	switch key {
	case "pid":
		cmp = func(a, b Process) int { return a.Started.Compare(b.Started) }
	case "name":
		cmp = func(a, b Process) int { return strings.Compare(a.Name, b.Name) }
	case "behaviour":
		cmp = func(a, b Process) int { return strings.Compare(a.Behaviour, b.Behaviour) }
	case "status":
		cmp = func(a, b Process) int { return strings.Compare(a.Status, b.Status) }
	case "handled":
		cmp = func(a, b Process) int {
			switch {
			case a.Handled > b.Handled:
				return -1
			case a.Handled < b.Handled:
				return 1
			}
			return 0
		}
	}
	slices.SortStableFunc(rows, cmp)
	return rows
}
