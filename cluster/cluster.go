package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
// node's signals to processes of other nodes and theirs to it, over a
// direct link to each node or over NATS. All its methods are safe for
// concurrent use.
type Cluster struct {
	n     *gotp.Node
	opts  Options
	codec *Codec
	log   *slog.Logger

	name       string
	cr         uint32
	start      int64
	header     []byte // NATS batch header of this incarnation, without the connection id
	batchLimit int    // largest NATS message this node publishes
	hbSubj     string
	key        []byte // authenticates direct links (from the credentials)

	srv   *natsserver.Server // nil when a client of an existing deployment
	nc    *nats.Conn
	subs  []*nats.Subscription
	ln    net.Listener // direct links; nil with Options.NoDirect
	addrs []string     // where other nodes dial this one's direct links

	mu       sync.Mutex // guards the fields below; serialises peer changes
	peersV   atomic.Pointer[map[string]*peer]
	shakes   map[string]*shake         // handshakes under way, by peer name
	links    map[*link]struct{}        // open direct links, closed by Leave
	left     map[incarnation]time.Time // incarnations that left: never revived
	noLink   map[incarnation]time.Time // direct links that could not be made, and when
	evSubs   map[*Subscription]struct{}
	closing  bool
	lastConn uint64 // the last connection id handed out

	readyMu sync.Mutex // guards ready
	ready   []*peer    // NATS peers with queued frames, for the writer
	wake    chan struct{}

	calls callTable
	pg    pgState
	names nameState

	spinOff   atomic.Int64 // UnixNano until which links do not busy-poll (see busyReader)
	spinMu    sync.Mutex   // guards spinFirst and spinCount
	spinFirst int64        // when the current window of preemptions began
	spinCount int          // preemptions in it
	stats     counters
	auth      authLog
	done      chan struct{}   // closed when the cluster starts leaving
	ctx       context.Context // cancelled when the cluster starts leaving (dials)
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	writers   sync.WaitGroup // the goroutines that write: they flush before Leave closes anything
	leaveOnce sync.Once
	leftCh    chan struct{} // closed when Leave's work is done; set once by leaveOnce
	closed    atomic.Bool
	logged    sync.Map  // message types whose encode failure was logged
	bufs      sync.Pool // scratch buffers for frames
	batches   sync.Pool // batch buffers
	gwV       atomic.Pointer[gotp.Gateway]
}

type counters struct {
	msgsOut, msgsIn       atomic.Uint64
	batchesOut, batchesIn atomic.Uint64
	bytesOut, bytesIn     atomic.Uint64
	dropped               atomic.Uint64
	stale                 atomic.Uint64
	encodeErrors          atomic.Uint64
	decodeErrors          atomic.Uint64
	linkFailures          atomic.Uint64
	selfReads             atomic.Uint64
	inlineCalls           atomic.Uint64
	rescues               atomic.Uint64
}

// Stats are a cluster's counters since Join. Messages count signals
// (sends, exits, links, monitors, Downs, calls, pg and name updates);
// batches count NATS messages and writes to direct links.
type Stats struct {
	MessagesOut, MessagesIn uint64
	BatchesOut, BatchesIn   uint64
	BytesOut, BytesIn       uint64
	// Dropped counts signals not sent: to nodes that are not connected
	// (or to an old incarnation), or beyond Options.MaxPending.
	Dropped uint64
	// Stale counts NATS batches received for a connection that is no
	// longer the current one (sent before a nodedown, delivered after
	// it), which are dropped unread.
	Stale uint64
	// EncodeErrors counts messages refused by the codec at this node
	// (unregistered types, too large); DecodeErrors wire data from other
	// nodes that could not be decoded: a message that was dropped, or a
	// direct link's frame length that was too large or malformed, which
	// closes the link (logged at Warn).
	EncodeErrors, DecodeErrors uint64
	// LinkFailures counts direct links that could not be made or were
	// refused (unreachable address, failed authentication); the node then
	// carries that connection over NATS.
	LinkFailures uint64
	// SelfReadCalls counts calls whose caller read the reply from the
	// direct link itself (the link's socket was free when the call
	// began), rather than being handed it by the link's goroutine.
	SelfReadCalls uint64
	// InlineCalls counts calls from other nodes whose server handled them
	// on the goroutine of the direct link that read them (see the package
	// doc, Calls), and Rescues how many of those ran so long (or called
	// runtime.Goexit) that a new goroutine took over reading the link.
	InlineCalls, Rescues uint64
}

// Stats returns the cluster's counters.
func (c *Cluster) Stats() Stats {
	s := &c.stats
	return Stats{
		MessagesOut: s.msgsOut.Load(), MessagesIn: s.msgsIn.Load(),
		BatchesOut: s.batchesOut.Load(), BatchesIn: s.batchesIn.Load(),
		BytesOut: s.bytesOut.Load(), BytesIn: s.bytesIn.Load(),
		Dropped: s.dropped.Load(), Stale: s.stale.Load(),
		EncodeErrors: s.encodeErrors.Load(), DecodeErrors: s.decodeErrors.Load(),
		LinkFailures: s.linkFailures.Load(), SelfReadCalls: s.selfReads.Load(),
		InlineCalls: s.inlineCalls.Load(), Rescues: s.rescues.Load(),
	}
}

