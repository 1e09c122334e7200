package chat

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
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

	// mailed: sent by this node's history owner to the connection's
	// mailbox and counted in its mailed (see historyOwner.deliver).
	mailed bool
}

// inbound is a command (or a protocol error) read by a connection's
// reader. It holds one of the connection's MaxPending slots until it has
// been answered.
type inbound struct {
	cmd Command
	err error
}

// readEnd tells the connection that its reader has stopped: the client
// went away (why is empty) or must be told why before the close.
type readEnd struct{ why Reason }

// outReady tells the connection that its client has read enough replies
// for the commands waiting to run; outFailed that a write failed.
type (
	outReady  struct{}
	outFailed struct{}
)

// reregister asks a connection to register its user again after the
// online registry restarted.
type reregister struct{ attempt int }

// MaxPending is how many commands a connection reads ahead of its
// replies: commands read and not yet answered. Its reader takes a slot
// for each command before it hands it on and stops reading the socket
// while all MaxPending are taken, so that a client that sends faster than
// the service answers (or faster than it reads the answers) is held back
// by TCP's flow control instead of queueing in the server.
const MaxPending = 8

// conn is the process of one connected client: it runs each command in
// order and queues one reply for each, and queues the messages pushed to
// its user. Its reader goroutine only reads and forwards; its outbox
// writes (see outbox for the bound on output).
type conn struct {
	server.Defaults
	svc     *Service
	w       wire
	out     *outbox
	slots   chan struct{} // one per command read and not yet answered
	waiting []any         // inbound and readEnd messages waiting for room in the outbox, or for a send in flight, in order
	sending *appendReq    // the SEND in flight: its message is with the history owner (nil if none)
	history gotp.PID      // the history owner this connection monitors
	histMon gotp.Ref      // that monitor
	name    string
	inst    *pg.Instance
	rooms   []string
	watch   gotp.Ref // the monitor of the online registry
	held    int      // messages handled since the output was last flushed
	self    gotp.PID

	// mailed counts the Deliveries this node's history owner sent to the
	// process's mailbox that it has not handled yet: while there are any,
	// the owner sends the next ones the same way, so that a user's
	// messages reach the client in the order they were committed (see
	// historyOwner.deliver).
	mailed atomic.Int32

	// fanOut counts the bytes of the events this connection's commands
	// made the service queue for other clients (a SAY's ROOM line, once for
	// each member of the room): flood control charges them as it charges
	// replies (see commandBucket).
	fanOut atomic.Int64
}

// slowNow tells a connection that the history owner could not queue a
// message for its client (see deliverDirect): it is a slow consumer.
type slowNow struct{}

// maxReregister bounds how long a connection waits for the online registry
// to come back (in attempts, 50 ms apart) before it gives up and closes.
const maxReregister = 100

// connMailboxLimit is a connection process's mailbox limit: a safety net
// under the outbox's bound, for a process that has fallen so far behind
// the messages pushed to it that it would be a slow consumer many times
// over (its client is disconnected as by a kill).
const connMailboxLimit = 1 << 16

func (c *conn) Init(ctx context.Context, p *gotp.Process) error {
	n, self := p.Node(), p.Self()
	p.SetMailboxLimit(connMailboxLimit, gotp.OverflowKill)
	c.self = self
	c.svc.local.Store(self, c)
	if h := c.svc.cfg.onConn; h != nil {
		h(self, c)
	}
	c.slots = make(chan struct{}, MaxPending)
	c.out.ready = func() { n.Send(self, outReady{}) }
	c.out.failed = func() { n.Send(self, outFailed{}) }
	pctx := p.Context()
	// However the process ends (a kill runs no Terminate), the reader stops
	// and the outbox writes what it holds, then closes the connection.
	context.AfterFunc(pctx, c.finish)
	c.svc.goroutines.Add(1)
	flood := newCommandBucket(c.svc.cfg.CommandRate, c.svc.cfg.CommandBurst)
	go func() {
		defer c.svc.goroutines.Done()
		why := c.w.read(func(in inbound) bool {
			if flood != nil {
				waited, ok := flood.wait(pctx, in.cmd, c.out.replied.Load()+c.fanOut.Load())
				if waited {
					c.svc.throttled.Add(1)
				}
				if !ok {
					return false
				}
			}
			select {
			case c.slots <- struct{}{}:
			case <-pctx.Done():
				return false
			}
			// An idle connection runs the command here, on the reader's
			// goroutine, whose stack has grown to fit it already: no
			// goroutine to start, and no stack to grow again, for each
			// command (a busy one gets it in its mailbox, in order).
			// CONNECT, which runs deep (registry, pg) and once, goes by
			// the mailbox: run here it would leave an idle WebSocket's
			// reader with a stack 4 KB larger.
			if _, connect := in.cmd.(Connect); connect || !n.RunInline(self, in) {
				n.Send(self, in)
			}
			return true
		})
		n.Send(self, readEnd{why: why})
	}()
	return nil
}

