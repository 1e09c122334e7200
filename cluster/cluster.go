package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/gotp/gotp"
)

// Errors of Join and Send.
var (
	// ErrBadName is returned by Join for a node without a usable name.
	ErrBadName = errors.New("cluster: node needs a name of its own")
	// ErrNameTaken is returned by Join when a live node already has the
	// name.
	ErrNameTaken = errors.New("cluster: node name already in use")
	// ErrClosed is returned by operations on a cluster that has left.
	ErrClosed = errors.New("cluster: closed")
)

// A Cluster is a node's membership of a gotp cluster: it carries the
// node's signals to processes of other nodes and theirs to it, over one
// NATS connection. All its methods are safe for concurrent use.
type Cluster struct {
	n     *gotp.Node
	opts  Options
	codec *Codec
	log   *slog.Logger

	name       string
	cr         uint32
	start      int64
	header     []byte // batch header of this incarnation
	batchLimit int    // largest NATS message this node publishes
	hbSubj     string

	srv  *natsserver.Server // nil when a client of an existing deployment
	nc   *nats.Conn
	subs []*nats.Subscription

	mu      sync.Mutex // guards the fields below; serialises peer changes
	peersV  atomic.Pointer[map[string]*peer]
	left    map[incarnation]time.Time // incarnations that left: never revived
	evSubs  map[*Subscription]struct{}
	closing bool

	readyMu sync.Mutex // guards ready
	ready   []*peer    // peers with queued frames, for the writer
	wake    chan struct{}

	pg pgState

	stats     counters
	auth      authLog
	done      chan struct{}
	wg        sync.WaitGroup
	leaveOnce sync.Once
	leftCh    chan struct{} // closed when Leave's work is done; set once by leaveOnce
	closed    atomic.Bool
	logged    sync.Map  // message types whose encode failure was logged
	bufs      sync.Pool // scratch buffers for frames
	batches   sync.Pool // batch buffers
	gwV       atomic.Pointer[gotp.Gateway]
}

type incarnation struct {
	name     string
	creation uint32
}

// A peer is one incarnation of another node, as long as it is up.
type peer struct {
	name     string
	creation uint32
	start    int64
	subject  string
	lastSeen atomic.Int64
	down     atomic.Bool

	msgsIn atomic.Uint64 // messages received from this incarnation

	mu        sync.Mutex // guards the queue
	buf       []byte     // frames not yet published (starts with the header)
	full      [][]byte   // earlier batches, each at most the batch limit
	pending   int        // bytes in buf and full
	scheduled bool       // in the writer's ready list
	msgsOut   uint64     // messages queued for this incarnation
}

type counters struct {
	msgsOut, msgsIn       atomic.Uint64
	batchesOut, batchesIn atomic.Uint64
	bytesOut, bytesIn     atomic.Uint64
	dropped               atomic.Uint64
	encodeErrors          atomic.Uint64
	decodeErrors          atomic.Uint64
}

// Stats are a cluster's counters since Join. Messages count signals
// (sends, exits, links, monitors, Downs, pg updates); batches count NATS
// messages.
type Stats struct {
	MessagesOut, MessagesIn uint64
	BatchesOut, BatchesIn   uint64
	BytesOut, BytesIn       uint64
	// Dropped counts signals not sent: to nodes that are not connected
	// (or to an old incarnation), or beyond Options.MaxPending.
	Dropped uint64
	// EncodeErrors counts messages refused by the codec at this node
	// (unregistered types, too large); DecodeErrors wire data from other
	// nodes that could not be decoded (and was dropped).
	EncodeErrors, DecodeErrors uint64
}

// Stats returns the cluster's counters.
func (c *Cluster) Stats() Stats {
	s := &c.stats
	return Stats{
		MessagesOut: s.msgsOut.Load(), MessagesIn: s.msgsIn.Load(),
		BatchesOut: s.batchesOut.Load(), BatchesIn: s.batchesIn.Load(),
		BytesOut: s.bytesOut.Load(), BytesIn: s.bytesIn.Load(),
		Dropped: s.dropped.Load(), EncodeErrors: s.encodeErrors.Load(), DecodeErrors: s.decodeErrors.Load(),
	}
}

// subjectToken makes a node or cluster name usable as one NATS subject
// token: kept as is when it only has safe characters, hex-encoded
// otherwise.
func subjectToken(s string) string {
	safe := s != ""
	for i := 0; i < len(s) && safe; i++ {
		ch := s[i]
		safe = ch == '-' || ch == '_' || ch == '@' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
	}
	if safe {
		return s
	}
	return "x" + hex.EncodeToString([]byte(s))
}

