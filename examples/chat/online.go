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
// and every connected user is the one member of "user:<name>", which is
// how users on other nodes are found (the registry is local by design).
const ScopeID = "chat"

func userGroup(name string) string { return "user:" + name }
func roomGroup(name string) string { return "room:" + name }

// online is the online registry: the one owner of who is
// online. It runs the unique registry of local users and the chat's pg
// scope, both linked to it, so a crash of any of the three restarts them
// together, empty; connections then register again (see conn).
type online struct {
	server.Defaults
	svc  *Service
	inst *pg.Instance
	evs  *pg.Subscription
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

// nameConflict tells a connection that another node holds its name too and
// won: it must answer ERROR name_taken and close.
type nameConflict struct{}

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
	// Name clashes across nodes are found by watching every group: when a
	// user group has members on two nodes, the member on the node with the
	// smaller name keeps it (as global does, every node applies one rule).
	sub, _, err := o.inst.Events()
	if err != nil {
		return err
	}
	o.evs = sub
	o.svc.goroutines.Add(1)
	go o.forward(p.Node(), p.Self(), sub)
	return nil
}

// forward turns subscription events into messages of the online process;
// it ends when the subscription is closed (the scope or the process ended).
func (o *online) forward(n *gotp.Node, self gotp.PID, sub *pg.Subscription) {
	defer o.svc.goroutines.Done()
	for ev := range sub.C() {
		n.Send(self, ev)
	}
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
		members, err := o.inst.Members(userGroup(r.name))
		if err != nil {
			return nil, err
		}
		if len(members) > 0 { // held on another node
			o.svc.users.Via(r.name).UnregisterName(p.Node())
			return &ProtocolError{Reason: NameTaken}, nil
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
	switch m := msg.(type) {
	case pg.Event:
		if m.Kind == pg.MemberJoined && strings.HasPrefix(m.Group, "user:") {
			o.resolve(p, strings.TrimPrefix(m.Group, "user:"))
		}
		return nil
	case gotp.Exit:
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

// resolve settles a name held on several nodes: the member on the node
// with the smallest name keeps it; a local loser is told to go.
func (o *online) resolve(p *gotp.Process, name string) {
	members, err := o.inst.Members(userGroup(name))
	if err != nil || len(members) < 2 {
		return
	}
	winner := slices.MinFunc(members, func(a, b gotp.PID) int {
		if c := strings.Compare(a.Node(), b.Node()); c != 0 {
			return c
		}
		return int(a.ID()) - int(b.ID())
	})
	for _, m := range members {
		if m != winner && m.Node() == p.Node().Name() {
			p.Send(m, nameConflict{})
		}
	}
}

func (o *online) Terminate(p *gotp.Process, reason error) {
	if o.evs != nil {
		o.evs.Close()
	}
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
