package cluster

import (
	"crypto/tls"
	"log/slog"
	"time"
)

// Defaults of Options.
const (
	DefaultClusterName       = "gotp"
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultHeartbeatTimeout  = 3 * time.Second
	DefaultMaxMessageSize    = 1 << 20
	DefaultMaxPending        = 64 << 20
	DefaultRouteListen       = "127.0.0.1:0"
)

// Options configure Join. The zero value joins a cluster named
// DefaultClusterName through an embedded NATS server with no peers (a
// cluster of one, which others may route to).
type Options struct {
	// Cluster names the cluster: it prefixes every NATS subject (so
	// several gotp clusters can share one NATS deployment) and names the
	// embedded servers' NATS cluster. Defaults to DefaultClusterName.
	Cluster string

	// URLs, when set, make the node a client of an existing NATS
	// deployment (for example "nats://10.0.0.1:4222,nats://10.0.0.2:4222")
	// instead of running an embedded server.
	URLs []string

	// RouteListen is the host:port on which the embedded server accepts
	// routes from other nodes' servers. Port 0 picks a free port (see
	// Cluster.RouteURL). Defaults to DefaultRouteListen.
	RouteListen string
	// Peers are the route URLs of other nodes' embedded servers
	// ("nats-route://host:6222"); the embedded server keeps reconnecting to
	// them. Routes carry the cluster's credentials and TLS, so a server
	// without them cannot join the NATS cluster.
	Peers []string
	// ClientListen is where the embedded server accepts NATS clients (for
	// tools such as the nats CLI). Defaults to a free port on 127.0.0.1;
	// the node itself connects in process. Any client that gets in can
	// publish on the cluster's subjects (and so speak for any node): set
	// credentials unless every process that can reach the port is trusted.
	ClientListen string
	// RouteAdvertise is the host:port other servers are told to use to
	// reach this server's routes, when it differs from RouteListen (NAT,
	// proxies).
	RouteAdvertise string
	// NoAdvertise stops the embedded server from telling its peers about
	// other routes it knows (gossip): servers then connect only to their
	// configured Peers. Needed behind NAT or proxies.
	NoAdvertise bool

	// DirectListen is the host:port on which the node accepts direct
	// links from other nodes (see "Connections" in the package doc).
	// Defaults to the host of RouteListen with a free port (127.0.0.1 for
	// a client of an existing NATS deployment). Listening on every
	// interface ("0.0.0.0:7222") advertises each of its addresses.
	DirectListen string
	// DirectAdvertise is the host:port other nodes dial for a direct link
	// when it differs from DirectListen (NAT, proxies).
	DirectAdvertise string
	// NoDirect carries every signal over NATS: the node neither makes nor
	// accepts direct links. Connections then cost NATS's hops (about
	// twice the round-trip time of a direct link on one host) and a
	// node whose process dies is seen down only at HeartbeatTimeout.
	NoDirect bool

	// BusyPoll makes a direct link's reader keep trying its socket for
	// this long after it finds it empty, before it waits for it (as
	// Erlang's schedulers busy-wait, +sbwt): a reply that comes within it
	// is read without waking a sleeping thread, which on an idle virtual
	// machine saves tens of microseconds a round trip. It costs a CPU for
	// as long as it spins, and on a machine whose CPUs are all busy it
	// adds latency instead. Zero (the default) does not spin; TLS links
	// never do.
	BusyPoll time.Duration

	// Token, User and Password, or NKeySeed (an "SU..." user seed) are the
	// credentials: passed to NATS by the client, and required by the
	// embedded server of clients and of routes. A node without them cannot
	// join. Use one kind.
	Token    string
	User     string
	Password string
	NKeySeed string
	// StartAlone lets Join succeed when no route to Peers formed and a
	// peer refused this node's credentials: the node then runs as a
	// cluster of its own, which the refusing peers do not see, while NATS
	// keeps retrying. Without it Join fails with *AuthError, so that a
	// node with the wrong credentials does not serve a split cluster
	// (taking names that the real cluster holds, for example). Refusals
	// are logged at level Error either way.
	StartAlone bool
	// TLS, when set, is used for the client connection and, on the
	// embedded server, for clients and routes (it must then hold a
	// certificate and the CAs to verify peers).
	TLS *tls.Config

	// HeartbeatInterval is how often the node announces itself.
	// Defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a peer may stay silent before it is
	// declared down. Defaults to DefaultHeartbeatTimeout; at least twice
	// HeartbeatInterval.
	HeartbeatTimeout time.Duration

	// MaxMessageSize bounds one encoded message (signal); larger ones are
	// refused at the sender and dropped by the receiver. Defaults to
	// DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxPending bounds the bytes queued for one peer that NATS has not
	// taken yet; beyond it new messages to that peer are dropped (and
	// counted in Stats.Dropped). Defaults to DefaultMaxPending.
	MaxPending int

	// Codec encodes messages. Defaults to NewCodec(); register your
	// message types on it (the same on every node) before Join.
	Codec *Codec

	// Logger defaults to the node's logger.
	Logger *slog.Logger
}

func (o *Options) fill() {
	if o.Cluster == "" {
		o.Cluster = DefaultClusterName
	}
	if o.RouteListen == "" {
		o.RouteListen = DefaultRouteListen
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.HeartbeatTimeout < 2*o.HeartbeatInterval {
		o.HeartbeatTimeout = 2 * o.HeartbeatInterval
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Codec == nil {
		o.Codec = NewCodec()
	}
}