// Join connects node n to the cluster described by opts and attaches the
// cluster as the node's transport. It returns once the node's NATS
// connection works and its subscriptions are in place; other nodes appear
// as they are found and connected (see WaitFor and Subscribe). Join fails
// if the node already has a transport, if its name is DefaultNodeName or
// is in use by a live node, if NATS refuses the connection (wrong
// credentials, for example), if the direct-link listener cannot be
// opened, or if ctx ends first.
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
		shakes: make(map[string]*shake),
		links:  make(map[*link]struct{}),
		left:   make(map[incarnation]time.Time),
		noLink: make(map[incarnation]time.Time),
		evSubs: make(map[*Subscription]struct{}),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if c.log == nil {
		c.log = n.Logger()
	}
	c.log = c.log.With("cluster", opts.Cluster, "node", c.name)
	c.auth.c = c
	empty := map[string]*peer{}
	c.peersV.Store(&empty)
	c.calls.init()
	c.pg.init()
	c.names.init()
	c.key = linkKey(&c.opts)
	h := []byte{wireMagic, wireVersion}
	h = appendStr(h, c.name)
	h = binary.AppendUvarint(h, uint64(c.cr))
	c.header = binary.AppendUvarint(h, uint64(c.start))
	c.hbSubj = "gotp." + subjectToken(opts.Cluster) + ".hb"

	fail := func(err error) (*Cluster, error) {
		c.closed.Store(true)
		c.cancel()
		if c.ln != nil {
			c.ln.Close()
		}
		c.shutdownNATS()
		return nil, err
	}
	if err := c.connect(ctx); err != nil {
		c.cancel()
		c.shutdownNATS()
		return nil, err
	}
	// Batches must fit the deployment's max_payload.
	c.batchLimit = max(c.opts.MaxMessageSize+len(c.header)+32, 256<<10)
	if mp := int(c.nc.MaxPayload()); mp > 0 {
		c.batchLimit = min(c.batchLimit, mp)
		if c.opts.MaxMessageSize > mp-len(c.header)-32 {
			c.opts.MaxMessageSize = mp - len(c.header) - 32
		}
	}
	if !c.opts.NoDirect {
		if err := c.listen(); err != nil {
			return fail(err)
		}
	}
	c.waitRoutes(ctx)
	if c.srv != nil && len(c.opts.Peers) > 0 && c.srv.NumRoutes() == 0 && !c.opts.StartAlone {
		if refused := c.auth.outbound(); len(refused) > 0 {
			return fail(joinAuthError(refused))
		}
	}
	if err := c.checkName(ctx); err != nil {
		return fail(err)
	}
	gw, err := n.Attach(transport{c})
	if err != nil {
		return fail(err)
	}
	c.gwV.Store(gw)
	for _, s := range []string{c.nodeSubject(c.name), c.hbSubj} {
		sub, err := c.nc.Subscribe(s, c.onBatch)
		if err != nil {
			return fail(fmt.Errorf("cluster: subscribe: %w", err))
		}
		_ = sub.SetPendingLimits(-1, -1)
		c.subs = append(c.subs, sub)
	}
	whois, err := c.nc.Subscribe(c.nodeSubject(c.name)+".whois", func(m *nats.Msg) {
		_ = m.Respond(c.header)
	})
	if err != nil {
		return fail(fmt.Errorf("cluster: subscribe: %w", err))
	}
	c.subs = append(c.subs, whois)
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	c.wg.Add(2)
	c.writers.Add(1)
	go c.writer()
	go c.heartbeats()
	if c.ln != nil {
		c.wg.Add(1)
		go c.accept()
	}
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

// DirectAddrs returns the addresses other nodes dial for a direct link to
// this node (nil with Options.NoDirect).
func (c *Cluster) DirectAddrs() []string { return slices.Clone(c.addrs) }

// Node returns the local node.
func (c *Cluster) Node() *gotp.Node { return c.n }

// Codec returns the codec in use, to register types or check messages.
func (c *Cluster) Codec() *Codec { return c.codec }

// NodeInfo describes a connected node.
type NodeInfo struct {
	Name     string
	Creation uint32    // its incarnation
	LastSeen time.Time // when its last message (or tick) arrived
	Pending  int       // bytes queued for it, not yet written
	// Direct reports a direct link; false means the connection runs over
	// NATS.
	Direct bool
	// MessagesOut and MessagesIn count the messages (signals, as in
	// Stats) queued for this connection and received on it.
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
			Direct: p.link != nil, MessagesOut: sent, MessagesIn: p.msgsIn.Load(),
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

// Leave leaves the cluster: peers are told at once (their monitors of
// this node's processes fire with noconnection), this node's monitors
// and links of remote processes fire likewise, queued messages are
// flushed, and the direct links, the NATS connection and the embedded
// server close. The node keeps running on its own. Leave is idempotent;
// it returns ctx.Err() if ctx ends before the shutdown is done (it then
// goes on).
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
	// The goodbye goes on each peer's ordered stream, after every signal
	// already queued (the Downs and exits of this node's processes).
	for _, p := range c.peers() {
		_ = c.enqueue(p, []byte{kBye, byeLeaving})
	}
	close(c.done)
	c.cancel()
	if c.ln != nil {
		c.ln.Close()
	}
	c.writers.Wait() // every writer flushes what is queued (bounded by the write deadline)
	c.closed.Store(true)
	c.mu.Lock()
	links := make([]*link, 0, len(c.links))
	for l := range c.links {
		links = append(links, l)
	}
	c.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	_ = c.nc.FlushTimeout(time.Second)
	for _, p := range c.peers() {
		c.nodeDown(p, false)
	}
	c.wg.Wait()
	c.shutdownNATS()
	c.calls.failAll()
	c.mu.Lock()
	for s := range c.evSubs {
		s.closeLocked()
	}
	c.mu.Unlock()
}

// Close leaves the cluster, waiting as long as it takes (see Leave).
func (c *Cluster) Close() error { return c.Leave(context.Background()) }

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
