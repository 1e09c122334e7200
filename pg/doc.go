// Package pg is gotp's process groups (Wippy's pg module, on the model
// of Erlang's pg): processes join named groups, and anyone may list a
// group's members, broadcast to them, or watch them come and go.
//
//	scope, err := pg.Start(ctx, node, "app:pg", pg.Options{})
//
//	// In a process p:
//	group, err := scope.Open(p) // or pg.Open(ctx, p, "app:pg")
//	defer group.Release()
//	err = group.Join("workers")
//	err = group.Broadcast("workers", "task", Task{ID: 42}) // each member receives a pg.Message
//	sub, members, err := group.Monitor("workers")
//	for ev := range sub.C() { // pg.Event{Kind: pg.MemberJoined, Group: "workers", PIDs: ...}
//	}
//
// # Scopes and instances
//
// A group lives in a [Scope], an independent namespace started with [Start]
// or [StartLink] (a process registered under [ProcessName](id); under a
// supervisor use [ChildSpec]). A process opens the scope and gets an [Instance]
// bound to it; every operation of the instance acts for that process.
// [Instance.Release] frees the instance at once and is idempotent; after it
// every operation fails with [ErrReleased] and its subscriptions are
// closed. The instance is released when its process exits, too.
// Memberships belong to the process, not to the instance: Release leaves
// the process in its groups (another instance of it may leave them), and
// the process's exit ends them.
//
// # Membership
//
// A process may join a group several times and stays a member until it
// has left as many times; a process that exits leaves all its groups at
// once (the scope monitors each process that has a membership or an open
// instance, once). Join and Leave take one group or a batch: a batch join
// is all or nothing, a batch leave is best effort and fails with
// [*NotJoinedError] only when the process was in none of the groups.
// Members and WhichGroups see every node; LocalMembers and WhichLocalGroups
// only this one. A group exists while it has members: an unknown group has
// no members, and is not an error.
//
// # Broadcast
//
// Broadcast sends a [Message] carrying the scope, group, topic, payload and
// sender to every member process once, however many times it joined;
// BroadcastLocal only to this node's members. Sends are asynchronous
// (gotp.Node.Send): a broadcast never waits for a member.
//
// # Monitor and events
//
// [Instance.Monitor] returns a [Subscription] to a group's events with a
// snapshot of its members; [Instance.Events] a subscription to every group
// with a snapshot group → members. Snapshot and subscription are atomic:
// each change of membership publishes its event under the same lock the
// snapshot is taken with, so the snapshot plus the events that follow
// reconstruct the membership exactly. Events arrive on a channel buffered
// to [DefaultBuffer] (64); the scope never waits for a subscriber: when the
// channel is full further events of that subscription are dropped and
// counted ([Subscription.Dropped]). [Subscription.Close] unsubscribes and
// discards what is queued; [Subscription.CloseFlush] unsubscribes and keeps
// the queued events for the consumer to drain before it sees the channel
// closed.
//
// # Policy
//
// Every operation asks the scope's [Policy] first, with Wippy's
// permission names (pg.open on the scope id; pg.join, pg.leave,
// pg.get_members, pg.get_local_members, pg.broadcast, pg.broadcast_local,
// pg.monitor on the group; pg.which_groups, pg.which_local_groups,
// pg.events on the scope id) and the acting process. A refused operation
// fails with [*DeniedError] and changes nothing. The default allows all.
//
// # Errors
//
// Errors are values: [ErrReleased], [ErrScopeClosed], [ErrNoScope],
// [ErrInvalid], and the typed [*DeniedError] (matches [ErrDenied]) and
// [*NotJoinedError] (matches [ErrNotJoined]); test them with errors.Is and
// errors.As.
//
// # Clusters
//
// A scope keeps the members of each other node apart from its own. The
// cluster package connects scopes of the same id across nodes through the
// [Replicator] interface (told of every local join and leave, in order, and
// asked to carry broadcasts, one message per node) and the [Gateway] it
// gets from [Scope.Attach] (to apply peers' joins, leaves, full syncs and
// node losses, and to deliver broadcasts that arrive). On one node none of
// this is needed.
//
// # Concurrency and cost
//
// Scopes, instances and subscriptions are safe for concurrent use. The
// membership tables live beside the scope's process, not in its mailbox:
// local members are split into 16 stripes by process, each with its own
// lock, under a scope-wide read-write lock that joins and leaves hold
// shared. A join is a few map operations whose cost does not grow with the
// group's size, and joins of different processes, even to one group,
// rarely wait for each other. Monitor, Events, creating or removing a
// group, and remote changes hold the scope-wide lock exclusively, which is
// what makes their snapshots atomic. Broadcasts reuse a cached list of a
// group's distinct local members until the membership changes. WhichGroups
// and WhichLocalGroups reuse their last answer (each caller gets a copy)
// until a group gains its first member or loses its last. pg starts
// no goroutines of its own. Policies are called without any lock held;
// nothing else of the user's runs inside the package.
//
// # Differences from Erlang's pg and Wippy's
//
// pg follows Wippy's module, which stands on Erlang's pg. Where it differs
// from one of them, it is on purpose:
//
//   - Group names and topics are strings (Erlang: any term). An empty group
//     name, an empty topic, an empty scope id or a missing process is an
//     [ErrInvalid] error, as Wippy's "missing or empty argument".
//   - An [Instance] acts for the process that opened it: a process joins
//     and leaves for itself, as in Wippy (Erlang's join and leave also take
//     other local processes).
//   - A broadcast carries one payload value (Wippy: any number) in a
//     [Message] that lands in the member's mailbox; there is no per-topic
//     listener as Wippy's process.listen.
//   - A full subscription drops further events and counts them
//     ([Subscription.Dropped]); Wippy's current documentation says it
//     stalls and keeps them in the mailbox. Erlang's monitor sends messages
//     to an unbounded mailbox instead.
//   - Erlang's pg has no broadcast, no policy and no release: those are
//     Wippy's, and follow it.
//
// # Tests
//
// The package's tests run in well under a minute with -race. Set
// PG_STRESS=1 to run the snapshot-atomicity test with many more rounds.
package pg
