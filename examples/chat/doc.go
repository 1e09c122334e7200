// Package chat is gotp's reference application: a chat service built as an
// Erlang/OTP application would be, a supervision tree in which every piece of
// live state has one owner.
//
//	n := gotp.NewNode(gotp.Options{Name: "chat"})
//	svc, err := chat.Start(ctx, n, chat.Config{DataDir: "data", TCPAddr: "127.0.0.1:4000", HTTPAddr: "127.0.0.1:8080"})
//	...
//	svc.Stop(ctx)
//	n.Stop(ctx)
//
// # The tree
//
//	chat.root          supervisor, one_for_one, intensity 3 in 5 s
//	├── online         gen_server, permanent: the unique registry of this node's users and the pg scope "chat"
//	├── history        gen_server, permanent: owns the SQLite history store (where OTP would use a DETS table)
//	└── connections    dynamic supervisor: one temporary process per connected client
//
// Every piece of live state has one owner and one way to recover: a
// connection that crashes is not restarted (its user is gone); the online
// registry restarts empty and every connection registers its user again;
// the history owner restarts and reopens its file intact; a failure that
// repeats beyond the root's intensity ends the service (Service.Done,
// Service.Err), and cmd/chat exits 1.
//
// # The protocol
//
// Commands and replies are Go types first (Connect, Send, History, Join,
// Leave, Say, Who, Help, Quit; OK, Joined, Sent, HistoryReply, Online,
// HelpReply, Bye, Error, and the pushed Msg and RoomMsg), then two wire
// forms: one UTF-8 line per command over TCP (ParseLine, FormatReply) and
// JSON over a WebSocket (ParseJSON, FormatJSON). Every command from a
// client ends in exactly one reply; bad input gets a *ProtocolError and an
// ERROR reply, and never affects more than its own connection. HELP works
// before CONNECT; SAY to a room the user has not joined is ERROR
// not_joined, so a mistyped room name is not a message to nobody.
//
// Messages carry the time the sender's node accepted them (in the JSON
// form; the line protocol keeps its lines as they were). Room messages
// are kept in the history file like direct ones, and a JOIN over the
// WebSocket answers with the room's latest RoomHistoryLimit messages kept
// on that node: those said there, and those its users received from other
// nodes. The web page (GET /) also reads GET /api/online, the users and
// rooms of the whole chat (a Directory), so that a visitor sees them
// before connecting.
//
// # Limits
//
// Every connection is bounded, and a client that misbehaves affects no one
// else (the figures are Config's defaults):
//
//   - Input: a connection reads at most MaxPending (8) commands ahead of
//     its replies; then its reader stops reading the socket, and TCP's
//     flow control holds the client back. Nothing queues in the server
//     for a client that pipelines. The reader is flow-controlled by
//     credits (see gotp's package doc): it takes one of MaxPending slots
//     before it sends a parsed command to the connection's process, and
//     the process frees the slot once the command is answered, so the
//     process's mailbox holds at most MaxPending commands (plus the
//     messages pushed to its user, bounded by the output rule below).
//   - Output: replies wait for a client that reads slowly, up to 32 KiB;
//     meanwhile its commands wait too (and so, through the rule above, its
//     socket). Messages pushed to it by others (MSG, ROOM) may wait up to
//     Config.MaxOutput (256 KiB); one more ends the connection with a last
//     ERROR slow_consumer line (a WebSocket closes with reason
//     slow_consumer), and the user goes offline as after QUIT. Its process
//     never waits for the client: a writer goroutine of the connection's
//     own does, and only while there is something to write. Beyond what
//     the connection holds, the kernel holds at most Config.SendBuffer
//     (64 KiB, doubled by Linux) in the socket's send buffer, instead of
//     the megabytes its autotuning gives a client that reads slowly.
//   - Time: a line or WebSocket message must arrive in full within
//     Config.ReadTimeout (30 s) of its first byte (ERROR read_timeout); a
//     client that reads nothing for Config.WriteTimeout (10 s) is
//     disconnected; Config.IdleTimeout, off by default, closes a silent
//     connection (ERROR idle_timeout). Lines are at most MaxLine (64 KiB),
//     HISTORY replies at most HistoryLimit messages and HistoryMaxBytes.
//   - Count: Config.MaxConnections (10,000) at once; one more is answered
//     ERROR unavailable (HTTP 503 on the WebSocket).
//   - Rate (flood control, on by default): a command costs one unit per
//     CostBytes (128) bytes of its text and of its replies, at least one;
//     a connection may spend Config.CommandBurst (400) units at once and
//     Config.CommandRate (200) a second. Beyond that its commands wait in
//     its reader, which stops reading the socket meanwhile; nothing is
//     refused, and each command that waited counts in
//     Service.ThrottledCommands. A user may send 200 short messages a
//     second; a client that pipelines WHO or HISTORY gets at most
//     25.6 KB/s of replies. A negative CommandRate turns it off.
//
// A connection process also carries a mailbox limit (65,536 messages, see
// gotp.MailboxLimit) that kills it if it ever falls that far behind: a
// safety net under the bounds above, which keep its mailbox short.
//
// # History
//
// SENT means the message is on disk: committed to the SQLite history (in
// WAL mode) and flushed to the disk (synchronous=FULL), so neither a crash
// of the process nor a power cut loses an acknowledged message.
// Config.HistorySync = SyncNormal (cmd/chat -history-sync normal) flushes
// at checkpoints instead: a crash of the process still loses nothing
// acknowledged, a power cut may lose what was acknowledged since the last
// checkpoint (they start at least 100 ms apart: the last 100 ms or more,
// more under load, whose checkpoints take longer). The history
// owner commits in groups: messages that arrive while a transaction is in
// flight go together in the next one, so a busy chat commits (and
// flushes) many messages per transaction and a quiet one commits each
// message at once.
// In a quiet chat (a transaction of a few messages) the owner also writes
// the committed message to its recipient and the SENT to its sender
// itself, recipient first, as a server without processes would; a busy
// chat's transactions are answered through the connections' processes,
// which write in parallel. (A departure from a strict process design, in
// which only a connection's process touches its socket: the outbox that
// both use is safe for it, and keeps each client's replies in order.)
// Every SEND ends in SENT or an ERROR, never silence: if the owner dies
// with a message in flight, the sender gets ERROR unavailable. An owner
// killed before its transaction starts none, and the message is not
// stored; but one killed while it commits finishes the transaction it is
// in, so the error means "not known to be stored": the message may still
// be in the history, as the work of a gen_server that dies after doing it
// and before replying. It is not pushed to its recipient as a MSG then
// (delivered late, it could come after the sender's next messages, which
// the restarted owner commits); the recipient sees it in HISTORY. A
// client that sends again after ERROR unavailable may store the message
// twice. Each sender's messages that got SENT reach their recipient in the
// order sent, across restarts of the owner. A test kills the owner 20
// times under clients that pipeline; GOTP_STRESS=1 makes it 300:
//
//	GOTP_STRESS=1 go test -race -run TestSendsEndUnderRepeatedOwnerKills -v ./examples/chat/
//
// # Clusters
//
// With Config.Cluster the chat's pg scope spans the cluster: rooms are
// groups "room:<name>" on every node and WHO lists the users of every
// node. A name is held by one user in the whole cluster: CONNECT registers
// it in the cluster-wide name space UsersSpace (cluster.Names), which also
// finds users of other nodes for SEND. Two parts of a partitioned cluster
// may each accept a name; when they meet, the earlier registration keeps
// it and the other connection gets ERROR name_taken and is closed.
//
// Membership (pg) is eventually consistent, so the chat makes its replies
// mean what a client expects: a CONNECT or JOIN reply comes once every
// node connected at that moment has applied the change (cluster.Barrier,
// one round trip to each node), so a message sent to the user or the room
// after the reply reaches them from any of those nodes. A node whose
// connection is not up yet (it has just started, or a partition is
// healing) learns the memberships when its connection comes up; until
// then its users' room messages do not reach the other node's members,
// nor theirs its.
package chat
