package chat

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// Delivery is a direct message on its way to the recipient's connection,
// possibly on another node. Origin is the sender's node: a recipient on
// another node stores the message in its own history too.
type Delivery struct {
	From, To, Text string
	Origin         string
	Time           time.Time // when the sender's node accepted it
}

// inbound is a command (or a protocol error) read by a session.
type inbound struct {
	cmd Command
	err error
}

// closed tells the connection that its client went away.
type closed struct{}

// reregister asks a connection to register its user again after the
// online registry restarted.
type reregister struct{ attempt int }

// conn is the process of one connected client: it runs each command in
// order and writes one reply for each, and writes the messages pushed to
// its user. Its session's reader goroutine only reads and forwards.
type conn struct {
	server.Defaults
	svc   *Service
	sess  session
	name  string
	inst  *pg.Instance
	rooms []string
	watch gotp.Ref // the monitor of the online registry
}

// maxReregister bounds how long a connection waits for the online registry
// to come back (in attempts, 50 ms apart) before it gives up and closes.
const maxReregister = 100

func (c *conn) Init(ctx context.Context, p *gotp.Process) error {
	n, self := p.Node(), p.Self()
	pctx := p.Context()
	context.AfterFunc(pctx, func() { c.sess.close() })
	c.svc.goroutines.Add(1)
	go func() {
		defer c.svc.goroutines.Done()
		c.sess.read(pctx, func(in inbound) { n.Send(self, in) })
		n.Send(self, closed{})
	}()
	return nil
}

func (c *conn) HandleInfo(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case inbound:
		if m.err != nil {
			r := ReasonOf(m.err)
			c.write(p, Error{Reason: r})
			if r == LineTooLong {
				return server.StopReason(nil)
			}
			return nil
		}
		return c.run(p, m.cmd)
	case closed:
		return server.StopReason(nil)
	case Delivery:
		if m.Origin != p.Node().Name() {
			// Kept on the recipient's node too, so both users see it in HISTORY.
			c.svc.appendHistory(p.Context(), Message{From: m.From, To: m.To, Text: m.Text, Time: m.Time})
		}
		c.write(p, Msg{From: m.From, Text: m.Text, Time: m.Time})
	case pg.Message:
		if rm, ok := m.Payload.(RoomMsg); ok {
			c.keepRoomMsg(p, rm)
			c.write(p, rm)
		}
	case nameConflict:
		c.write(p, Error{Reason: NameTaken})
		return server.StopReason(nil)
	case gotp.Down:
		if m.Ref == c.watch && c.name != "" {
			c.inst = nil
			p.Node().SendAfter(20*time.Millisecond, p.Self(), reregister{})
		}
	case reregister:
		return c.reregister(p, m.attempt)
	}
	return nil
}

func (c *conn) write(p *gotp.Process, r Reply) {
	if err := c.sess.write(r); err != nil {
		// The client is gone or stuck: end this connection only.
		p.Node().Exit(p.Self(), gotp.ErrShutdown)
	}
}

// run executes one command and writes its reply.
func (c *conn) run(p *gotp.Process, cmd Command) error {
	if _, ok := cmd.(Quit); ok {
		c.write(p, Bye{})
		return server.StopReason(nil)
	}
	if _, ok := cmd.(Help); ok {
		c.write(p, HelpReply{Lines: helpLines()})
		return nil
	}
	if _, ok := cmd.(Connect); !ok && c.name == "" {
		c.write(p, Error{Reason: NotConnected})
		return nil
	}
	c.write(p, c.exec(p, cmd))
	return nil
}

