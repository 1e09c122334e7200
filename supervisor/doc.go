// Package supervisor is gotp's supervisor: a process that starts children,
// watches them, restarts them by a strategy, and gives up (escalating to
// its own parent) when they fail too often.
//
//	root, err := supervisor.Start(ctx, node, supervisor.Spec{
//		Strategy: supervisor.OneForOne,
//		Children: []supervisor.ChildSpec{
//			supervisor.Server("online", func() server.Behaviour { return &online{} }, server.Named("online")),
//			supervisor.DynamicSpec[net.Conn]{Start: startConn, Restart: supervisor.Temporary}.
//				ChildSpec("conns", server.Named("conns")),
//		},
//	})
//	pid, err := supervisor.StartDynamicChild(ctx, node, gotp.Name("conns"), conn)
//
// # Supervisors are servers
//
// A supervisor is a server (package server) that traps exits, so it can be
// named (server.Named, server.WithVia), linked, monitored, called, and be
// the child of another supervisor (Spec.ChildSpec, DynamicSpec.ChildSpec).
// Every child is started linked to it by its ChildSpec.Start; the
// supervisor learns of its exit from the link. Unlike most servers, a
// supervisor runs on a goroutine of its own (server.Dedicated): its work
// (starting and stopping children) runs deep, and a goroutine made per
// message would regrow its stack each time. Calls to an idle supervisor
// (start a child, which children, ...) run on the caller's goroutine
// (server.InlineCalls), as the supervisor process: like OTP's supervisor
// calls, they wait for the supervisor however long it takes rather than
// ending at a deadline; a child's start still gets the caller's context.
//
// # Strategies, restart types and intensity
//
// OneForOne restarts the child that exited; OneForAll stops the others in
// reverse start order and restarts all in start order; RestForOne does the
// same with the children started after the one that exited. A dynamic
// supervisor (DynamicSpec, OTP's simple_one_for_one) has children of one
// template started on demand, each with its own argument, restarted one
// for one. Permanent children are always restarted, Transient ones only
// after an abnormal exit (see gotp.IsNormal), Temporary ones never (their
// spec is dropped).
//
// Each restart counts against the intensity: more than Intensity restarts
// within Period (OTP's defaults: 1 in 5 s) and the supervisor stops every
// child and exits with ErrMaxIntensity, which wraps gotp.ErrShutdown as
// OTP's supervisor exits with shutdown. Its parent sees that exit and
// applies its own strategy: failures that repeat climb the tree. The check
// keeps the times of the last Intensity restarts in a ring, so its cost
// does not grow with the number of recent restarts. A restart whose start
// fails is retried through the supervisor's mailbox (the child shows as
// ChildRestarting meanwhile), each attempt counting as a restart.
//
// # Significant children and auto shutdown
//
// A supervisor may end by itself when the work of its children is done
// (OTP 24's auto_shutdown). Children marked Significant (Transient or
// Temporary only) count: with AnySignificant the supervisor shuts down
// when one of them ends by itself and is not restarted (a Transient one
// that exits normally, a Temporary one that exits for any reason); with
// AllSignificant, when the last running one does. It then stops its other
// children as when it is told to exit, and exits with ErrAutoShutdown, a
// gotp.ErrShutdown: a parent restarts it only if it is Permanent, and a
// supervisor that is itself a significant child passes the shutdown up.
// A child stopped by TerminateChild, or by a restart strategy, is not
// counted. The default, Never, allows no significant child.
//
// # Starting and stopping
//
// Start starts the children in order; if one fails, those already started
// are stopped in reverse order and Start fails with *ChildStartError. A
// child is stopped as in OTP: monitored, unlinked, sent gotp.ErrShutdown
// (gotp.ErrKill for BrutalKill), and killed if it has not exited when its
// Shutdown is up (DefaultShutdown for workers, Infinity for supervisors).
// When its parent or the node (Node.Stop) tells a supervisor to exit, it
// stops its static children in reverse start order, each within its
// shutdown, and a dynamic supervisor stops all its children at once.
// Node.Stop signals processes oldest first and waits for each process that
// traps exits, so a tree stops top-down.
//
// # Management and introspection
//
// StartChild, TerminateChild, RestartChild, DeleteChild, WhichChildren,
// WhichChild, GetChildSpec and CountChildren are calls to the supervisor,
// with OTP's errors as typed values (ErrRunning, ErrRestarting,
// ErrNotFound, ErrAlreadyPresent, *AlreadyStartedError);
// StartDynamicChild, TerminateDynamicChild and WhichDynamicChild serve
// dynamic supervisors, whose children are named by PID (a child whose
// restart is being retried by the PID of its last process, so that it
// can still be found and terminated). A start function may return
// information about its child beside the PID (ChildSpec.StartInfo, OTP's
// {ok, Pid, Info}); WhichChildren reports the latest. Each of these
// functions takes its caller as server.Call does: the node, or, inside a
// process, the process itself, which makes a call to a supervisor that
// waits for the caller fail at once with server.ErrCallCycle (the Init of
// one of its children calling it, for example) rather than at its
// deadline. Inspect and Tree read a supervisor's children and
// its counts of restarts and failed starts (per child and in total)
// without a call, from what it publishes in its process dictionary, for an
// observer.
//
// Every abnormal child exit (and every exit of a Permanent child) is
// logged at error level through the node's logger with the supervisor,
// the child id, its PID and the reason; every restart at info level; every
// failed start and every give-up at error level.
//
// # Differences from OTP's supervisor
//
// The package follows OTP's supervisor. Where it differs, it is on
// purpose:
//
//   - Child specs are Go values: ids are strings, a child starts through a
//     Go function (StartFunc) rather than an {M, F, A}, and there is no
//     modules field (Go has no code upgrade).
//   - A dynamic supervisor (simple_one_for_one) is declared with its own
//     type, DynamicSpec[A], whose children take a typed argument A, and
//     served by its own functions (StartDynamicChild,
//     TerminateDynamicChild, WhichDynamicChild) rather than by start_child
//     and terminate_child with a pid; GetChildSpec is for static
//     supervisors only.
//   - The information a StartInfo function returns is kept with the child
//     and reported by WhichChildren, WhichChild and Inspect; OTP returns it
//     to the caller of start_child and forgets it. StartChild and
//     RestartChild return the PID only.
//   - WhichChildren names a dynamic child whose restart is being retried
//     by the PID of its last process, with State ChildRestarting, where
//     OTP shows the atom restarting; a static one has the zero PID.
//   - CountChildren's Active counts the children the supervisor knows to
//     run; OTP also asks the runtime whether each static child is alive,
//     so a child that has just died, whose exit the supervisor has not
//     handled yet, counts here and not there.
//   - A supervisor that gives up or shuts itself down exits with
//     ErrMaxIntensity or ErrAutoShutdown, which wrap gotp.ErrShutdown
//     (OTP's shutdown) so that either can be told apart.
//   - Period is a time.Duration (OTP: seconds).
//   - Management calls to an idle supervisor run on the caller's goroutine
//     and wait however long the supervisor takes, as OTP's calls to a
//     supervisor use the infinity timeout.
//
// # Concurrency
//
// Every function of the package is safe from any goroutine. The management
// functions block until the supervisor answers or ctx ends; a
// supervisor handles one request, exit or restart at a time, and blocks
// while a child starts or stops.
//
// # Tests
//
// The chaos test runs 300 kill rounds with -short and 2,000 without;
// GOTP_CHAOS_KILLS=n sets another number and GOTP_CHAOS_SEED=s replays a
// logged seed. The whole suite takes a few seconds with -race.
package supervisor
