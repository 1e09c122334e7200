// Package registry is a local, decentralised, scalable key → process store:
// Elixir's Registry for gotp, generic in its keys and values.
//
//	reg, err := registry.Start[string, int](ctx, node, registry.Options{})
//	// in a process p:
//	err = reg.Register(p, "hello", 42)   // p is now found under "hello"
//	for _, e := range reg.Lookup("hello") {
//		node.Send(e.PID, "hi")             // e.Value == 42
//	}
//
// A registry is Unique (a key maps to at most one process) or Duplicate
// (a key maps to any number of entries). Different keys may name the same
// process. Every entry belongs to the process that registered it, and
// disappears when that process exits. Keys compare with ==.
//
// # Processes and locks
//
// A registry runs as a process (Start; nameable with gotp.Named, linkable
// to a supervisor with gotp.LinkTo) that owns its lifetime: when that
// process exits every entry is dropped, and a stopped *Registry may be
// started again. No operation goes through that process. Entries live in
// Options.Partitions partitions.
//
// A unique registry puts a key in the partition its hash selects. Each
// partition is a directory of small open-addressing hash tables whose
// slots hold the entries and are published with atomic stores, so that
// reads (Lookup, Find, Values, Via names, and Count) take no lock at all:
// they never wait for a process, a write or each other, and a reader sees
// every key either before or after a concurrent write to it, never torn.
// Writers lock only the small table of their key (at most 1024 slots),
// then the bookkeeping of their own process (one of 16 stripes chosen by
// process number): writers of different keys and processes seldom meet.
// A table that fills up is replaced by a larger one or split in two, so
// growth copies one small table at a time.
//
// A duplicate registry puts all the entries of a process in that
// process's partition, a map under its own sync.RWMutex, so a process's
// own registrations do not contend with others'. Its reads take read locks
// only: they never wait for a process, never for each other, and never
// for writes to other partitions; a read waits only while a write to its
// own partition is in progress or queued (sync.RWMutex lets a waiting
// writer in before new readers).
//
// Keys of a unique registry and All, Select and Info on one take short
// exclusive locks: Keys the bookkeeping stripe of the process it asks
// about (which that stripe's writers also take), and All, Select and Info
// a unique partition's directory lock while they copy that partition,
// which makes them wait for each other and for a table of that partition
// that is being replaced; a writer whose table is full waits for the copy
// to finish, holding that table's lock, so that the writers of that one
// table wait too. They also hold the partition's read lock meanwhile, for
// which a process's first Register in that partition and its cleanup at
// exit wait.
//
// Every other write holds its locks for a few table or map operations,
// never for user code. User code (Dispatch and UpdateValue callbacks,
// Match predicates, All loop bodies) never runs under a registry lock,
// except the predicate of UnregisterMatchFunc and Where patterns given to
// UnregisterMatch on a duplicate registry: they run under the lock of the
// process's partition, must not call the registry, and if they panic the
// lock is released and the entries are left as they were.
//
// Entries record the process's number only (every holder is a live local
// process, so its PID is rebuilt from the node's name and creation): a
// unique entry costs its key, the value and 16 bytes (the holder's number
// and a hash word), in tables between 3/8 and 3/4 full, and a registry
// whose keys and values hold no pointers is never scanned by the garbage
// collector. Find and Count do not allocate; Lookup allocates the slice it
// returns.
//
// # Exits and stale entries
//
// The registry watches each process that registers with one
// gotp.Node.MonitorFunc per (registry, process) pair, however many keys it
// holds. The callback runs on the goroutine that ends the process, right
// after it is dead, and removes its entries. The runtime runs such
// callbacks before it sends the exit signals of the process's links and
// before it delivers any Down message of its monitors, and before the
// process's Done channel closes. Hence, exactly:
//
//   - once a process has received the Down of a monitor of P, or an exit
//     signal from a link to P, or seen P's Done channel closed, no read of
//     the registry returns an entry of P, with the one exception of the
//     last point;
//   - a read running concurrently with P's exit may return P's entries:
//     between the moment P is dead (Node.IsAlive reports false, messages to
//     it are dropped) and the end of the registry's callback. The
//     MonitorFunc callbacks of an exit run one after another on the
//     exiting goroutine, so that window spans the registry's own callback
//     (a few table writes per key) and every callback that runs before it:
//     other registries' cleanups, and MonitorFunc callbacks of user code,
//     which may take any time;
//   - a process killed by another while it is itself in the middle of
//     Register (its goroutine still runs) may have that entry seen until
//     that Register call returns.
//
// Sending to a dead process is a no-op, so a stale entry is harmless to
// Dispatch; a via name whose holder is dead resolves to no process, so
// server.Call through it fails with gotp.ErrNoProc at once, as Elixir's
// whereis_name checks that the holder is alive. A unique
// Register that finds its key held by a dead process whose cleanup has not
// run yet takes the key over.
//
// # Naming processes
//
// A unique registry names processes by any key through Via:
//
//	reg, _ := registry.Start[string, struct{}](ctx, node, registry.Options{})
//	pid, err := server.Start(ctx, node, &agent{}, server.WithVia(reg.Via("agent")))
//	n, err := server.Call[int](ctx, node, reg.Via("agent"), get{})
//
// A second start under a taken name fails with *server.AlreadyStartedError
// naming the first.
//
// # Dispatch and pub/sub
//
// Dispatch calls a function with the entries of a key, never with none;
// in a partitioned duplicate registry it runs once per partition that has
// entries, in parallel, on the caller's goroutine and goroutines Dispatch
// starts, and returns when every call has returned (or one after the
// other on the caller's goroutine with Parallel(false)).
// Sending a message to each entry is a publish/subscribe system; see the
// examples.
//
// # Matching
//
// Match, CountMatch and UnregisterMatch take a Pattern (wildcards, literal
// values, repeated variables, struct fields), the Go form of Elixir's
// match patterns; MatchFunc and Select take Go predicates.
//
// # Locks
//
// Lock runs a function while holding a per-key lock of the registry
// (Elixir's Registry.lock/3): calls with equal keys run one at a time, in
// the order they asked, and the lock is released however the function
// ends. It is for work that must stay in the calling process; a process
// named by a via key is the usual way to serialise work on a key.
//
// # Differences from Elixir's Registry
//
// The package follows Elixir's Registry. Where it differs, it is on
// purpose:
//
//   - Registering does not link the process to the registry: if the
//     registry stops, its entries vanish and the processes that registered
//     keep running (supervise them after the registry with rest-for-one if
//     they must restart with it). Register returns nil where Elixir returns
//     {:ok, owner}; the owner of every entry is the registry's process,
//     r.PID().
//   - Keys and values are typed (Registry[K, V]) and keys compare with Go's
//     ==, not Erlang's match: a key that == cannot compare (an interface
//     holding a slice, map or function) or that is not equal to itself (a
//     NaN) is refused with ErrBadKey. Metadata keys may be any comparable
//     value (Elixir: atoms and tuples).
//   - Patterns are Go values (Pattern, with wildcards, variables and
//     Where), not match specifications with guards; MatchFunc, Select and
//     UnregisterMatchFunc take Go predicates instead.
//   - A duplicate registry partitions by process only (Elixir also offers
//     {:duplicate, :key}).
//   - Dispatch on a partitioned registry runs its calls in parallel
//     unless given Parallel(false), so that a publish to subscribers spread
//     over partitions uses every core; Elixir's default is parallel: false.
//   - UpdateValue on a duplicate registry returns ErrNotUnique where
//     Elixir raises; Register and the other operations on a stopped
//     registry return ErrNotRunning where Elixir raises.
//   - Lock takes a context for its wait, returns the function's error
//     (Elixir: its result), and a process killed while its goroutine runs
//     the function keeps the lock until the function returns: gotp cannot
//     stop a goroutine, and releasing the lock under code that still runs
//     would break the mutual exclusion. Elixir releases it when the
//     process dies.
//   - The same *Registry can be started again after its process exited,
//     with empty tables and its initial metadata (Elixir starts a new
//     registry under the same name).
//
// # Tests
//
// The package's tests run in well under a minute with -race. The long
// stress test runs only when GOTP_REGISTRY_STRESS=1; benchmarks W1–W4
// (docs/bench/workloads.md) are BenchmarkW1..W4, with a plain sharded map as the
// baseline (BenchmarkW1Baseline, BenchmarkW2Baseline).
package registry
