// Package inbox is a durable job queue in a SQL table that many service instances,
// each with many workers, share with the database as their only coordinator: SQLite
// (modernc.org/sqlite) as the embedded default, Postgres (pgx) to scale out.
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
// # Claims
//
// A [Subscription] has up to Workers jobs in work at once. No row is ever in two
// claims at once, whatever the number of instances. The claim forms ([Form]):
//
//   - [Lease] (default, both databases): one statement writes a lock deadline, counts
//     the attempt and commits; handlers hold no connection; the lease is extended
//     every half lease; every settlement and extension is fenced by the deadline its
//     claim wrote, so a worker whose lease was lost gets a [*LeaseLostError] and
//     cannot overwrite the newer claim's result. On SQLite one claim takes a row per
//     free worker; on Postgres [SubscribeOptions.Claimers] claims run at once.
//   - [RowLock] (Postgres): FOR UPDATE SKIP LOCKED in a transaction held with its
//     connection while the handler runs.
//   - [AdvisoryLock] (Postgres): a session advisory lock per job in work.
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
// cannot be decoded is dead-lettered with a [*DecodeError]. Dead letters keep their
// last error: [Queue.DeadLetters] lists them and [Queue.Requeue] makes them ready.
// [Queue.Stats] counts ready, in-work, delayed and dead jobs.
//
// # Lifecycle and failures
//
// [Subscription.Start] starts the subscription's goroutines; [Subscription.Stop]
// stops claiming, lets jobs in work finish, and past its deadline cancels them and
// releases their rows at once (attempt not counted). Ending Start's context instead
// abandons jobs in work unsettled, as a crash would: leased rows are claimed again
// when the lease expires. Lost database connections are retried; an accepted job is
// never lost (it may run again after a crash: handlers should be idempotent).
// [ChildSpec] and [Spawn] run a subscription as a gotp process, under a supervisor
// or on its own.
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
