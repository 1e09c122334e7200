// Package inbox is a durable job queue in a SQL table that many service instances,
// each with many workers, share with the database as their only coordinator: SQLite
// (modernc.org/sqlite) as the embedded default, Postgres (pgx) to scale out. It
// follows RustStream's SQL broker (ruststream-sqlx): its claim forms, wake-up and
// clocks. Two things go beyond its claim of one row per free worker: the lease
// form prefetches up to 4 × Workers more rows while its handlers are fast
// (SubscribeOptions.Prefetch; NoPrefetch turns it off), every ack still committed
// before it is reported; and SubscribeOptions.AsyncCommit, off by default, gives
// up its flush-durable claims and acks for speed.
//
//	db, _ := inbox.OpenSQLite(ctx, "jobs.db")
//	q, _ := inbox.NewSQLite(db, inbox.Config[Invoice]{Table: "invoice_jobs"})
//	_ = q.CreateTable(ctx)
//
//	sub, _ := q.Subscribe(func(ctx context.Context, j inbox.Job[Invoice]) error {
//		return render(ctx, j.Payload) // nil acks; an error retries with backoff
//	}, inbox.SubscribeOptions{Workers: 4})
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
//	_, _ = q.Publish(ctx, Invoice{Number: 42}, nil)
//
// # Tables and jobs
//
// A [Queue] maps a typed job onto a table: [Queue.CreateTable] makes the default
// schema (see [DefaultColumns]), or [Columns] names the id, lock-deadline and payload
// columns of an existing table, plus optional ones. Rows other programs insert with
// plain SQL are jobs too. Payloads go through a [Codec] (JSON by default).
// [Queue.Publish], [Queue.PublishBatch], [Queue.PublishTx] (inside the caller's
// *sql.Tx or pgx.Tx: the job exists only if it commits) and [PublishOpts.RunAt]
// (delayed jobs) insert them.
//
// No row can wedge a queue. [Subscription.Start] refuses, with a [*ColumnError]
// naming the column, a table whose columns allow rows that no claim could take or
// settle: a lock deadline that allows NULL without [Columns.LockedUntilNullable]; an
// id that allows NULL, or (SQLite) is not the INTEGER PRIMARY KEY; or (Postgres)
// columns whose values the inbox cannot read: an id or attempts column that is not
// an integer type, a payload that is not bytea, text, varchar, json or jsonb, a
// LastError column limited in length. What outside writers may still leave is read
// safely: a NULL attempts count is read as 0, counts saturate at 32767 instead of
// overflowing, and on SQLite (where any column holds any type) attempts are cast to
// integers and payloads to bytes. Error messages are stored as valid UTF-8, at most
// 4 KiB. A payload the codec cannot decode is dead-lettered (see Outcomes); a
// claimed row that still could not be read is skipped and reported (Health.BadRows)
// while the rest of its claim proceeds.
//
// # Schema versions
//
// The default schema is versioned ([SchemaVersion]). [Migrate] (and CreateTable,
// which calls it, and `go run github.com/gotp/gotp/cmd/gotp inbox migrate -db ...
// -table ...`) creates the table at the latest version or upgrades an older one in
// place, every step and the version record in one transaction, recorded in the
// table gotp_schema. A table made before versions were recorded is version 0. Run it
// after upgrading gotp: Start refuses a table missing a column of DefaultColumns
// with a [*StatementError]. Tables mapped with [Columns] are the caller's own.
//
// # Cancel and snooze
//
// [Queue.Cancel] cancels a job by id, ready, delayed or in work: the row is kept,
// cancelled (Stats.Cancelled), never claimed again until [Queue.Requeue]; a handler
// in work has its context cancelled with [ErrJobCancelled] as the cause, here at
// once, in another instance within PollInterval (lease form) or the held
// connection's one-second heartbeat (lock forms), and its attempt is settled as
// [Cancelled] whatever it returns, never as a success. A handler returning
// [Snooze] runs again after a delay without counting the attempt.
//
// # Unique jobs
//
// [PublishOpts.Unique] makes a publish a no-op, returning the existing job's id
// ([Queue.PublishUnique] also says which happened), while a job with the same key
// is ready, delayed or in work, and, as [Unique.States] asks, dead, cancelled or
// processed; [Unique.Period] limits the key to a period. A unique index on the
// UniqueKey column enforces it (INSERT ... ON CONFLICT DO NOTHING), so concurrent
// publishes from any number of instances insert one job; a settlement that
// finishes a job outside its States frees the key in the same statement, and a
// requeue of that job (Requeue, RetryJob) takes it back if no other job has. A queue
// or table without the uniqueness columns or their index is a [*ColumnError].
//
// # Periodic jobs
//
// [Queue.Periodic] publishes jobs on five-field cron schedules ([ParseCron]; a
// schedule that does not parse, or never fires, is a [*CronError]), one job per
// tick across every instance: the instance whose compare-and-set advances the
// kind's last tick in the ticks table (TABLE_periodic, schema version 3) inserts
// the job in the same transaction. Missed ticks are coalesced into one job, for the
// latest; a kind seen for the first time starts at its next tick.
//
// # FIFO groups
//
// [PublishOpts.Group] puts a job in a FIFO group ([Columns.Group]; the default
// schema's fifo_group from version 4, mapped by [GroupColumns], which every
// instance of the table must use), as RustStream's group with fifo does: of the
// jobs of a group, at most one is in work at a time across every instance, and they
// are taken in id order, which is publish order for publishes that do not overlap.
// A job stays at the head of its group until it is finished (acked, dropped,
// dead-lettered or cancelled): a retry, with or without a delay, keeps the later
// jobs of its group waiting, while due jobs of other groups pass it; a delayed
// publish holds its group back until it runs. A claim whose holder died (a crash,
// an expired lease) is taken again before anything behind it. Dead letters do not
// block their group; a dead letter made ready again by Requeue goes back to the
// head.
//
// The database enforces it, in the claim statement: a row of a group is claimable
// only while no other unfinished row of its group is claimed (ClaimedAt set) and
// none comes before it, unless it is the claimed row itself, taken again. On
// SQLite writers are serialised, so the claim sees every other claim. On Postgres
// a unique index on the group WHERE ClaimedAt IS NOT NULL (the default schema has
// it; Start refuses a Group column without one, a [*ColumnError]) refuses a second
// claimed row of a group even to claims whose snapshots missed each other's (two
// publishes of a group whose transactions overlap may commit out of id order): the
// claim that loses is retried after a short pause. Groups work in every form: the lease form,
// RowLock (the head's row lock keeps the rest of its group back; a second worker
// that meets the index waits for the first's transaction) and AdvisoryLock (which
// commits ClaimedAt when it takes a row, so the group waits for it to be settled
// or for its session to end and the row to be taken again).
//
// A claim reads the claim index in order and tests each row it passes: a row of
// a group in work is passed over with one lookup in the set of groups in work,
// read once a claim, and any other with two index probes (its group's claimed
// row, on SQLite through the index of schema version 5, without which Start logs
// at WARN and claims read whole groups; the live row before it). Under a backlog
// such a claim tests many rows that wait behind their group's head: one that
// finds fewer rows than it asks for reads every ready row, and, on Postgres, one
// that runs beside another instance's claim tests every row behind the heads
// that claim is taking (locked, not yet committed, they look free): at 60,000
// jobs in 100 groups a Postgres drain ran at 2,000-12,000 jobs/s. So on
// Postgres, on a table with the index of schema version 6 (the groups'
// unfinished rows by group and id), a claim under a backlog reads heads
// instead: it walks that index, one probe a group, to each group's first
// unfinished row, and tests those rows, the groups' claimed rows and the first
// ready rows without a group (locked as it lists them), taking them in claim
// order: the rows a claim in order would take, at a cost that follows the
// number of groups, not the backlog. A fair claim ([Limits.Fair]) ranks those
// heads with each key's first ready rows without a group, as it ranks each
// key's first rows, and takes the rows a fair claim in order could take (keys
// level in turn go in a random order). Which way claims go is decided by a
// census of the table that each [Queue] takes at most once a second, from the
// claims of subscriptions without PerPartition (whose claims take each key's
// rows in order): heads while the table has at most 512 groups with unfinished
// rows and at least 16 ready rows a group; a census that fails sends claims
// back in order until one succeeds. A claim of heads looks for ready rows
// without a group only when the last census found one (the census then reads
// the table until it finds one: all of it, once a second, when there is none),
// so that under a backlog of groups such a row may wait up to a second longer
// for its claim. While some are ready, a claim reads the claim index up to the
// rows it asks for, and a fair claim reads each key's rows to as many without a
// group, or to the key's end: its cost then follows the backlog again (20,000
// jobs in 100 groups over 20 keys: 6-12 ms a fair claim, against 1.3-1.9 ms
// with no row without a group, and 107 ms in order). SQLite, whose claims
// cannot run beside each other, always claims in order (heads made its drains
// slower). Claims with PerPartition also read each key's rows in order, and
// under a backlog test every row behind its groups' heads: with 100 groups over
// 20 keys and 20,000 jobs a Postgres drain ran at 1,500-2,000 jobs/s (8,000
// with Fair instead, 14,000-20,000 with neither).
//
// On Postgres a claim of a queue with groups runs in a transaction of its own
// with JIT, bitmap scans and sequential scans off, and, for a claim in order,
// sorts (SET LOCAL): the planner, which cannot tell how many rows are heads of
// their group, otherwise tested every ready row and sorted them (280 ms a claim
// at 60,000 rows), compiled each run (20-40 ms), or read the set of groups in
// work through every entry of rows claimed since the last vacuum. In the lease
// form the settlement of a head claims with it, so that its group's next job
// starts at once rather than at the next poll (on Postgres the acks run first, in
// a statement of their own in the claim's transaction, so that the claim sees the
// groups they free).
//
// # Limits
//
// [SubscribeOptions.Limits] bound the jobs in work across every instance:
// [Limits.Concurrency] of the table, [Limits.PerPartition] of each partition key
// ([PublishOpts.Partition], [Columns.Partition]; the default schema's
// partition_key), and [Limits.Rate] claims per [Limits.Per], counted in the table
// TABLE_limits. [Limits.Fair] (implied by PerPartition) makes claims take turns
// between partition keys, so that a tenant's backlog cannot starve the others.
// They are enforced by the database alone, without one lock for the table's
// claims. On SQLite (one writer) a claim with Rate counts the window's starts in
// its write transaction; on Postgres a claimer with Rate reserves starts from the
// window's counter row in TABLE_limits (one short statement) and claims no more
// than its reserve. PerPartition is held by places on both: TABLE_limits holds up
// to PerPartition rows for each key, made when first taken; a claimer leases
// places of ready keys (on Postgres FOR UPDATE SKIP LOCKED; keys in turn, in key
// order from a random key, so that each key gets its turn), claims rows of a key
// only for the places it holds, and runs no more handlers of a key than its
// places, as with the slots below. A Concurrency
// limit does without counts too: TABLE_limits holds one slot row per handler that may
// run; each claimer takes free slots (on Postgres FOR UPDATE SKIP LOCKED) under a
// lease of its own, extended every third of a lease and given back when it needs
// fewer, and a handler runs
// only in a slot of its claimer, so at most Concurrency handlers run across every
// instance, and a crashed instance's slots come free when their lease ends (its
// handlers are stopped a tenth of a lease before, as a job's are). Claims then run
// as they do without limits, prefetch and all, but a claimer holds rows only for
// the slots it has (in a batch subscription, each job of a batch runs in a slot
// of its own). A limited subscription claims again with each settlement
// rather than wait for the poll, so that a limit that is reached costs no idle
// time. Limits need the lease form (the lock forms hold their rows in work in
// transactions and sessions that other instances cannot count: a [*ConfigError]),
// and every instance should give the same. A fair claim ranks the first rows of
// every key: on Postgres one index probe per key in the table, on SQLite every
// ready row, so fairness suits up to some hundreds of keys. PerPartition's take of
// places walks a window of the keys in turn, a few per place asked for, not every
// key with ready rows, and stops after a few more keys with ready rows than it
// takes places of (a drain of 2 jobs a key at 5,000 keys: 2,369 jobs/s on SQLite,
// as at 200 keys, and 806 on Postgres, 0.66x of its 200-key figure; walking every
// key it was 770 and 584). Over many keys of a few jobs each the limit costs
// about two fifths of a drain's throughput on SQLite and a quarter on Postgres
// (2,000 keys of 5 jobs: 0.56-0.58x of no limit on SQLite, 0.69-0.77x on
// Postgres): each key's places are taken, claimed for and given back (on
// Postgres the take rides with the claim, in one round trip and transaction),
// and on SQLite a key's rows, spread over the table, cost more to claim and
// settle than as many adjacent rows. A TABLE_limits dropped by hand is made again, at WARN, by Start or by the first
// claimer to find it gone, with a fence: no slot or place is taken for one lease,
// until the handlers that held the dropped table's have stopped (Rate's count
// starts afresh).
//
// # Retention
//
// [Queue.Prune] deletes processed rows, dead letters and cancelled jobs older than
// their [Retention], in statements of at most 1000 rows; run it from time to time
// (a Periodic job will do).
//
// # Batches
//
// [Queue.SubscribeBatch] hands a [BatchHandler] up to n jobs at once (RustStream's
// batch(n); n at most [MaxBatch]); it returns nil to ack them all, [BatchErrors] to settle each on its
// own, or a failure (or panics) to fail every job's attempt. In the lease form each
// job settles on its own, fenced by its own lease; in the RowLock form the batch's
// settlements commit together in the transaction holding its rows, and a failure
// of one job rolls them back: every job counts a failed attempt with a
// [*BatchFailedError]. The AdvisoryLock form takes no batches.
//
// # Rescue
//
// A row in work whose holder vanished (its process killed, its connection lost)
// is claimed again: a lease expires; a row-lock claim wrote a lock deadline Lease
// from its claim, which then passes (at once, if the holder's process saw its
// connection fail); an advisory lock ends with its session. Each of those claims
// counts an attempt, and a failed attempt at MaxAttempts is dead-lettered, so a
// row claimed more than MaxAttempts times never settled: its handler crashed its
// process, or lost its claim, every time. In every form the claim that finds such
// a row dead-letters it, with an [*ExhaustedError] as its last error, instead of
// running it again. A job in work or prefetched beside a crashing one loses its
// attempt too when the process dies; a MaxAttempts lowered between releases
// dead-letters, at their next claim, rows already counted past it.
//
// # Claims
//
// A [Subscription] has up to Workers jobs in work at once. Whatever the number of
// instances, a row is in at most one live claim at a time: a claim ends when its
// lease expires or the connection holding its lock dies, and its handler is then
// told so through its context (see Failures below). The claim forms ([Form]):
//
//   - [Lease] (default, both databases): one statement writes a lock deadline, counts
//     the attempt and commits; handlers hold no connection; the lease is extended
//     every third of a lease; every settlement and extension is fenced by the
//     deadline its claim wrote, so a worker whose lease was lost gets a
//     [*LeaseLostError] and cannot overwrite the newer claim's result. On SQLite one
//     claim takes a row per free worker; on Postgres [SubscribeOptions.Claimers]
//     claims run at once.
//   - [RowLock] (Postgres): a claim commits the attempt and a lock deadline (the
//     rescue limit, Lease), then FOR UPDATE holds the row in a transaction held
//     with its connection while the handler runs; the settlement commits with it.
//   - [AdvisoryLock] (Postgres): a session advisory lock per job in work, held with
//     its connection; settlements are fenced by the attempt the claim wrote.
//
// Every instance sharing a table must use the same form. A form a database cannot
// do is refused by [Queue.Subscribe] with a [*FormError]; [Subscription.Start]
// prepares every statement against the real table and returns a [*StatementError]
// naming the table and statement it refuses.
//
// # Wake-up
//
// Claims repeat while they come back full; after a short one the subscription waits
// [SubscribeOptions.PollInterval] (1 s by default). A publish through a Queue wakes
// that Queue's subscriptions in the same process at once. On Postgres,
// [Config.ListenNotify] LISTENs on one pooled connection per Queue (channel = table)
// and every broker publish sends pg_notify; [Queue.NotifyTriggerSQL] announces
// outside inserts. Polling stays as the fallback.
//
// # Outcomes
//
// A handler returns nil (ack: the row is deleted, or marked processed with a
// ProcessedAt column), [Retry] (now or after a delay), [Drop] (done without success,
// logged) or [DeadLetter]; any other error or a panic is a failed attempt, retried
// after [SubscribeOptions.Backoff] and dead-lettered at MaxAttempts. A payload that
// cannot be decoded (a codec error or panic) is dead-lettered at once with a
// [*DecodeError]; the JSON codec refuses a null payload ([ErrNullPayload]) rather
// than run the handler with a zero value. Dead letters keep their last error:
// [Queue.DeadLetters] lists them and [Queue.Requeue] makes them ready. [Queue.Stats]
// puts every row of the table in one count: ready, in work, delayed, dead,
// processed, or invalid (rows no claim will take as they stand). For an operator,
// [Queue.Jobs] lists one page of the jobs in one of those states ([JobState]),
// [Queue.Job] reads one whole, [Queue.RetryJob] makes a delayed job or a dead letter
// ready now and [Queue.DeleteJob] removes a job; neither touches a job in work (a
// [*JobStateError], told at once in every claim form). The observer package serves
// them as pages.
//
// [Queue.Timings] has histograms of handler durations by outcome and of the delay
// from publish to start ([Columns.CreatedAt]); [Config.Hooks] wrap every publish and
// handler call, for tracing, and carry a trace context from one to the other through
// a column the table opts into ([Columns.Trace]; see ExampleHooks).
//
// # Lifecycle
//
// [Subscription.Start] starts the subscription's goroutines; [Subscription.Stop]
// stops claiming, lets jobs in work finish and settles them. Stop keeps its deadline:
// when its context ends it cancels the handlers, releases what they had not finished
// (ready at once, attempt not counted) for as long as 0.4 s allows, then cancels
// every statement still in flight and returns the context's error, at most 0.5 s
// after the context ended, whatever the database does. Ending Start's context instead
// abandons jobs in work unsettled, as a crash would. [ChildSpec] and [Spawn] run a
// subscription as a gotp process, under a supervisor or on its own.
//
// A failed claim is retried after a pause that grows, with jitter, from 50 ms to 2 s
// for a transient error (a lost connection, a locked SQLite database) and from 1 s to
// 30 s for a permanent one (the database refuses the statement: a missing table or
// column, a wrong type, no permission), until it succeeds or Stop is called.
// Transient errors are logged at WARN, permanent ones at ERROR, the recovery at INFO;
// [Queue.Health] counts them, with lost locks and the last error, for the observer.
//
// # Failures: what each form guarantees
//
// In every form a job is handled at least once: an accepted job is never lost, but a
// job whose handler ran may run again after a crash or a lost connection (handlers
// should be idempotent). A job is never acked twice: every settlement is fenced, and
// one that cannot prove its claim still owns the row is refused and reported with a
// [*LeaseLostError], never as a success. When a claim is lost while its handler
// runs, the handler's context is cancelled with a *LeaseLostError as its cause
// (context.Cause), the loss is logged at WARN and counted in Health.LocksLost, and
// the handler's result is reported to [SubscribeOptions.Observe] with the refused
// settlement.
//
//   - [Lease]: a lost connection costs the statement in flight, which is retried;
//     a crash leaves its rows leased until the lease expires. The lease is extended
//     every third of a lease; if it cannot be (the database is unreachable or
//     locked), the handler's context is cancelled (Op "expired") a tenth of a lease before the
//     lease ends, so two runs of a job overlap only if a handler goes on for more than
//     Lease/10 after its context is cancelled, or if the hosts' clocks differ by more
//     than that.
//   - [RowLock]: the lock lives in a transaction held while the handler runs; the
//     attempt and a lock deadline Lease ahead were committed before it. If its
//     connection dies (the backend is terminated, the server restarts, the socket is
//     reset), the transaction rolls back, the attempt stays counted, and once the
//     handler has returned its process makes the row claimable at once; a process
//     that died leaves the row to its deadline. A watcher reading the held connection sees the loss as it
//     happens (the server's closing message or the socket's error) and cancels the
//     handler (Op "lock"); its settlement is not written. The watch begins 10 ms into
//     the handler (a shorter handler costs none), so the handler is cancelled within
//     about 10 ms of the loss, 20 ms if the loss comes in its first 10 ms
//     (BenchmarkLockLoss measures it). Two runs do not overlap: the row is freed
//     after the first handler returns, or at its deadline. A connection cut silently (a network partition) is noticed by a
//     heartbeat: after 1 s without a word the watcher pings, and a ping that fails or
//     takes more than 5 s counts as a loss. Meanwhile the server keeps the session,
//     and the lock, until its own dead-client detection ends it; with Postgres's
//     defaults that is hours later, so no other worker takes the row first. A server
//     whose tcp_keepalives_* or tcp_user_timeout settings end a silent session in
//     under 6 s can let two runs overlap for the difference.
//   - [AdvisoryLock]: as RowLock, except that the attempt is committed when the row is
//     taken, so a run after a loss counts as a new attempt. A settlement is written
//     only on the session that holds the lock, and only while the row still carries
//     the attempt the claim wrote; never through another connection. The form needs
//     session-level connections: not a transaction-pooling proxy such as PgBouncer
//     in transaction mode.
//
// # Differences from River and Oban
//
//   - Job states are not a column: a row's state follows from its lock deadline and
//     its ClaimedAt, DeadAt, ProcessedAt and CancelledAt columns, so that tables
//     written by other programs work unchanged and a claim writes one column.
//   - Cancelling a job in work reaches other instances through the database (a
//     cheap poll of the jobs in work, or the lock forms' heartbeat), not through
//     LISTEN/NOTIFY as River does: a cancellation is never lost with a
//     notification, and needs no listener. Cancelling a job held by RowLock waits
//     for its handler to return, since the row is locked until then.
//   - A snooze gives its attempt back (the count goes down by one) instead of
//     raising the job's maximum, as River and Oban do: MaxAttempts stays a
//     property of the subscription, not of each row.
//   - Uniqueness is one key per job, chosen by the publisher (River derives it from
//     the job's kind, arguments, queue and period; Oban from fields and keys):
//     put whatever makes two jobs the same into Key.
//   - Periodic jobs need no leader: every instance tries each tick and the database
//     lets one win (River elects a leader; Oban's cron runs on its leader). Missed
//     ticks are coalesced into one job rather than skipped (River) or replayed.
//   - FIFO groups, concurrency and rate limits are in the open package, not
//     paid extensions (River Pro, Oban Pro), and need no extra table for groups:
//     the claim itself keeps a group's order, with a unique index as the
//     backstop on Postgres. Rate limits count fixed windows of Per (up to twice
//     Rate in a span of Per that straddles two windows), not a sliding window.
//   - Schema versions are kept per table in gotp_schema, and version 0 is any
//     table the first release made; River keeps one version for its whole schema
//     (river_migration), Oban in a comment on its table.
//
// # Concurrency
//
// Queues and Subscriptions are safe for concurrent use. Handlers run on the
// subscription's goroutines, up to Workers at once, never under a lock of this
// package. A subscription never holds more than pool size − 1 connections (at least
// one); a pool too small for its workers runs fewer jobs at once and never errors.
//
// # Clocks
//
// Each instance claims, delays and leases by its host clock ([HostClock]); hosts
// sharing a table must keep their clocks far closer than the lease. [DatabaseClock]
// reads the database's time in every statement; the lease form refuses it.
package inbox
