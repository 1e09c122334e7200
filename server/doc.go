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
// # Starting
//
// Init runs on the caller's goroutine, as the new server. When Start's
// context has a deadline, Init is bounded by it even if it ignores its
// context (OTP's start timeout): Init then runs on a goroutine of its own,
// and if it has not returned by the deadline Start fails with
// ErrStartTimeout and the half-started server is killed (its parent,
// for StartLink, unlinked first). A context without a deadline leaves Init
// unbounded, as OTP's default, infinity.
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
// Inside a process, pass the process as Call's caller (server.Call[R](ctx,
// p, to, req)); from any other goroutine, the node. A process that calls
// itself then fails at once with ErrCallingSelf, as OTP's calling_self,
// instead of at its deadline. And a server whose call would close a cycle
// of servers each waiting for the next, the most common deadlock of
// actor programs, fails at once with a *CallCycleError naming them
// (ErrCallCycle): a direct cycle (A calls B while B calls A), a longer
// one, one through servers that run inline (InlineCalls), and one through
// a server waiting in StartLink for the Init of a server that calls it
// back. The call that closes the cycle fails; the servers on it go on, and
// the calls they wait for are answered once the failed one's callback
// returns. Two calls that close one cycle at the same moment may both
// fail. The detection sees calls between servers of one node whose caller
// is the calling server (the supervisor package's functions take their
// caller the same way): not a call made with the node, not a wait for a
// deferred reply (NoReply: it may come from any goroutine), not a call to
// another node, and not a wait outside Call (a channel, a lock). Its cost falls on calls made by
// servers (a few atomic operations and a lookup per call); a call made
// with the node pays nothing for it.
//
// # Timeouts and hibernation
//
// A callback may call SetTimeout(p, d): if no message arrives within d
// after it returns, HandleInfo receives Timeout{} (OTP's {reply, R, S, T}
// and {noreply, S, T}); any message cancels it. A callback may also call
// p.Hibernate(): once its mailbox is empty the server lets go of the
// buffers it keeps for its next burst of messages, and costs only its own
// structs until a message arrives (OTP's hibernate, as far as Go allows:
// an idle server holds no goroutine anyway).
//
// # Introspection
//
// GetState and ReplaceState read and replace a running server's state,
// its Behaviour, as the server itself between two callbacks, through its
// mailbox (OTP's sys:get_state and sys:replace_state); FormatState renders
// it for people (see Crash reports). They ask local servers only.
//
// # Stopping
//
// A server stops when a callback returns an error (its exit reason), when
// Stop asks it to, or when it traps exits and its parent (or the node) sends
// it an exit signal; Terminate runs in each of these cases, before the
// process is dead. Like Erlang's, it does not run when the server is killed
// or when an exit signal ends a server that does not trap exits. A panic
// in Terminate becomes the server's exit reason, a *gotp.PanicError,
// whatever it was stopping with: its links and monitors see the crash, as
// in OTP.
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
// # Differences from OTP's gen_server
//
// The package follows OTP's gen_server. Where it differs, it is on
// purpose:
//
//   - The state is the Behaviour value the callbacks are methods of, and
//     callbacks return (reply, error) rather than tuples: a non-nil error
//     stops the server with it as reason, StopReason(nil) stops it
//     normally, and an error value as reply is what Call returns as its
//     error.
//   - Timeouts and hibernation are asked for with SetTimeout and
//     p.Hibernate during a callback, not in its return value, and both may
//     be asked at once. Hibernation drops the mailbox's buffers; there is
//     no per-process garbage collection in Go to run, and no call stack to
//     discard. Introspection (GetState, ReplaceState, FormatState) neither
//     cancels nor restarts a running timeout, where OTP's system messages
//     restart it.
//   - Start's timeout is ctx's deadline. An Init that ignores it cannot be
//     stopped (Go cannot kill a goroutine): the server is killed and Start
//     returns, but Init's goroutine runs until Init returns.
//   - Call takes its caller explicitly (a process or the node). A process
//     that calls itself gets ErrCallingSelf as the call's error, where OTP
//     exits the caller; a call made with the node cannot know it is a
//     call to itself and waits for its deadline. Call cycles between
//     servers are detected (see Calls); OTP finds only calling_self.
//   - An unhandled call (Defaults.HandleCall) is answered with
//     ErrUnhandled and the server goes on; an unhandled cast or message is
//     logged and dropped.
//   - GetState returns the server's own value, not a copy: Go values are
//     not immutable (see GetState for how to read it safely). GetState,
//     ReplaceState and FormatState reach local servers only; OTP's sys
//     works across nodes.
//   - There is no handle_continue, code_change, or sys:suspend.
//
// # Concurrency
//
// Start, Call, Cast, Stop and Reply are safe from any goroutine. The
// callbacks of one server never run concurrently.
package server
