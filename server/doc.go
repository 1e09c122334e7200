// Package server is gotp's gen_server: a process that keeps state and
// answers calls, casts and plain messages one at a time.
//
//	type counter struct {
//		server.Defaults
//		n int
//	}
//
//	func (c *counter) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
//		c.n += req.(int)
//		return c.n, nil
//	}
//
//	pid, err := server.Start(ctx, node, &counter{})
//	total, err := server.Call[int](ctx, node, pid, 5)
//
// A server is a handler-mode process (gotp.Node.SpawnHandler): while its
// mailbox is empty it holds no goroutine, so an idle server costs a few
// hundred bytes. Start runs Init before returning; the server may be named
// locally (Named) or through a name service such as a unique registry
// (WithVia), and a second start under a taken name fails with
// *AlreadyStartedError naming the running server.
//
// # Calls
//
// Call waits for the reply until its context's deadline (DefaultCallTimeout
// when there is none) and tells apart a server that is not running
// (gotp.ErrNoProc), one that died during the call (its exit reason) and one
// that did not answer in time (the context's error), all as *CallError. A
// reply that arrives after the caller gave up is dropped. HandleCall may
// return NoReply and answer later with Reply, from any goroutine.
//
// # Stopping
//
// A server stops when a callback returns an error (its exit reason), when
// Stop asks it to, or when it traps exits and its parent (or the node) sends
// it an exit signal; Terminate runs in each of these cases, before the
// process is dead. Like Erlang's, it does not run when the server is killed
// or when an exit signal ends a server that does not trap exits.
//
// # Crash reports
//
// A server that stops with an abnormal reason (a callback's error or
// panic, or Stop with an error) is reported by the runtime as any process
// is (see gotp.Options.Logger), with the server's part added:
// last_message (the request, cast or message it was handling, bounded),
// last_message_kind (call, cast, info, stop or exit), caller (for a call
// from another node) and state, the behaviour as StateFormatter chooses
// to show it (Erlang's format_status) or, by default, its own value,
// bounded by StateLimit. FormatState asks a running server for the same
// rendering. A stop with nil or gotp.ErrShutdown is not reported.
//
// # Concurrency
//
// Start, Call, Cast, Stop and Reply are safe from any goroutine. The
// callbacks of one server never run concurrently.
package server
