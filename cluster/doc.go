// Package cluster joins gotp nodes into one cluster over NATS: PIDs of
// other nodes work wherever local ones do (send, link, monitor, exit
// signals, server.Call/Cast/Stop), nodes see each other come and go, and
// pg scopes span the cluster.
//
//	type Greet struct{ Name string } // a message that crosses nodes
//
//	codec := cluster.NewCodec()
//	_ = cluster.Register[Greet](codec, "myapp.Greet") // the same name on every node
//
//	node := gotp.NewNode(gotp.Options{Name: "app-1"})
//	c, err := cluster.Join(ctx, node, cluster.Options{
//		RouteListen: "0.0.0.0:6222",
//		Peers:       []string{"nats-route://app-2:6222", "nats-route://app-3:6222"},
//		Token:       os.Getenv("CLUSTER_TOKEN"),
//		Codec:       codec,
//	})
//	// node.Send(remotePID, Greet{Name: "ana"})
//	// reply, err := server.Call[string](ctx, node, remotePID, Greet{Name: "ana"})
//	_ = c.Replicate(scope) // a pg scope started with pg.Start on every node
//
// Running the same program on three machines with each other's route URLs
// in Peers makes one cluster. The package's Example runs two nodes in one
// program; examples/cluster runs two OS processes.
//
// # Transport
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
// AuthFailed event the first time, and list it in AuthFailures.
//
// Subjects: gotp.<cluster>.node.<name> carries every signal for one node,
// gotp.<cluster>.hb the heartbeats. Signals from one node to another keep
// their order (one publisher, one subscriber), so a message sent before a
// process exits arrives before its Down. Frames for one node are batched:
// the sender appends each frame to that node's queue and a writer goroutine
// publishes everything queued since its last pass as one NATS message (at
// most max(Options.MaxMessageSize, 256 KiB), and within the NATS server's
// max_payload), so a busy sender pays NATS once per batch while an idle
// one sends at once.
//
// # Nodes and incarnations
//
// A node announces itself every HeartbeatInterval; a peer silent for
// HeartbeatTimeout is declared down, as is one that leaves (Leave,
// Node.Stop: peers learn it at once) or comes back as a new incarnation
// (a different creation; the newer start wins). A node that times a peer
// out tells it so, and the peer treats the node as lost in turn, as a
// dropped connection would in Erlang; both come back up with the next
// heartbeat if they can still talk. When a node is lost every
// monitor of its processes delivers a Down with gotp.ErrNoConnection,
// every link delivers the matching exit signal, calls waiting on it fail,
// and its pg members leave. A node that comes back from a partition with
// the same incarnation is up again (its processes lived on); PIDs of an
// earlier incarnation stay dead: messages to them are dropped, monitors
// and links answer gotp.ErrNoProc. Signals to a node that is not connected
// are dropped, and monitors and links of its processes answer
// gotp.ErrNoConnection at once. Subscribe delivers NodeUp/NodeDown events
// (buffered to SubscriptionBuffer, later events dropped and counted when
// full); Nodes lists the connected nodes; WaitFor waits for some.
// SendNamed sends to a name registered on another node (Erlang's
// {Name, Node} ! Msg); the registry itself stays local.
//
// Queues: at the sender each peer's queue holds at most
// Options.MaxPending bytes (beyond that messages are dropped and counted);
// at the receiver NATS holds what the node has not decoded yet, without a
// limit, as a mailbox does.
//
// Join refuses a name already used by a node it can reach directly
// (ErrNameTaken); a duplicate behind a partition or not yet routed is
// only logged when its heartbeats are seen, and its messages ignored.
//
// # Messages and the codec
//
// Messages cross nodes through a Codec over an explicit set of Go types
// (CBOR, github.com/fxamacker/cbor/v2). Register every message type, on
// every node, under the same name. Sending a value of an unregistered type
// — or a value holding one in an interface-typed field — is refused at
// the sender with *UnregisteredTypeError: Cluster.Send returns it; the
// node's own Send, which never fails, drops the message, counts it in
// Stats.EncodeErrors and logs once per type. A receiving node only decodes
// into registered types. Registered named types keep their type inside
// fields of type any; plain numbers inside such fields come back as CBOR's
// int64/uint64/float64. Every message is bounded by MaxMessageSize at both
// ends (ErrTooLarge at the sender).
//
// server.Call and server.Cast to a remote server go through the node's
// Send too: a request the codec refuses is dropped at the caller's node
// (counted, logged once per type), so the call fails only at its
// deadline. Check doubtful values first with Codec.Check.
//
// Exit reasons and error replies travel as errors: gotp's sentinels (nil,
// ErrShutdown, ErrKill, ErrKilled, ErrNoProc, ErrNoConnection) arrive as
// themselves, sentinels registered with Codec.RegisterError too; any other
// error arrives as *RemoteError with its message, wrapping the registered
// sentinels it wrapped, so errors.Is keeps working. A *gotp.PanicError
// keeps its value's text and its stack.
//
// # Process groups
//
// Replicate plugs a pg scope into the cluster through pg's Replicator seam:
// a full sync when a peer appears (or the scope is replicated later),
// deltas for every local join and leave on the same ordered stream, the
// peer's members dropped when it is lost, and Broadcast with one NATS
// message per node that has members.
//
// # Lifecycle and concurrency
//
// Join starts two goroutines (the writer and the heartbeat loop) besides
// NATS's own; Leave, Close and Node.Stop (which calls Close) stop all of
// them and the embedded server. A Cluster's methods are safe for
// concurrent use. Stats exposes counters of messages and bytes in and out,
// batches, drops and codec errors.
//
// # Tests
//
// The package's tests run real embedded NATS servers on random ports (no
// mocks): three nodes in one process, a partition made by cutting a node's
// routes through a TCP proxy, and node processes re-executed from the test
// binary and killed with SIGKILL (skipped with -short). The wire decoder
// has a fuzz target: go test -fuzz FuzzDecodeBatch ./cluster.
package cluster
