// Package chat is gotp's reference application: a chat service built as an
// Erlang/OTP application would be, a supervision tree in which every piece of
// live state has one owner.
//
//	n := gotp.NewNode(gotp.Options{Name: "chat"})
//	svc, err := chat.Start(ctx, n, chat.Config{DataDir: "data", TCPAddr: ":4000", HTTPAddr: ":8080"})
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
// # Clusters
//
// With Config.Cluster the chat's pg scope spans the cluster: users on
// other nodes are found through their group "user:<name>", rooms are groups
// "room:<name>" on every node, and a name accepted on two nodes at once is
// settled as soon as they learn of it (the node with the smaller name keeps
// it, as Erlang's global resolves clashes).
package chat