// finish ends the connection's I/O: the reader stops, and what the outbox
// holds is written before the close.
func (c *conn) finish() {
	c.svc.local.CompareAndDelete(c.self, c)
	c.w.stopRead()
	c.out.end(nil, closeShutdown, false)
}

// maxHeld bounds how many messages a connection handles before it
// flushes its output even though more wait in its mailbox.
const maxHeld = 32

// HandleInfo handles one message, then flushes the output it queued once
// the mailbox is empty (or after maxHeld messages): what one burst of
// messages brings a client goes out in one write.
func (c *conn) HandleInfo(p *gotp.Process, msg any) error {
	err := c.handleInfo(p, msg)
	if c.held++; err != nil || c.held >= maxHeld || p.MailboxLen() == 0 {
		c.held = 0
		c.out.flush()
	}
	return err
}

// handleInfo handles one message. Those of a SEND's path (its command,
// the history's answer) are handled here, the others by handleOther: a
// command the reader hands on inline runs on the reader's goroutine, and
// must fit in the stack the reader has while it waits (see
// TestSendRunsInTheReadersStack), which the locals of every case in one
// function would overflow.
func (c *conn) handleInfo(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case inbound, readEnd:
		// len(c.waiting) first: inFlight forgets a SEND the owner has
		// answered, and commands already waiting must then run (resume)
		// rather than wait for a wake that may have come and gone.
		if len(c.waiting) > 0 || c.inFlight() || !c.out.room() {
			c.waiting = append(c.waiting, m)
			if c.sending != nil && !c.awaitAnswer() {
				return c.resume(p) // the owner answered meanwhile
			}
			return nil
		}
		return c.input(p, m)
	case outReady:
		return c.resume(p)
	case *appendReq:
		if m != c.sending {
			// Answered already (the owner's Down came first), or a wake
			// for a SEND this process has seen answered meanwhile.
			return nil
		}
		switch {
		case m.state.Load() == sendClaimed: // committed: the owner's answer
			if err := c.committed(p, m); err != nil {
				return err
			}
		case m.state.CompareAndSwap(sendPending, sendAnswered): // not committed
			c.sent(p, m.err)
		default: // the owner answered it itself, and wakes us for the commands after it
			c.sending = nil
		}
		return c.resume(p)
	}
	return c.handleOther(p, msg)
}

// handleOther is handleInfo for the messages off a SEND's path.
//
//go:noinline
func (c *conn) handleOther(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case outFailed:
		return server.StopReason(nil) // the client is gone
	case Delivery:
		if m.Origin != p.Node().Name() {
			// Kept on the recipient's node too, so both users see it in HISTORY.
			c.svc.appendHistory(p.Context(), Message{From: m.From, To: m.To, Text: m.Text, Time: m.Time})
		}
		err := c.pushEncoded(c.w.formatMsg(Msg{From: m.From, Text: m.Text, Time: m.Time}))
		if m.mailed {
			// Only once it is queued: the owner may queue the next
			// ones itself when none it mailed is left (see deliver).
			c.mailed.Add(-1)
		}
		return err
	case slowNow:
		return c.slow()
	case pg.Message:
		if rm, ok := m.Payload.(RoomMsg); ok {
			c.keepRoomMsg(p, rm)
			return c.push(rm)
		}
	case gotp.Exit:
		if errors.Is(m.Reason, cluster.ErrNameConflict) {
			// After a partition healed, another node's user kept the name.
			return c.end(Error{Reason: NameTaken}, NameTaken, false)
		}
		return m.Reason
	case gotp.Down:
		if m.Ref == c.histMon {
			c.history, c.histMon = gotp.PID{}, gotp.Ref{}
			if s := c.sending; s != nil && s.state.CompareAndSwap(sendPending, sendAnswered) {
				// Its owner died before it said: committed or not, we
				// cannot tell. (A killed owner that claimed the answer
				// first finishes it: its answer, or its wake, comes.)
				c.sent(p, m.Reason)
				return c.resume(p)
			}
			return nil
		}
		if m.Ref == c.watch && c.name != "" {
			c.inst = nil
			p.Node().SendAfter(20*time.Millisecond, p.Self(), reregister{})
		}
	case reregister:
		return c.reregister(p, m.attempt)
	}
	return nil
}

