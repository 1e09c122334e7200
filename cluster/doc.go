// Package cluster joins gotp nodes into one cluster, as Erlang
// distribution does: PIDs of other nodes work wherever local ones do
// (send, link, monitor, exit signals, server.Call/Cast/Stop), nodes see
// each other come and go, names can be held cluster-wide, and pg scopes
// span the cluster. NATS finds the nodes and authenticates them; signals
// travel on a direct TCP link between each pair of nodes, or over NATS
// where no link can be made.
//
//	type Greet struct{ Name string } // a message that crosses nodes
//
//	codec := cluster.NewCodec()
//	_ = cluster.Register[Greet](codec, "myapp.Greet") // the same name on every node
//
//	node := gotp.NewNode(gotp.Options{Name: "app-1"})
//	c, err := cluster.Join(ctx, node, cluster.Options{
//		RouteListen:  "0.0.0.0:6222",
//		DirectListen: "0.0.0.0:6223",
//		Peers:        []string{"nats-route://app-2:6222", "nats-route://app-3:6222"},
//		Token:        os.Getenv("CLUSTER_TOKEN"),
//		Codec:        codec,
//	})
//	// node.Send(remotePID, Greet{Name: "ana"})
//	// reply, err := server.Call[string](ctx, node, remotePID, Greet{Name: "ana"})
//	// reply, err = server.Call[string](ctx, node, cluster.Remote{Node: "app-2", Name: "greeter"}, Greet{Name: "ana"})
//	// pid, err := server.Start(ctx, node, greeter{}, server.WithVia(c.Names("").Via("greeter")))
//	_ = c.Replicate(scope) // a pg scope started with pg.Start on every node
//
// Running the same program on three machines with each other's route URLs
// in Peers makes one cluster. The package's Example runs two nodes in one
// program; examples/cluster runs two OS processes.
//
// # NATS
//
// Each node keeps one NATS connection. By default it embeds a NATS server
// (nats-server/v2) whose routes to the Peers form a NATS cluster, and
// connects to it in process; with Options.URLs it is instead a client of an
// existing NATS deployment. Credentials (token, user/password or an nkey
// seed) and TLS pass straight to NATS: the embedded server requires them of
// clients and of routes, so a node without them cannot join (its
// connection or its routes are refused).
//
// A refusal is loud: Join fails with *AuthError (errors.Is ErrAuth),
// naming the peer that refused, when NATS refused its client connection
// or when no route formed and a peer refused its routes, so that a node
// with the wrong token does not serve a split cluster of its own
// (Options.StartAlone lets it start anyway). Both sides log each refusal
// at level Error, the peer's URL or address and NATS's cause as
// attributes (a refusal that goes on, once a minute), publish an
// AuthFailed event the first time, and list it in AuthFailures. A direct
// link whose handshake fails its credentials is refused the same way.
//
// Every node announces itself on gotp.<cluster>.hb every
// HeartbeatInterval, with the addresses of its direct-link listener; that
// is how nodes find each other. Join refuses a name already used by a node
// it can reach (ErrNameTaken); a duplicate behind a partition or not yet
// routed is only logged when its heartbeats are seen, and ignored.
//
// # Connections
//
// Of two nodes that hear each other, the one with the smaller name starts
// a connection. It dials the other's direct-link address (Options
// DirectListen, DirectAdvertise); both prove they hold the cluster's
// credentials (an HMAC of a challenge under a key derived from them, the
// link being TLS first when Options.TLS is set), and the link carries
// every signal between the two. Where no link can be made (NoDirect on
// either side, an address that cannot be reached, a failed handshake, a
// deployment where nodes only reach NATS) the connection runs over NATS
// instead, on gotp.<cluster>.node.<name>, after a three-step handshake in
// which each side names the connection; every batch carries the
// receiver's name for it, so a batch of an earlier connection (buffered by
// NATS through a partition, say) is recognised and dropped (Stats.Stale).
// A direct link costs one system call per write and no extra process hop;
// a round trip over NATS crosses two NATS servers and is about half as
// fast (see docs/bench/cluster.md).
//
// Signals from one node to another keep their order (one connection), so
// a message sent before a process exits arrives before its Down. A sender
// whose link has been idle writes its frame itself; a busy sender queues
// frames for the link's writer, which writes everything queued meanwhile
// in one system call (over NATS: one NATS message per batch, at most
// max(Options.MaxMessageSize, 256 KiB) and within the server's
// max_payload). At the sender each peer's queue holds at most
// Options.MaxPending bytes: beyond that messages are dropped and counted
// (Stats.Dropped); at the receiver what is read is delivered to mailboxes,
// which have no limit.
//
// A call's caller writes its request itself and, when nobody else is
// reading the link, reads the reply from the socket itself
// (Stats.SelfReadCalls), handling whatever else comes meanwhile as the
// link's reader would: the reply wakes the caller's thread directly
// instead of passing through the link's goroutine, which on a small
// virtual machine saves a third of a round trip. For that the link's
// goroutine leaves the socket free after it hands over a reply while no
// other call waits, and takes it back when it finds it free at a tick of
// a millisecond; so a frame that comes on a link just after a call may
// wait up to a millisecond to be read, and a call's deadline or
// cancellation is seen up to a millisecond late while its caller reads.
//
// On the server's node, a call that the link's goroutine reads with
// nothing behind it runs its server there, if the server is idle
// (Stats.InlineCalls): read, handled and answered on one goroutine, where
// handing it to a goroutine of the server's own would wake another thread
// twice. The server's semantics are those of any call (one message at a
// time, in order). A handler that runs longer than about a millisecond,
// or calls runtime.Goexit, does not hold the link up: a new goroutine
// takes over reading it within two milliseconds (Stats.Rescues), and the
// handler finishes on the old one; a call it makes to the caller's node
// meanwhile reads its own reply. Direct links read their sockets, and
// senders write them, with raw system calls, which spare the runtime's
// accounting of calls that could block (they never do: the sockets are
// non-blocking, and a read that finds nothing waits in the runtime's
// poller).
//
// # Failure detection
//
// A connection is the unit of failure, as an Erlang distribution
// connection is. When it goes the peer is down here: every monitor of its
// processes delivers a Down with gotp.ErrNoConnection, every link delivers
// the matching exit signal, calls waiting on it fail, its pg members leave
// and its names go, and Subscribe reports NodeDown. How soon:
//
//   - the peer's process dies (crash, kill -9, OOM): its operating system
//     closes the link, and the peer is seen down at once (a few
//     milliseconds; TestMultiProcessKill and BenchmarkC2ProcsKilledNode
//     measure it);
//   - the peer leaves (Leave, Node.Stop): it says so on the connection,
//     after everything it queued, and is down at once;
//   - the peer is cut off without a close (a partition, a host that
//     froze) or the connection runs over NATS: nothing arrives on the
//     connection (each side ticks it every HeartbeatInterval) for
//     HeartbeatTimeout, and the peer is down within HeartbeatTimeout plus
//     one HeartbeatInterval. The side that times out closes the link (or
//     says bye over NATS), so the other side drops the connection too.
//
// A node that comes back from a partition with the same incarnation is
// connected afresh (its processes lived on; the monitors that fired stay
// fired). PIDs of an earlier incarnation stay dead: messages to them are
// dropped, monitors and links answer gotp.ErrNoProc, and nothing the old
// incarnation sent is delivered once its connection is gone. Signals to a
// node that is not connected are dropped, and monitors and links of its
// processes answer gotp.ErrNoConnection at once. Subscribe delivers
// NodeUp/NodeDown events (buffered to SubscriptionBuffer, later events
// dropped and counted when full); Nodes lists the connected nodes; WaitFor
// waits for some.
//
// # Messages and the codec
//
// Messages cross nodes through a Codec over an explicit set of Go types
// (CBOR, github.com/fxamacker/cbor/v2; scalars such as ints and strings
// in a compact form of their own). Register every message type, on every
// node, under the same name. Sending a value of an unregistered type — or
// a value holding one in an interface-typed field — is refused at the
// sender with *UnregisteredTypeError: Cluster.Send returns it; the node's
// own Send, which never fails, drops the message, counts it in
// Stats.EncodeErrors and logs once per type. A receiving node only decodes
// into registered types. Registered named types keep their type inside
// fields of type any; plain numbers inside such fields come back as CBOR's
// int64/uint64/float64. Every message is bounded by MaxMessageSize at both
// ends (ErrTooLarge at the sender).
//
// Exit reasons and error replies travel as errors: gotp's sentinels (nil,
// ErrShutdown, ErrKill, ErrKilled, ErrNoProc, ErrNoConnection) arrive as
// themselves, sentinels registered with Codec.RegisterError too; any other
// error arrives as *RemoteError with its message, wrapping the registered
// sentinels it wrapped, so errors.Is keeps working. A *gotp.PanicError
// keeps its value's text and its stack.
//
// # Calls
//
// server.Call to a server of another node sends one signal that carries
// the request and stands for a monitor of the server; the server's node
// drops the monitor as the reply leaves, so a call costs one signal each
// way and no process on the caller's node (the transport is a
// server.RemoteCaller). A reply sent just before the server exits wins
// over its Down; a server that exits first fails the call with its exit
// reason; a lost node fails it with gotp.ErrNoConnection; a request or a
// reply the codec refuses fails it at once with the codec's error. Remote
// names a process by the name it has on its own node (Erlang's
// {Name, Node}): server.Call to it is looked up there as it arrives, and
// Resolve asks that node (one round trip) for everything else. SendNamed
// sends to such a name.
//
// # Cluster-wide names
//
// Names (Erlang's global, in name spaces) maps a name to one process in
// the whole cluster: Register takes a lock on the name on every connected
// node and then tells each of them the entry; Whereis and Via resolve from
// the node's own copy of the table, with no network, so server.Call,
// server.Cast and Node.SendTo to a Via cost what they cost to a PID.
// Entries belong to their process's node: they go when the process exits,
// with Unregister, and when their node is lost. Two parts of the cluster
// that could not talk may each accept the same name; when they meet, the
// registration made first keeps it (registration times by the clock of
// the node that made each, then the smaller node name, then the smaller
// PID) and the other holder gets an exit signal whose reason is a
// *NameConflictError (errors.Is(reason, ErrNameConflict)): it dies, unless
// it traps exits and handles it. Every node applies the same rule, so they
// agree without another round.
//
// # Process groups
//
// Replicate plugs a pg scope into the cluster through pg's Replicator seam:
// a full sync when a connection comes up (or the scope is replicated
// later), deltas for every local join and leave on the same ordered
// connection, the peer's members dropped when it is lost, and Broadcast
// with one message per node that has members. Membership is eventually
// consistent: a join on one node is in another's view one connection hop
// later (tens of microseconds on one host), and a node that has just come
// up sees the others' members once its connections are up and their syncs
// have arrived. Barrier closes that window where it matters: when it
// returns, every node connected at the call has applied everything this
// node sent before it, joins included (the chat's JOIN reply waits for it,
// so a room message sent after the reply reaches the new member).
//
// # Lifecycle and concurrency
//
// Join starts the heartbeat goroutine, the NATS writer, the direct-link
// listener and a reader and a writer per direct link, besides NATS's own
// (a caller reading its reply is the link's reader for that while);
// Leave, Close and Node.Stop (which calls Close) stop all of them and the
// embedded server. A Cluster's methods are safe for concurrent use. Stats
// exposes counters of messages and bytes in and out, batches, drops,
// stale batches, refused links and codec errors.
//
// # Tests
//
// The package's tests run real embedded NATS servers on random ports (no
// mocks): nodes in one process; a partition made by cutting routes and
// links through TCP proxies; node processes (the test binary re-executed,
// one node each) killed with SIGKILL (skipped with -short); and, as root,
// three node processes in three network namespaces joined by veth pairs on
// a bridge, one of them cut off with iptables and healed, killed while cut
// and started afresh (TestPartitionNetns, in the normal suite; it skips
// with a message where namespaces cannot be made; GOTP_PARTITION_ROUNDS=n
// repeats its cut and heal n times). The wire decoders have fuzz targets:
// go test -fuzz FuzzDecodeBatch ./cluster. The C1/C2 benchmarks across
// processes and the Erlang script that measures the same in the same
// sitting are described in docs/bench/cluster.md.
//
// # Differences from Erlang distribution
//
//   - Nodes find each other through NATS (no epmd) and connect to every node
//     they hear, not on first use; a node that cannot be reached is simply
//     not connected (there is no auto-connect on send).
//   - Without a direct link (Options.NoDirect, or where no link can be
//     made) a node whose process died is seen down only at the heartbeat
//     timeout, as a partition is: NATS does not tell a node that another's
//     connection closed.
//   - Messages cross nodes only as registered types (there is no term
//     format for arbitrary Go values).
//   - Names registers only processes of the calling node, and its rule for a
//     name held twice is fixed (the earlier registration keeps it), where
//     global takes a resolve function.
//   - There is no hidden-node or connect_all option: every node connects to
//     every node it hears.
//   - A call run on the link's goroutine has one known ordering window, of
//     nanoseconds: the socket is freed for self-reading callers just before
//     the server is claimed, so if a message to the same server is read in
//     that instant and the server is then found busy, the call is queued
//     behind that later message. For one sender this can happen only after
//     its call was abandoned (timed out or cancelled) and it sent again;
//     Erlang keeps that order.
package cluster
