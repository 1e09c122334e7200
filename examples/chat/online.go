package chat

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// ScopeID is the pg scope of the chat: rooms are its groups "room:<name>",
// and every connected user is the one member of "user:<name>" (for WHO).
const ScopeID = "chat"

// UsersSpace is the cluster-wide name space (cluster.Names) in which a
// clustered chat holds each connected user's name: one user per name in
// the whole cluster.
const UsersSpace = "chat.users"

func userGroup(name string) string { return "user:" + name }
func roomGroup(name string) string { return "room:" + name }

// online is the online registry: the one owner of who is online on this
// node. It runs the unique registry of local users and the chat's pg
// scope, both linked to it, so a crash of any of the three restarts them
// together, empty; connections then register again (see conn). Across a
// cluster, a name is held once through the cluster-wide names
// (UsersSpace), which each connection registers itself.
type online struct {
	server.Defaults
	svc  *Service
	inst *pg.Instance
}

// connectReq asks to hold name for the connection pid.
type connectReq struct {
	name string
	pid  gotp.PID
}

// connectOK is the reply to a granted connectReq: the scope to join
// "user:<name>" and rooms in.
type connectOK struct{ scope *pg.Scope }

// directoryReq asks for the Directory.
type directoryReq struct{}

func (o *online) Init(ctx context.Context, p *gotp.Process) error {
	p.TrapExit(true)
	o.svc.users.Stop(ctx) // the previous incarnation's registry may still be exiting: wait until it has (else Start says already running)
	if _, err := o.svc.users.Start(ctx, gotp.LinkTo(p.Self())); err != nil {
		return err
	}
	// The scope of the previous incarnation traps exits: it may still be
	// on its way out when the supervisor restarts this server.
	if err := waitGone(ctx, p.Node(), pg.ProcessName(ScopeID)); err != nil {
		return err
	}
	scope, err := pg.StartLink(ctx, p, ScopeID, pg.Options{})
	if err != nil {
		return err
	}
	if c := o.svc.cfg.Cluster; c != nil {
		if err := c.Replicate(scope); err != nil {
			return err
		}
	}
	if o.inst, err = scope.Open(p); err != nil {
		return err
	}
	return nil
}

func (o *online) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case connectReq:
		err := o.svc.users.Via(r.name).RegisterName(p.Node(), r.pid)
		if errors.As(err, new(*gotp.AlreadyRegisteredError)) {
			return &ProtocolError{Reason: NameTaken}, nil
		}
		if err != nil {
			return nil, err // the registry is gone: restart with it
		}
		return connectOK{scope: o.inst.Scope()}, nil
	case directoryReq:
		return o.directory()
	case crashNow:
		return nil, errors.New("online registry: crash requested")
	}
	return o.Defaults.HandleCall(p, from, req)
}

func (o *online) HandleInfo(p *gotp.Process, msg any) error {
	if m, ok := msg.(gotp.Exit); ok {
		// The registry or the scope ended: so does the online registry,
		// and the supervisor starts all three again.
		return m.Reason
	}
	return o.Defaults.HandleInfo(p, msg)
}

// directory lists the users and rooms of the chat scope, on every node.
func (o *online) directory() (Directory, error) {
	groups, err := o.inst.WhichGroups()
	if err != nil {
		return Directory{}, err
	}
	d := Directory{Users: []string{}, Rooms: []RoomInfo{}}
	for _, g := range groups {
		if name, ok := strings.CutPrefix(g, "user:"); ok {
			d.Users = append(d.Users, name)
		} else if name, ok := strings.CutPrefix(g, "room:"); ok {
			members, err := o.inst.Members(g)
			if err != nil {
				return Directory{}, err
			}
			if len(members) > 0 {
				d.Rooms = append(d.Rooms, RoomInfo{Name: name, Members: len(members)})
			}
		}
	}
	slices.Sort(d.Users)
	slices.SortFunc(d.Rooms, func(a, b RoomInfo) int { return strings.Compare(a.Name, b.Name) })
	return d, nil
}

// waitGone waits until no process is registered under name, or ctx ends.
func waitGone(ctx context.Context, n *gotp.Node, name string) error {
	pid, ok := n.Whereis(name)
	if !ok {
		return nil
	}
	gone := make(chan struct{})
	ref := n.MonitorFunc(pid, func(gotp.Down) { close(gone) })
	select {
	case <-gone:
		return nil
	case <-ctx.Done():
		n.Demonitor(ref, pid)
		return ctx.Err()
	}
}