// resume runs the commands that waited, in order, while there is room
// for their replies and no send in flight.
func (c *conn) resume(p *gotp.Process) error {
	for len(c.waiting) > 0 {
		if c.inFlight() && c.awaitAnswer() {
			break // the owner wakes us once it has answered
		}
		if !c.out.room() {
			break // outReady comes once there is
		}
		m := c.waiting[0]
		c.waiting[0] = nil
		c.waiting = c.waiting[1:]
		if err := c.input(p, m); err != nil {
			return err
		}
	}
	if len(c.waiting) == 0 {
		c.waiting = nil
	}
	return nil
}

// input handles what the reader handed on: a command, or its end.
func (c *conn) input(p *gotp.Process, m any) error {
	if in, ok := m.(inbound); ok && in.err == nil && c.name != "" {
		if s, ok := in.cmd.(Send); ok {
			return c.startSend(p, s) // answered, and its slot freed, once committed
		}
	}
	return c.inputOther(p, m)
}

// inputOther is input for what is not a SEND. (Apart from input, which
// runs on the reader's stack: see handleInfo.)
//
//go:noinline
func (c *conn) inputOther(p *gotp.Process, m any) error {
	switch m := m.(type) {
	case inbound:
		defer func() { <-c.slots }()
		if m.err != nil {
			r := ReasonOf(m.err)
			if r == LineTooLong {
				return c.end(Error{Reason: r}, r, false)
			}
			c.reply(Error{Reason: r})
			return nil
		}
		return c.run(p, m.cmd)
	case readEnd:
		if m.why == "" {
			return c.end(nil, closeBye, false)
		}
		return c.end(Error{Reason: m.why}, m.why, false)
	}
	return nil
}

// startSend starts a SEND: the message goes to the history owner, which
// hands it to the recipient's connection once it is committed, and
// answers (see appendReq; SENT means on disk, and so does a MSG); the
// connection handles other messages meanwhile (deliveries to its user),
// and the client's next commands wait. The owner is monitored, so that its
// death answers the SEND too (ERROR unavailable).
func (c *conn) startSend(p *gotp.Process, s Send) error {
	to, ok := c.svc.find(c.inst, s.To)
	if !ok {
		return c.refuseSend(UnknownRecipient)
	}
	owner, ok := p.Node().Whereis(historyName)
	if !ok { // restarting
		return c.refuseSend(Unavailable)
	}
	if owner != c.history {
		c.watchHistory(p, owner)
	}
	// Field by field: the composite literal this replaced was built in
	// startSend's frame, then copied (see handleInfo for why its frame
	// matters).
	r := new(appendReq)
	r.m.From, r.m.To, r.m.Text, r.m.Time = c.name, s.To, s.Text, time.Now().UTC()
	r.pid, r.from, r.to = p.Self(), c, to
	if v, ok := c.svc.local.Load(to); ok {
		r.toc = v.(*conn)
	}
	c.sending = r
	p.Send(owner, r)
	return nil
}

// inFlight reports whether a SEND is in flight: its answer not yet queued,
// by the process or by the history owner. It forgets one the owner has
// answered.
func (c *conn) inFlight() bool {
	s := c.sending
	if s == nil {
		return false
	}
	if s.state.Load() == sendAnswered {
		c.sending = nil
		return false
	}
	return true
}

