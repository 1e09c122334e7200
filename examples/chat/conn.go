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
			c.svc.appendHistory(p.Context(), Message{From: m.From, To: m.To, Text: m.Text})
		}
		c.write(p, Msg{From: m.From, Text: m.Text})
	case pg.Message:
		if rm, ok := m.Payload.(RoomMsg); ok {
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
		m := Message{From: c.name, To: cmd.To, Text: cmd.Text}
		if err := c.svc.appendHistory(ctx, m); err != nil {
			return Error{Reason: Unavailable}
		}
		p.Send(to, Delivery{From: c.name, To: cmd.To, Text: cmd.Text, Origin: p.Node().Name()})
		return Sent{To: cmd.To}
	case History:
		ms, err := server.Call[[]Message](ctx, p.Node(), gotp.Name(historyName), betweenReq{a: c.name, b: cmd.With})
		if err != nil {
			return Error{Reason: Unavailable}
		}
		return HistoryReply{Messages: ms}
	case Join:
		if slices.Contains(c.rooms, cmd.Room) {
			return OK{}
		}
		if c.inst == nil || c.inst.Join(roomGroup(cmd.Room)) != nil {
			return Error{Reason: Unavailable}
		}
		c.rooms = append(c.rooms, cmd.Room)
		return OK{}
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
		if c.inst == nil {
			return Error{Reason: Unavailable}
		}
		if err := c.inst.Broadcast(roomGroup(cmd.Room), "say", RoomMsg{Room: cmd.Room, From: c.name, Text: cmd.Text}); err != nil {
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
