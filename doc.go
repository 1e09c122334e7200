// Package gotp is the runtime of gotp: Erlang/OTP's processes, for Go.
//
// A [Node] owns processes. A process has a [PID], an unbounded mailbox and
// an exit reason; it fails alone, and the processes that care learn of it
// through links and monitors:
//
//	type request struct {
//		from gotp.PID
//		text string
//	}
//
//	n := gotp.NewNode(gotp.Options{Name: "demo"})
//	defer n.Stop(context.Background())
//
//	echo, _ := n.Spawn(func(p *gotp.Process) error {
//		for {
//			msg, err := p.Receive(p.Context())
//			if err != nil {
//				return err
//			}
//			req := msg.(request)
//			p.Send(req.from, "echo: "+req.text)
//		}
//	})
//
//	// A second process asks, and waits for the answer.
//	n.Spawn(func(p *gotp.Process) error {
//		p.Send(echo, request{from: p.Self(), text: "hello"})
//		reply, err := p.Receive(p.Context())
//		fmt.Println(reply, err) // echo: hello <nil>
//		return err
//	})
//
// The package's Example runs this program and checks what it prints.
//
// # Processes
//
// A process is either a function with its own goroutine ([Node.Spawn]),
// which receives in a loop with [Process.Receive], or a handler
// ([Node.SpawnHandler]) that runs only while it has messages: an idle
// handler-mode process holds no goroutine, which is how a gen_server (package
// server) waits for work at the cost of a few hundred bytes. A handler-mode
// process may instead keep one goroutine for life ([Resident]), and may let
// a sender run its handler on the sender's goroutine while it is idle
// ([AllowInline], [Node.RunInline]: how a call to an idle server can cost
// no goroutine switch). A handler-mode process may hibernate
// ([Process.Hibernate]): until its next message it then keeps not even the
// buffers of its mailbox.
//
// # Failure
//
// A process ends with a reason: nil is normal, anything else is an error,
// a panic becomes a [*PanicError], and a runtime.Goexit (t.FailNow in a
// test) in the process's code becomes [ErrGoexit]. [ErrShutdown], [ErrKill],
// [ErrKilled], [ErrNoProc] and [ErrNoConnection] are Erlang's special
// reasons. When a process ends, every linked process receives an exit
// signal with its reason and dies too if the reason is abnormal, unless it
// traps exits, in which case it receives an [Exit] message. Every monitor
// delivers one [Down] message. [Node.Exit] sends an exit signal; ErrKill
// cannot be trapped.
//
// A process whose own code ends it abnormally logs a crash report first,
// at level Error on the node's logger ([Options.Logger]): which process,
// its name and behaviour, the reason, the stack of a panic, the message a
// handler was handling. Normal exits, ErrShutdown and exits caused by an
// exit signal are not reported; a normal exit costs nothing for it.
//
// # Messages
//
// Send never blocks and never fails: a message to a process that is gone is
// dropped. Messages from one sender to one receiver arrive in the order they
// were sent; there is no order across senders. To send to many processes
// at once (a broadcast), use a [Batch]: it wakes the idle handler-mode
// processes together, on a few goroutines, instead of starting one
// goroutine for each.
//
// # Mailbox length, limits and flow control
//
// Mailboxes are unbounded by default, as Erlang's are: a sender never
// waits, so a process that receives faster than it handles grows its
// mailbox. [Process.MailboxLen] (and [Node.MailboxLen]) reads the length
// cheaply, from any goroutine, without allocating.
//
// A process may opt in to a limit ([MailboxLimit] at spawn, or
// [Process.SetMailboxLimit] later) with an explicit [Overflow] policy for
// a message that finds the mailbox full: [OverflowKill] kills the process
// with [ErrMailboxOverflow], which it cannot trap and which its links,
// monitors and supervisor see (Erlang's max_heap_size with kill);
// [OverflowDrop] drops the new message and counts it (ProcessInfo.Dropped,
// [Node.MailboxOverflows], and the observer's page and metrics). Nothing is
// dropped silently. The signals of links and monitors are never limited.
//
// A limit is a safety net, not flow control: it acts after the fact, on
// whoever happens to send next. A producer that must not outrun a process
// (a goroutine reading a socket for it, say) holds credits instead: it
// takes one before each message it sends and the process gives it back
// once it has handled the message, so that at most a known number of
// messages wait and the producer stops reading meanwhile (the operating
// system then pushes back on the far end). With a buffered channel as
// the credits:
//
//	credits := make(chan struct{}, 8) // at most 8 commands wait
//	go func() { // the reader
//		for sc.Scan() {
//			credits <- struct{}{} // waits while 8 are queued: no more reading
//			n.Send(conn, command(sc.Text()))
//		}
//	}()
//	// ...and in conn's handler, once a command is answered:
//	<-credits
//
// The mailbox length is the gauge of such a design, not its mechanism:
// it says how far behind a process is (for the observer, a metric, a
// test), but a producer that polled it would spin or sleep, since nothing
// wakes it when the length falls; a credit is handed back at the moment
// the room is made.
//
// The chat's connection process (examples/chat, conn.go and session.go)
// is a full example: its reader takes one of 8 credits per command it
// parses and stops reading the socket while none is left; the process
// returns the credit once the command is answered, defers commands while
// its client is slow to read their replies, disconnects a client that
// cannot keep up with the messages pushed to it, and keeps a mailbox
// limit with [OverflowKill] as the safety net under all this. Its tests
// read [Node.MailboxLen] to check that a client pipelining commands never
// has more than a handful waiting in the server.
//
// # Concurrency
//
// A Node is safe for concurrent use. The methods of a [Process] that act for
// it must be called by the process itself; see Process. There is no
// package-level state: run as many nodes in one program as you like.
package gotp