func (c *Cluster) nodeSubject(name string) string {
	return "gotp." + subjectToken(c.opts.Cluster) + ".node." + subjectToken(name)
}

// Join connects node n to the cluster described by opts and attaches the
// cluster as the node's transport. It returns once the node's NATS
// connection works and its subscriptions are in place; other nodes appear
// as their heartbeats arrive (see WaitFor and Subscribe). Join fails if
// the node already has a transport, if its name is DefaultNodeName or is
// in use by a live node, if NATS refuses the connection (wrong
// credentials, for example), or if ctx ends first.
//
// The cluster stops when the node stops (Node.Stop) or with Leave. A node
// joins at most once: it keeps its transport for life, so after Leave it
// runs alone, and a second Join fails with gotp.ErrAttached.
func Join(ctx context.Context, n *gotp.Node, opts Options) (*Cluster, error) {
	opts.fill()
	if n.Name() == "" || n.Name() == gotp.DefaultNodeName {
		return nil, ErrBadName
	}
	c := &Cluster{
		n: n, opts: opts, codec: opts.Codec, log: opts.Logger,
		name: n.Name(), cr: n.Creation(), start: time.Now().UnixNano(),
		left:   make(map[incarnation]time.Time),
		evSubs: make(map[*Subscription]struct{}),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if c.log == nil {
		c.log = n.Logger()
	}
	c.log = c.log.With("cluster", opts.Cluster, "node", c.name)
	c.auth.c = c
	empty := map[string]*peer{}
	c.peersV.Store(&empty)
	c.pg.init()
	h := []byte{wireMagic, wireVersion}
	h = appendStr(h, c.name)
	h = binary.AppendUvarint(h, uint64(c.cr))
	c.header = binary.AppendUvarint(h, uint64(c.start))
	c.hbSubj = "gotp." + subjectToken(opts.Cluster) + ".hb"

	if err := c.connect(ctx); err != nil {
		c.shutdownNATS()
		return nil, err
	}
	// Batches must fit the deployment's max_payload.
	c.batchLimit = max(c.opts.MaxMessageSize+len(c.header)+16, 256<<10)
	if mp := int(c.nc.MaxPayload()); mp > 0 {
		c.batchLimit = min(c.batchLimit, mp)
		if c.opts.MaxMessageSize > mp-len(c.header)-16 {
			c.opts.MaxMessageSize = mp - len(c.header) - 16
		}
	}
	c.waitRoutes(ctx)
	if c.srv != nil && len(c.opts.Peers) > 0 && c.srv.NumRoutes() == 0 && !c.opts.StartAlone {
		if refused := c.auth.outbound(); len(refused) > 0 {
			c.shutdownNATS()
			return nil, joinAuthError(refused)
		}
	}
	if err := c.checkName(ctx); err != nil {
		c.shutdownNATS()
		return nil, err
	}
	gw, err := n.Attach(transport{c})
	if err != nil {
		c.shutdownNATS()
		return nil, err
	}
	c.gwV.Store(gw)
	for _, s := range []string{c.nodeSubject(c.name), c.hbSubj} {
		sub, err := c.nc.Subscribe(s, c.onBatch)
		if err != nil {
			c.closed.Store(true)
			c.shutdownNATS()
			return nil, fmt.Errorf("cluster: subscribe: %w", err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		c.subs = append(c.subs, sub)
	}
	whois, err := c.nc.Subscribe(c.nodeSubject(c.name)+".whois", func(m *nats.Msg) {
		_ = m.Respond(c.header)
	})
	if err != nil {
		c.closed.Store(true)
		c.shutdownNATS()
		return nil, fmt.Errorf("cluster: subscribe: %w", err)
	}
	c.subs = append(c.subs, whois)
	if err := c.nc.FlushWithContext(ctx); err != nil {
		c.closed.Store(true)
		c.shutdownNATS()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.wg.Add(2)
	go c.writer()
	go c.heartbeats()
	return c, nil
}

// waitRoutes gives the embedded server up to a heartbeat timeout to route
// to one of its peers, so that the name check and the first heartbeats
// reach the cluster. A node whose peers are all down starts anyway; the
// wait ends early when every peer has refused this node's credentials.
func (c *Cluster) waitRoutes(ctx context.Context) {
	if c.srv == nil || len(c.opts.Peers) == 0 {
		return
	}
	deadline := time.Now().Add(c.opts.HeartbeatTimeout)
	for c.srv.NumRoutes() == 0 && time.Now().Before(deadline) && ctx.Err() == nil &&
		len(c.auth.outbound()) < len(c.opts.Peers) {
		time.Sleep(5 * time.Millisecond)
	}
	if c.srv.NumRoutes() > 0 {
		time.Sleep(20 * time.Millisecond) // let the route's interest settle
	}
}

// checkName asks, for a heartbeat interval, whether a node with this
// name answers (interest in its subject may take a moment to cross new
// routes). It does not see nodes behind a partition.
func (c *Cluster) checkName(ctx context.Context) error {
	if c.srv != nil && len(c.opts.Peers) == 0 {
		return nil // a cluster of one so far: nobody to ask
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.HeartbeatInterval)
	defer cancel()
	for {
		m, err := c.nc.RequestWithContext(ctx, c.nodeSubject(c.name)+".whois", nil)
		if err == nil && len(m.Data) > 0 {
			return fmt.Errorf("%w: %q", ErrNameTaken, c.name)
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (c *Cluster) routeCreds() (user, pass string) {
	o := &c.opts
	switch {
	case o.User != "":
		return o.User, o.Password
	case o.Token != "":
		return "gotp-route", o.Token
	case o.NKeySeed != "":
		sum := sha256.Sum256([]byte("gotp-route:" + o.NKeySeed))
		return "gotp-route", hex.EncodeToString(sum[:])
	}
	return "", ""
}

func splitHostPort(s string) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, err
	}
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	return host, port, nil
}

func (c *Cluster) connect(ctx context.Context) error {
	o := &c.opts
	nopts := []nats.Option{
		nats.Name("gotp " + c.name),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectBufSize(o.MaxPending),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Warn("cluster: nats error", "err", err)
		}),
	}
	var kp nkeys.KeyPair
	switch {
	case o.NKeySeed != "":
		var err error
		kp, err = nkeys.FromSeed([]byte(o.NKeySeed))
		if err != nil {
			return fmt.Errorf("cluster: bad NKeySeed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return fmt.Errorf("cluster: bad NKeySeed: %w", err)
		}
		nopts = append(nopts, nats.Nkey(pub, kp.Sign))
	case o.User != "":
		nopts = append(nopts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		nopts = append(nopts, nats.Token(o.Token))
	}
	if o.TLS != nil {
		nopts = append(nopts, nats.Secure(o.TLS))
	}
	if len(o.URLs) == 0 {
		sopts := &natsserver.Options{
			ServerName: c.name + "-" + strconv.FormatUint(uint64(c.cr), 10), // unique even for a twin
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: int32(max(o.MaxMessageSize, 1<<20) + 64<<10),
			Host:       "127.0.0.1", // routing needs a client listener
			Port:       natsserver.RANDOM_PORT,
			TLSConfig:  o.TLS,
		}
		if o.ClientListen != "" {
			h, p, err := splitHostPort(o.ClientListen)
			if err != nil {
				return fmt.Errorf("cluster: ClientListen: %w", err)
			}
			sopts.Host, sopts.Port = h, p
		}
		h, p, err := splitHostPort(o.RouteListen)
		if err != nil {
			return fmt.Errorf("cluster: RouteListen: %w", err)
		}
		ru, rp := c.routeCreds()
		sopts.Cluster = natsserver.ClusterOpts{
			Name: "gotp-" + subjectToken(o.Cluster), Host: h, Port: p,
			Username: ru, Password: rp, NoAdvertise: o.NoAdvertise, Advertise: o.RouteAdvertise, TLSConfig: o.TLS,
			Compression: natsserver.CompressionOpts{Mode: natsserver.CompressionOff},
		}
		for _, s := range o.Peers {
			u, err := url.Parse(s)
			if err != nil {
				return fmt.Errorf("cluster: peer %q: %w", s, err)
			}
			if u.User == nil && ru != "" {
				u.User = url.UserPassword(ru, rp)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
		switch {
		case o.NKeySeed != "":
			pub, _ := kp.PublicKey()
			sopts.Nkeys = []*natsserver.NkeyUser{{Nkey: pub}}
		case o.User != "":
			sopts.Username, sopts.Password = o.User, o.Password
		case o.Token != "":
			sopts.Authorization = o.Token
		}
		srv, err := natsserver.NewServer(sopts)
		if err != nil {
			return fmt.Errorf("cluster: embedded server: %w", err)
		}
		c.srv = srv
		srv.SetLoggerV2(&c.auth, false, false, false)
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			return errors.New("cluster: embedded server did not start")
		}
		nopts = append(nopts, nats.InProcessServer(srv))
	}
	urls := strings.Join(o.URLs, ",")
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(urls, nopts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("cluster: connect: %w", clientAuthError(o.URLs, r.err))
		}
		c.nc = r.nc
		return nil
	case <-ctx.Done():
		r := <-ch // nats.Connect gives up by its own timeout
		if r.nc != nil {
			r.nc.Close()
		}
		return ctx.Err()
	}
}

func (c *Cluster) shutdownNATS() {
	if c.nc != nil {
		c.nc.Close()
	}
	if c.srv != nil {
		c.srv.Shutdown()
		c.srv.WaitForShutdown()
	}
}

// RouteURL returns the URL other nodes list in Options.Peers to route to
// this node's embedded server, or "" for a client of an existing NATS
// deployment.
func (c *Cluster) RouteURL() string {
	if c.srv == nil {
		return ""
	}
	a := c.srv.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + a.String()
}

// Node returns the local node.
func (c *Cluster) Node() *gotp.Node { return c.n }

// Codec returns the codec in use, to register types or check messages.
func (c *Cluster) Codec() *Codec { return c.codec }

// NodeInfo describes a connected node.
type NodeInfo struct {
	Name     string
	Creation uint32    // its incarnation
	LastSeen time.Time // when its last heartbeat or message arrived
	Pending  int       // bytes queued for it, not yet handed to NATS
	// MessagesOut and MessagesIn count the messages (signals, as in
	// Stats) queued for this incarnation of the node and received from
	// it, since it connected.
	MessagesOut, MessagesIn uint64
}

func (c *Cluster) peers() map[string]*peer { return *c.peersV.Load() }

// Nodes returns the other nodes currently connected, sorted by name.
func (c *Cluster) Nodes() []NodeInfo {
	m := c.peers()
	out := make([]NodeInfo, 0, len(m))
	for _, p := range m {
		p.mu.Lock()
		pending, sent := p.pending, p.msgsOut
		p.mu.Unlock()
		out = append(out, NodeInfo{
			Name: p.name, Creation: p.creation, LastSeen: time.Unix(0, p.lastSeen.Load()), Pending: pending,
			MessagesOut: sent, MessagesIn: p.msgsIn.Load(),
		})
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// WaitFor blocks until every named node is connected, or ctx ends (then it
// returns ctx.Err()).
func (c *Cluster) WaitFor(ctx context.Context, nodes ...string) error {
	sub, _ := c.Subscribe()
	defer sub.Close()
	for {
		m := c.peers()
		all := true
		for _, n := range nodes {
			if _, ok := m[n]; !ok {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		}
	}
}

// Send sends msg to the process to, like Node.Send, but reports what
// Node.Send cannot: a message the codec refuses (*UnregisteredTypeError,
// ErrTooLarge), a node that is not connected (gotp.ErrNoConnection), or a
// queue over Options.MaxPending. A nil error means the message was queued
// for NATS, not that it arrived. A local PID is sent to directly.
func (c *Cluster) Send(to gotp.PID, msg any) error {
	if to.Node() == c.name {
		c.n.Send(to, msg)
		return nil
	}
	return c.sendFrom(gotp.PID{}, to, msg)
}

// SendNamed sends msg to the process registered under name on node (Erlang's
// {Name, Node} ! Msg); the name is looked up there when the message
// arrives, and the message is dropped if nobody holds it. Errors are those
// of Send. node may be this node's own name.
func (c *Cluster) SendNamed(node, name string, msg any) error {
	if node == c.name {
		c.n.SendTo(gotp.Name(name), msg)
		return nil
	}
	p := c.peers()[node]
	if p == nil {
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %s on %s: %w", name, node, gotp.ErrNoConnection)
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kSendNamed)
	*b = appendStr(*b, name)
	return c.enqueueValue(p, b, msg)
}

// enqueueValue appends msg, encoded, to the pooled frame *b and queues it
// for p.
func (c *Cluster) enqueueValue(p *peer, b *[]byte, msg any) error {
	var err error
	*b, err = c.codec.AppendValue(*b, msg)
	if err != nil {
		c.stats.encodeErrors.Add(1)
		return err
	}
	return c.enqueue(p, *b)
}

func (c *Cluster) sendFrom(from, to gotp.PID, msg any) error {
	p := c.peerFor(to)
	if p == nil {
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %v: %w", to, gotp.ErrNoConnection)
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kSend)
	*b = appendShortPID(*b, from)
	*b = appendShortPID(*b, to)
	return c.enqueueValue(p, b, msg)
}

// peerFor returns the peer that owns pid, if connected and of the right
// incarnation.
func (c *Cluster) peerFor(pid gotp.PID) *peer {
	p := c.peers()[pid.Node()]
	if p == nil || p.creation != pid.Creation() {
		return nil
	}
	return p
}

var errQueueFull = errors.New("cluster: send queue full")

// enqueue appends one frame to p's queue and wakes the writer.
func (c *Cluster) enqueue(p *peer, frame []byte) error {
	if len(frame) > c.opts.MaxMessageSize {
		c.stats.encodeErrors.Add(1)
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, len(frame), c.opts.MaxMessageSize)
	}
	limit := c.batchLimit
	p.mu.Lock()
	if p.down.Load() || c.closed.Load() {
		p.mu.Unlock()
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %w", p.name, gotp.ErrNoConnection)
	}
	if p.pending+len(frame) > c.opts.MaxPending {
		p.mu.Unlock()
		c.stats.dropped.Add(1)
		return errQueueFull
	}
	if len(p.buf)+len(frame)+binary.MaxVarintLen32 > limit && len(p.buf) > len(c.header) {
		p.full = append(p.full, p.buf)
		p.buf = nil
	}
	if p.buf == nil {
		p.buf = append(c.getBatch(), c.header...)
		p.pending += len(c.header)
	}
	n := len(p.buf)
	p.buf = binary.AppendUvarint(p.buf, uint64(len(frame)))
	p.buf = append(p.buf, frame...)
	p.pending += len(p.buf) - n
	sched := !p.scheduled
	p.scheduled = true
	p.msgsOut++
	p.mu.Unlock()
	c.stats.msgsOut.Add(1)
	if sched {
		c.readyMu.Lock()
		c.ready = append(c.ready, p)
		c.readyMu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// writer publishes queued frames: one NATS message per peer and wake-up
// holds every frame queued for that peer meanwhile (up to the batch
// limit), so that a busy sender pays for NATS once per batch.
func (c *Cluster) writer() {
	defer c.wg.Done()
	var ready []*peer
	var bufs [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			c.flushAll(&ready, &bufs)
			return
		}
		c.flushAll(&ready, &bufs)
	}
}

func (c *Cluster) flushAll(ready *[]*peer, bufs *[][]byte) {
	c.readyMu.Lock()
	*ready, c.ready = c.ready, (*ready)[:0]
	c.readyMu.Unlock()
	for i, p := range *ready {
		(*ready)[i] = nil
		p.mu.Lock()
		*bufs = append(*bufs, p.full...)
		if len(p.buf) > len(c.header) {
			*bufs = append(*bufs, p.buf)
		}
		p.full, p.buf, p.pending, p.scheduled = nil, nil, 0, false
		down := p.down.Load()
		p.mu.Unlock()
		for j, b := range *bufs {
			if !down {
				if err := c.nc.Publish(p.subject, b); err != nil {
					c.stats.dropped.Add(1)
				} else {
					c.stats.batchesOut.Add(1)
					c.stats.bytesOut.Add(uint64(len(b)))
				}
			}
			c.putBatch(b) // NATS copied it
			(*bufs)[j] = nil
		}
		*bufs = (*bufs)[:0]
	}
}

// getBatch returns an empty batch buffer, reused when one is free.
func (c *Cluster) getBatch() []byte {
	if b, ok := c.batches.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4096)
}

func (c *Cluster) putBatch(b []byte) {
	if cap(b) > 1<<20 {
		return // do not keep a burst's buffer
	}
	c.batches.Put(&b)
}

func (c *Cluster) getBuf() *[]byte {
	if b, ok := c.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 256)
	return &b
}

func (c *Cluster) putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	c.bufs.Put(b)
}

// heartbeats announces this node and declares silent peers down.
func (c *Cluster) heartbeats() {
	defer c.wg.Done()
	c.publishHeartbeat(false)
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.publishHeartbeat(false)
		now := time.Now().UnixNano()
		for _, p := range c.peers() {
			if now-p.lastSeen.Load() > int64(c.opts.HeartbeatTimeout) {
				c.log.Info("cluster: node timed out", "peer", p.name)
				c.nodeDown(p, false)
				c.disconnect(p)
			}
		}
		c.mu.Lock()
		for k, t := range c.left {
			if time.Since(t) > 10*c.opts.HeartbeatTimeout {
				delete(c.left, k)
			}
		}
		c.mu.Unlock()
	}
}

// disconnect tells a peer this node timed it out, so that it treats this
// node as lost too (its monitors fire, its view of this node's pg members
// is rebuilt), as a torn-down connection would in Erlang. The peer may be
// alive and just slow; it comes back up on the next heartbeat either way.
func (c *Cluster) disconnect(p *peer) {
	b := append([]byte(nil), c.header...)
	b = append(b, 2, kHeartbeat, flagDisconnect)
	_ = c.nc.Publish(p.subject, b)
}

func (c *Cluster) publishHeartbeat(leaving bool) {
	b := append([]byte(nil), c.header...)
	var flags byte
	if leaving {
		flags = flagLeaving
	}
	b = append(b, 2, kHeartbeat, flags)
	if err := c.nc.Publish(c.hbSubj, b); err == nil {
		c.stats.batchesOut.Add(1)
		c.stats.bytesOut.Add(uint64(len(b)))
	}
}

// observe finds the peer that sent a batch, making it up when it is new.
// It returns nil for a batch of an incarnation that is gone or stale.
func (c *Cluster) observe(name string, cr uint32, start int64) *peer {
	if name == c.name {
		if cr != c.cr {
			if _, seen := c.logged.LoadOrStore("duplicate "+strconv.FormatUint(uint64(cr), 10), true); !seen {
				c.log.Error("cluster: another node uses this node's name; its messages are ignored", "creation", cr)
			}
		}
		return nil
	}
	p := c.peers()[name]
	if p != nil && p.creation == cr {
		p.lastSeen.Store(time.Now().UnixNano())
		return p
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	if _, gone := c.left[incarnation{name, cr}]; gone {
		c.mu.Unlock()
		return nil
	}
	p = c.peers()[name]
	if p != nil && p.creation == cr {
		c.mu.Unlock()
		p.lastSeen.Store(time.Now().UnixNano())
		return p
	}
	var old *peer
	if p != nil {
		if start < p.start {
			c.mu.Unlock()
			return nil // a late batch from an older incarnation
		}
		old = p
		c.removePeerLocked(old)
	}
	np := &peer{name: name, creation: cr, start: start, subject: c.nodeSubject(name)}
	np.lastSeen.Store(time.Now().UnixNano())
	m := clonePeers(c.peers())
	m[name] = np
	c.peersV.Store(&m)
	c.mu.Unlock()
	if old != nil {
		c.afterDown(old)
	}
	c.log.Info("cluster: node up", "peer", name, "creation", cr)
	c.publish(NodeEvent{Kind: NodeUp, Node: name, Creation: cr})
	c.publishHeartbeat(false) // let it learn of this node at once
	c.pgPeerUp(np)
	return np
}

func clonePeers(m map[string]*peer) map[string]*peer {
	out := make(map[string]*peer, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// removePeerLocked takes p out of the peer table; c.mu is held.
func (c *Cluster) removePeerLocked(p *peer) bool {
	cur := c.peers()
	if cur[p.name] != p {
		return false
	}
	m := clonePeers(cur)
	delete(m, p.name)
	c.peersV.Store(&m)
	p.mu.Lock()
	p.down.Store(true)
	p.buf, p.full, p.pending = nil, nil, 0
	p.mu.Unlock()
	return true
}

// nodeDown declares p lost: monitors of its processes fire with
// noconnection, links deliver exit signals, its group members go.
func (c *Cluster) nodeDown(p *peer, leaving bool) {
	c.mu.Lock()
	ok := c.removePeerLocked(p)
	if ok && leaving {
		c.left[incarnation{p.name, p.creation}] = time.Now()
	}
	c.mu.Unlock()
	if ok {
		c.afterDown(p)
	}
}

func (c *Cluster) afterDown(p *peer) {
	c.log.Info("cluster: node down", "peer", p.name, "creation", p.creation)
	c.pgPeerDown(p)
	c.gateway().NodeDown(p.name)
	c.publish(NodeEvent{Kind: NodeDown, Node: p.name, Creation: p.creation})
}

// onBatch handles one NATS message from another node.
func (c *Cluster) onBatch(m *nats.Msg) {
	if c.closed.Load() {
		return
	}
	c.stats.batchesIn.Add(1)
	c.stats.bytesIn.Add(uint64(len(m.Data)))
	if err := c.handleBatch(m.Data); err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Warn("cluster: bad batch", "err", err)
	}
}

// parseHeader reads a batch header.
func parseHeader(d *reader) (name string, cr uint32, start int64) {
	if d.byte1() != wireMagic || d.byte1() != wireVersion {
		d.fail("not a gotp batch")
		return
	}
	name = d.str()
	cr = d.u32()
	start = int64(d.uvarint())
	if d.err == nil && (name == "" || cr == 0) {
		d.fail("batch without sender")
	}
	return
}

func (c *Cluster) handleBatch(data []byte) error {
	d := &reader{b: data}
	name, cr, start := parseHeader(d)
	if d.err != nil {
		return d.err
	}
	p := c.observe(name, cr, start)
	if p == nil {
		return nil
	}
	var in uint64
	defer func() { p.msgsIn.Add(in) }()
	for len(d.b) > 0 {
		body := d.bytes()
		if d.err != nil {
			return d.err
		}
		if len(body) > c.opts.MaxMessageSize {
			c.stats.decodeErrors.Add(1)
			continue
		}
		c.stats.msgsIn.Add(1)
		in++
		if err := c.handleFrame(p, body); err != nil {
			c.stats.decodeErrors.Add(1)
			c.log.Warn("cluster: dropped a message", "peer", name, "err", err)
		}
	}
	return nil
}

// frame is one decoded signal.
type frame struct {
	kind     byte
	from, to gotp.PID // also watcher (from) and target (to)
	ref      gotp.Ref
	reason   error
	viaLink  bool
	value    any
	flags    byte
	name     string // kSendNamed
}

// decodeFrame decodes one frame sent by node sender to node self. pg
// frames are returned undecoded in d.
func decodeFrame(codec *Codec, sender, self string, d *reader) (f frame, err error) {
	f.kind = d.byte1()
	switch f.kind {
	case kSend:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kExit:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
		f.reason = codec.readReason(d, 0)
		f.viaLink = d.byte1() == 1
	case kLink, kUnlink:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
	case kMonitor:
		f.ref = d.shortRef(sender)
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
	case kDemonitor:
		f.ref = d.shortRef(sender)
		f.to = d.shortPID(self)
	case kDown:
		f.ref = d.shortRef(self)
		f.from = d.shortPID(sender)
		f.reason = codec.readReason(d, 0)
	case kHeartbeat:
		f.flags = d.byte1()
	case kSendNamed:
		f.name = d.str()
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kPG:
		return f, d.err
	default:
		return f, fmt.Errorf("%w: frame kind %d", ErrDecode, f.kind)
	}
	if err == nil {
		err = d.err
	}
	if err == nil && len(d.b) != 0 {
		err = fmt.Errorf("%w: trailing bytes in frame", ErrDecode)
	}
	return f, err
}

func (c *Cluster) handleFrame(p *peer, body []byte) error {
	d := &reader{b: body}
	f, err := decodeFrame(c.codec, p.name, c.name, d)
	if err != nil {
		return err
	}
	gw := c.gateway()
	switch f.kind {
	case kSend:
		gw.Send(f.from, f.to, f.value)
	case kSendNamed:
		if pid, ok := c.n.Whereis(f.name); ok {
			gw.Send(gotp.PID{}, pid, f.value)
		}
	case kExit:
		gw.Exit(f.from, f.to, f.reason, f.viaLink)
	case kLink:
		gw.Link(f.from, f.to)
	case kUnlink:
		gw.Unlink(f.from, f.to)
	case kMonitor:
		gw.Monitor(f.ref, f.from, f.to)
	case kDemonitor:
		gw.Demonitor(f.ref, f.to)
	case kDown:
		gw.Down(f.ref, f.from, f.reason)
	case kHeartbeat:
		switch {
		case f.flags&flagLeaving != 0:
			c.nodeDown(p, true)
		case f.flags&flagDisconnect != 0:
			c.nodeDown(p, false)
		}
	case kPG:
		return c.pgFrame(p, d)
	}
	return nil
}

func (d *reader) shortRef(node string) gotp.Ref {
	cr := d.u32()
	id := d.uvarint()
	return gotp.NewRef(node, cr, id)
}

func appendShortRef(b []byte, r gotp.Ref) []byte {
	b = binary.AppendUvarint(b, uint64(r.Creation()))
	return binary.AppendUvarint(b, r.ID())
}

// Leave leaves the cluster: peers are told at once (their monitors of
// this node's processes fire with noconnection), this node's monitors
// and links of remote processes fire likewise, queued messages are
// flushed, and the NATS connection and embedded server stop. The node
// keeps running on its own. Leave is idempotent; it returns ctx.Err() if
// ctx ends before NATS has shut down (the shutdown then goes on).
func (c *Cluster) Leave(ctx context.Context) error {
	c.leaveOnce.Do(func() {
		c.leftCh = make(chan struct{})
		go func() { // owned by the cluster: ends when the shutdown is done
			defer close(c.leftCh)
			c.leave()
		}()
	})
	select {
	case <-c.leftCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cluster) leave() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.pgClose()
	// The goodbye goes on each peer's ordered stream, after every signal
	// already queued (the Downs and exits of this node's processes).
	for _, p := range c.peers() {
		_ = c.enqueue(p, []byte{kHeartbeat, flagLeaving})
	}
	close(c.done)
	c.wg.Wait() // the writer flushes what is queued
	c.closed.Store(true)
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	_ = c.nc.FlushTimeout(time.Second)
	for _, p := range c.peers() {
		c.nodeDown(p, false)
	}
	c.shutdownNATS()
	c.mu.Lock()
	for s := range c.evSubs {
		s.closeLocked()
	}
	c.mu.Unlock()
}

// Close leaves the cluster, waiting as long as it takes (see Leave).
func (c *Cluster) Close() error { return c.Leave(context.Background()) }

// transport is the gotp.Transport of a cluster.
type transport struct{ c *Cluster }

func (t transport) Send(from, to gotp.PID, msg any) {
	c := t.c
	err := c.sendFrom(from, to, msg)
	if err == nil || errors.Is(err, gotp.ErrNoConnection) || err == errQueueFull {
		return
	}
	key := fmt.Sprintf("%T", msg)
	if _, seen := c.logged.LoadOrStore(key, true); !seen {
		c.log.Warn("cluster: message not sent (logged once per type)", "to", to, "type", key, "err", err)
	}
}

// signal queues a frame for the node of to, or reports why it cannot:
// the node is not connected (noconnection) or to is of an old incarnation
// (noproc).
func (c *Cluster) signal(to gotp.PID, build func(b []byte) []byte) error {
	p := c.peers()[to.Node()]
	if p == nil {
		c.stats.dropped.Add(1)
		return gotp.ErrNoConnection
	}
	if p.creation != to.Creation() {
		c.stats.dropped.Add(1)
		return gotp.ErrNoProc
	}
	b := c.getBuf()
	*b = build(*b)
	err := c.enqueue(p, *b)
	c.putBuf(b)
	if err != nil && errors.Is(err, gotp.ErrNoConnection) {
		return gotp.ErrNoConnection
	}
	return nil
}

func (t transport) Exit(from, to gotp.PID, reason error, viaLink bool) {
	c := t.c
	_ = c.signal(to, func(b []byte) []byte {
		b = append(b, kExit)
		b = appendShortPID(b, from)
		b = appendShortPID(b, to)
		b = c.codec.appendReason(b, reason)
		if viaLink {
			return append(b, 1)
		}
		return append(b, 0)
	})
}

func (t transport) Link(from, to gotp.PID) {
	c := t.c
	err := c.signal(to, func(b []byte) []byte {
		b = append(b, kLink)
		b = appendShortPID(b, from)
		return appendShortPID(b, to)
	})
	if err != nil {
		c.gateway().Exit(to, from, err, true)
	}
}

func (t transport) Unlink(from, to gotp.PID) {
	_ = t.c.signal(to, func(b []byte) []byte {
		b = append(b, kUnlink)
		b = appendShortPID(b, from)
		return appendShortPID(b, to)
	})
}

func (t transport) Monitor(ref gotp.Ref, watcher, target gotp.PID) {
	c := t.c
	err := c.signal(target, func(b []byte) []byte {
		b = append(b, kMonitor)
		b = appendShortRef(b, ref)
		b = appendShortPID(b, watcher)
		return appendShortPID(b, target)
	})
	if err != nil {
		c.gateway().Down(ref, target, err)
	}
}

func (t transport) Demonitor(ref gotp.Ref, target gotp.PID) {
	_ = t.c.signal(target, func(b []byte) []byte {
		b = append(b, kDemonitor)
		b = appendShortRef(b, ref)
		return appendShortPID(b, target)
	})
}

func (t transport) Down(ref gotp.Ref, watcher, target gotp.PID, reason error) {
	c := t.c
	p := c.peers()[ref.Node()]
	if p == nil || p.creation != ref.Creation() {
		c.stats.dropped.Add(1)
		return
	}
	b := c.getBuf()
	*b = append(*b, kDown)
	*b = appendShortRef(*b, ref)
	*b = appendShortPID(*b, target)
	*b = c.codec.appendReason(*b, reason)
	_ = c.enqueue(p, *b)
	c.putBuf(b)
}

func (t transport) Close() { _ = t.c.Close() }

// gateway returns the node's gateway; Attach has returned it, but a
// process may reach the transport in the instant before Join stores it.
func (c *Cluster) gateway() *gotp.Gateway {
	for {
		if g := c.gwV.Load(); g != nil {
			return g
		}
		runtime.Gosched()
	}
}