// awaitAnswer asks the history owner to wake the process once it has
// answered the SEND in flight itself (commands wait behind it), and
// reports whether the SEND is still in flight: false if the owner answered
// it meanwhile, and may not have seen the request to wake us.
//
//go:noinline
func (c *conn) awaitAnswer() bool {
	c.sending.waits.Store(true)
	return c.inFlight() // read after the store: see sentDirect
}

// refuseSend answers a SEND that cannot start with ERROR why. (Apart from
// startSend, whose frame is on the reader's stack: see handleInfo.)
//
//go:noinline
func (c *conn) refuseSend(why Reason) error {
	c.reply(Error{Reason: why})
	<-c.slots
	return nil
}

// watchHistory monitors owner, the history owner now, instead of the one
// before it.
//
//go:noinline
func (c *conn) watchHistory(p *gotp.Process, owner gotp.PID) {
	if !c.histMon.IsZero() {
		p.Demonitor(c.histMon, true)
	}
	c.history, c.histMon = owner, p.Monitor(owner)
}

// sent answers the SEND in flight: SENT once its message is committed
// (the history owner has handed it to the recipient's connection then),
// ERROR unavailable if it could not be.
func (c *conn) sent(p *gotp.Process, err error) {
	s := c.sending
	c.sending = nil
	<-c.slots
	if err != nil {
		c.reply(Error{Reason: Unavailable})
		return
	}
	c.out.reply(c.w.formatSent(s.m.To))
}

// committed answers the process's SEND r, committed and claimed by the
// history owner, which sent it back: SENT, then, for a message to the
// user itself, its MSG, both queued before the SEND counts as answered
// and the commands after it run. (Mailed separately, the MSG could come
// after the user's next message to itself, were this owner killed and
// the next one quick.)
//
//go:noinline
func (c *conn) committed(p *gotp.Process, r *appendReq) error {
	c.sent(p, nil)
	var err error
	if r.to == r.pid {
		err = c.pushEncoded(c.w.formatMsg(Msg{From: r.m.From, Text: r.m.Text, Time: r.m.Time}))
	}
	r.state.Store(sendAnswered)
	return err
}

// sentDirect answers r, the process's SEND, with SENT once its message is
// committed and the owner has claimed the answer (r.state sendClaimed), on
// the calling goroutine (the history owner's), without going through the
// process: it queues SENT and starts writing it, frees the SEND's slot,
// and wakes the process only if commands wait behind the SEND (r.waits).
// It never waits.
func (c *conn) sentDirect(r *appendReq) {
	if h := c.svc.cfg.onClaim; h != nil {
		h(r)
	}
	c.out.reply(c.w.formatSent(r.m.To))
	c.out.flush()
	r.state.Store(sendAnswered)
	<-c.slots
	c.svc.sentDirects.Add(1)
	if r.waits.Load() {
		c.svc.sentWakes.Add(1)
		c.svc.n.Send(c.self, r)
	}
}

// reply queues r for the client.
func (c *conn) reply(r Reply) { c.out.reply(c.w.format(r)) }

// push queues an event for the client, or ends the connection with ERROR
// slow_consumer if the client is too far behind: its user goes offline as
// after QUIT, and nobody else waits for it.
func (c *conn) push(r Reply) error { return c.pushEncoded(c.w.format(r)) }

// pushEncoded is push of an event already encoded for the wire.
func (c *conn) pushEncoded(b []byte) error {
	if c.out.event(b) {
		return nil
	}
	return c.slow()
}

// deliverDirect queues a committed message for the client and starts
// writing it, on the calling goroutine (the history owner's), without
// going through the process: for a client that keeps up, the MSG goes to
// its socket in one system call by the goroutine that committed it. It
// never waits. A client too far behind for it is ended by its process,
// told by slowNow (the outbox refuses every later event meanwhile).
//
// The outbox keeps the order of what is queued, and the owner sends a
// connection's messages this way only while none it mailed is still in
// the mailbox (mailed), so messages reach the client in commit order.
func (c *conn) deliverDirect(m Msg) {
	if c.out.event(c.w.formatMsg(m)) {
		c.out.flush()
		return
	}
	c.svc.n.Send(c.self, slowNow{})
}