func (c *conn) exec(p *gotp.Process, cmd Command) Reply {
	ctx, cancel := context.WithTimeout(p.Context(), 5*time.Second)
	defer cancel()
	switch cmd := cmd.(type) {
	case Connect:
		if c.name != "" {
			return Error{Reason: AlreadyConnected}
		}
		if err := c.register(ctx, p, cmd.Name); err != nil {
			return Error{Reason: ReasonOf(err)}
		}
		c.name = cmd.Name
		return OK{}
	case Send:
		to, ok := c.svc.find(c.inst, cmd.To)
		if !ok {
			return Error{Reason: UnknownRecipient}
		}
		m := Message{From: c.name, To: cmd.To, Text: cmd.Text, Time: time.Now().UTC()}
		if err := c.svc.appendHistory(ctx, m); err != nil {
			return Error{Reason: Unavailable}
		}
		p.Send(to, Delivery{From: c.name, To: cmd.To, Text: cmd.Text, Origin: p.Node().Name(), Time: m.Time})
		return Sent{To: cmd.To}
	case History:
		ms, err := server.Call[[]Message](ctx, p.Node(), gotp.Name(historyName), betweenReq{a: c.name, b: cmd.With})
		if err != nil {
			return Error{Reason: Unavailable}
		}
		return HistoryReply{Messages: ms}
	case Join:
		if !slices.Contains(c.rooms, cmd.Room) {
			if c.inst == nil || c.inst.Join(roomGroup(cmd.Room)) != nil {
				return Error{Reason: Unavailable}
			}
			c.rooms = append(c.rooms, cmd.Room)
		}
		// Joined now: the room's earlier messages are a courtesy, so a
		// history that cannot be read shows none rather than failing the join.
		earlier, err := server.Call[[]Message](ctx, p.Node(), gotp.Name(historyName), roomReq{room: cmd.Room})
		if err != nil {
			p.Node().Logger().Warn("chat: cannot read a room's history", "room", cmd.Room, "err", err)
		}
		return Joined{Room: cmd.Room, Messages: earlier}
	case Leave:
		i := slices.Index(c.rooms, cmd.Room)
		if i < 0 {
			return Error{Reason: NotMember}
		}
		c.rooms = slices.Delete(c.rooms, i, i+1)
		if c.inst != nil {
			c.inst.Leave(roomGroup(cmd.Room))
		}
		return OK{}
	case Say:
		if !slices.Contains(c.rooms, cmd.Room) {
			return Error{Reason: NotJoined}
		}
		if c.inst == nil {
			return Error{Reason: Unavailable}
		}
		m := RoomMsg{Room: cmd.Room, From: c.name, Text: cmd.Text, Time: time.Now().UTC(), Origin: c.svc.origin, Seq: c.svc.seq.Add(1)}
		if _, err := server.Call[bool](ctx, p.Node(), gotp.Name(historyName), appendRoomMsg{m: m}); err != nil {
			return Error{Reason: Unavailable}
		}
		if err := c.inst.Broadcast(roomGroup(cmd.Room), "say", m); err != nil {
			return Error{Reason: Unavailable}
		}
		return OK{}
	case Who:
		if c.inst == nil {
			return Error{Reason: Unavailable}
		}
		groups, err := c.inst.WhichGroups()
		if err != nil {
			return Error{Reason: Unavailable}
		}
		var names []string
		for _, g := range groups {
			if name, ok := strings.CutPrefix(g, "user:"); ok {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return Online{Names: names}
	}
	return Error{Reason: BadCommand}
}

// keepRoomMsg stores a room message said on another node in this node's
// history, so that a later JOIN here shows it. Of this node's members of
// the room, the one with the lowest PID stores it; the store keeps a
// message once however many of them do (membership may change meanwhile).
func (c *conn) keepRoomMsg(p *gotp.Process, m RoomMsg) {
	if m.Origin == c.svc.origin || c.inst == nil {
		return // the sender's node stored it before sending
	}
	local, err := c.inst.LocalMembers(roomGroup(m.Room))
	if err != nil {
		return
	}
	for _, pid := range local {
		if pid.ID() < p.Self().ID() {
			return
		}
	}
	ctx, cancel := context.WithTimeout(p.Context(), 5*time.Second)
	defer cancel()
	if _, err := server.Call[bool](ctx, p.Node(), gotp.Name(historyName), appendRoomMsg{m: m}); err != nil {
		p.Node().Logger().Warn("chat: cannot keep a room message", "room", m.Room, "err", err)
	}
}

// register holds name for this connection in the online registry, then
// joins the user's group (and, after a restart of the registry, its rooms
// again) in the scope the registry runs.
func (c *conn) register(ctx context.Context, p *gotp.Process, name string) error {
	ok, err := server.Call[connectOK](ctx, p.Node(), gotp.Name(onlineName), connectReq{name: name, pid: p.Self()})
	if err != nil {
		return err
	}
	online, _ := p.Node().Whereis(onlineName)
	inst, err := ok.scope.Open(p)
	if err != nil {
		return err
	}
	groups := []string{userGroup(name)}
	for _, r := range c.rooms {
		groups = append(groups, roomGroup(r))
	}
	if err := inst.Join(groups...); err != nil {
		inst.Release()
		return err
	}
	c.inst = inst
	c.watch = p.Monitor(online)
	return nil
}

// reregister registers the user again after the online registry restarted
// (its registry and scope restarted empty with it). Until the registry is
// back it retries every 50 ms; a name taken meanwhile ends the connection.
func (c *conn) reregister(p *gotp.Process, attempt int) error {
	ctx, cancel := context.WithTimeout(p.Context(), time.Second)
	defer cancel()
	err := c.register(ctx, p, c.name)
	switch {
	case err == nil:
		p.Node().Logger().Info("chat: connection registered again", "user", c.name, "pid", p.Self())
		return nil
	case ReasonOf(err) == NameTaken:
		c.write(p, Error{Reason: NameTaken})
		return server.StopReason(nil)
	case attempt >= maxReregister:
		return errors.New("chat: the online registry did not come back")
	}
	p.Node().SendAfter(50*time.Millisecond, p.Self(), reregister{attempt: attempt + 1})
	return nil
}

func (c *conn) Terminate(p *gotp.Process, reason error) {
	c.sess.close()
}