// slow ends the connection as a slow consumer: ERROR slow_consumer, its
// user offline as after QUIT, its queued output dropped.
func (c *conn) slow() error {
	c.svc.slowConsumers.Add(1)
	if h := c.svc.cfg.onSlow; h != nil {
		h(c.name)
	}
	c.svc.log.Info("chat: slow consumer disconnected", "user", c.name, "max_output", c.svc.cfg.MaxOutput)
	return c.end(Error{Reason: SlowConsumer}, SlowConsumer, true)
}

// end queues last (if not nil) as the connection's last words and stops
// the process normally; drop drops what is still queued first.
func (c *conn) end(last Reply, why Reason, drop bool) error {
	var b []byte
	if last != nil {
		b = c.w.format(last)
	}
	c.w.stopRead()
	c.out.end(b, why, drop)
	return server.StopReason(nil)
}

// run executes one command and writes its reply.
func (c *conn) run(p *gotp.Process, cmd Command) error {
	if _, ok := cmd.(Quit); ok {
		return c.end(Bye{}, closeBye, false)
	}
	if _, ok := cmd.(Help); ok {
		c.reply(HelpReply{Lines: helpLines()})
		return nil
	}
	if _, ok := cmd.(Connect); !ok && c.name == "" {
		c.reply(Error{Reason: NotConnected})
		return nil
	}
	if _, ok := cmd.(Who); ok {
		c.out.reply(c.who())
		return nil
	}
	c.reply(c.exec(p, cmd))
	return nil
}

// who returns the encoded reply to WHO: the users online on every node,
// sorted (see Service.whoReply).
func (c *conn) who() []byte {
	if c.inst == nil {
		return c.w.format(Error{Reason: Unavailable})
	}
	groups, err := c.inst.WhichGroups()
	if err != nil {
		return c.w.format(Error{Reason: Unavailable})
	}
	_, ws := c.w.(*webSocketWire)
	return c.svc.whoReply(groups, ws, c.w.format)
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
		p.SetLabel("user " + cmd.Name) // the observer shows which connection is whose
		return OK{}
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
			c.visible(ctx)
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
		if err := c.svc.appendRoom(ctx, m); err != nil {
			return Error{Reason: Unavailable}
		}
		if err := c.inst.Broadcast(roomGroup(cmd.Room), "say", m); err != nil {
			return Error{Reason: Unavailable}
		}
		if members, err := c.inst.Members(roomGroup(cmd.Room)); err == nil {
			c.fanOut.Add(int64(len(members) * roomLineLen(m)))
		}
		return OK{}
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
	if err := c.svc.appendRoom(ctx, m); err != nil {
		p.Node().Logger().Warn("chat: cannot keep a room message", "room", m.Room, "err", err)
	}
}

// visible waits until the nodes of the cluster have applied what this
// node sent them (the membership just changed): a reply then means every
// connected node routes to this user and its rooms. A node slow to answer
// delays the reply by ctx's deadline at most.
func (c *conn) visible(ctx context.Context) {
	if cl := c.svc.cfg.Cluster; cl != nil {
		_ = cl.Barrier(ctx)
	}
}

// register holds name for this connection: in the whole cluster first
// (UsersSpace) when the chat is clustered, then in this node's online
// registry; then it joins the user's group (and, after a restart of the
// registry, its rooms again) in the scope the registry runs.
func (c *conn) register(ctx context.Context, p *gotp.Process, name string) error {
	if cl := c.svc.cfg.Cluster; cl != nil {
		err := cl.Names(UsersSpace).Register(ctx, name, p.Self())
		if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); ok && e.Owner != p.Self() {
			return &ProtocolError{Reason: NameTaken}
		} else if err != nil && !ok {
			return err
		}
	}
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
	c.visible(ctx)
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
		return c.end(Error{Reason: NameTaken}, NameTaken, false)
	case attempt >= maxReregister:
		return errors.New("chat: the online registry did not come back")
	}
	p.Node().SendAfter(50*time.Millisecond, p.Self(), reregister{attempt: attempt + 1})
	return nil
}

func (c *conn) Terminate(p *gotp.Process, reason error) {
	c.finish()
}
