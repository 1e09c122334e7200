// Package observer shows a running gotp node in a browser and as metrics,
// as Erlang's observer does: a system panel with the last minutes'
// history, its supervision trees, its processes (the longest mailboxes
// first), a page for each process, and, through Sources, its registries
// (with their keys), process groups, inbox tables and cluster peers.
//
//	mux := http.NewServeMux()
//	obs := observer.Mount(mux, node, observer.Options{Token: os.Getenv("GOTP_OBSERVER_TOKEN")})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
//	obs.Register(reg) // gotp's families on the program's own registry
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	http.ListenAndServe("127.0.0.1:8080", mux)
//
// Under Prefix ("/observer/") it serves:
//
//   - the page: server-rendered HTML that refreshes itself with a few lines
//     of JavaScript (no build step), with sortable, filterable tables, every
//     PID a link to its process page, and links to the JSON and the
//     metrics;
//   - process?pid=<PID>: one process: behaviour, label, status, start time,
//     messages handled, links, monitors, mailbox length and head, a
//     server's state (server.FormatState: as its behaviour chooses to show
//     it; asked only of an idle server, so that the question never waits
//     behind its work or counts against its mailbox limit), the stack of a
//     resident process (on request: a goroutine profile of the program),
//     a supervisor's children;
//   - registry?name=<name>: the entries of a registry of RegistrySource,
//     paged and filterable;
//   - api/snapshot and api/process?pid=: the same as JSON (Snapshot,
//     ProcessDetail);
//   - metrics: the families below, in Prometheus text (Collector and
//     Register put them on a program's own registry);
//   - inbox?table=<table>&state=<state>&after=<id> and job?table=&id=:
//     an inbox table's jobs of one state, paged by id, and one job with
//     its payload and last error, for the tables of InboxSource; the same
//     as JSON at api/inbox/jobs and api/inbox/job (InboxJobs, InboxJob);
//   - api/kill (POST, JSON {"pid": "..."}), and the job actions
//     api/inbox/retry, api/inbox/delete and api/inbox/cancel (POST, JSON
//     {"table": "...", "id": n}), only with Options.AllowKill and a Token.
//
// The system panel shows uptime, goroutines, memory, GC cycles,
// GOMAXPROCS, processes, messages waiting and crashes, and a chart (inline
// SVG) of the process count, the messages waiting and the heap over the
// last History samples, which a process of the node (the sampler) takes
// every SampleEvery into a ring buffer on the server.
//
// # Metric families
//
// No label takes a value per process, user, key or group, so that the
// number of series stays that of the program's parts however many users
// it serves; what is per process or per group is on the page instead, the
// largest first.
//
//   - gotp_processes{behaviour}: live processes by Behaviour label (none
//     for processes without one). Behaviour labels name kinds of process
//     ("server *chat.conn"); use Process.SetLabel for what differs per
//     process.
//   - gotp_mailbox_length: histogram of mailbox lengths (its sum is every
//     message waiting).
//   - gotp_mailbox_dropped_total, gotp_mailbox_overflow_kills_total:
//     messages dropped and processes killed by mailbox limits
//     (gotp.MailboxLimit) on the node.
//   - gotp_process_crashes_total: crash reports since the node started.
//   - gotp_supervisor_restarts_total{supervisor},
//     gotp_supervisor_start_failures_total{supervisor}: since the
//     supervisor started. A supervisor is named by its registered name, or
//     by its parent's name and its child id ("chat.root/conns"; "dynamic"
//     for a dynamic child), or "unnamed" at the top; supervisors with one
//     name are summed.
//   - gotp_supervisor_children{supervisor,state}: children running,
//     restarting, not_running.
//   - gotp_registry_entries{registry}, gotp_registry_keys{registry}.
//   - gotp_pg_groups{scope}, gotp_pg_members{scope}: groups with members,
//     and memberships, on every node.
//   - gotp_inbox_jobs{table,state}: ready, in_work, delayed, dead,
//     processed (acked rows a table with a ProcessedAt column keeps until
//     its retention prunes them; 0 on a table whose acks delete), invalid,
//     cancelled; absent while the table's counts cannot be read.
//   - gotp_inbox_outcomes_total{table,outcome}: jobs handled by this
//     node's subscriptions.
//   - gotp_inbox_handle_seconds{table,outcome}: histogram of how long this
//     node's handlers ran, by outcome (inbox.Queue.Timings);
//     gotp_inbox_start_delay_seconds{table}: histogram of the time from
//     publish to the start of each job's first attempt.
//   - gotp_inbox_errors_total{table,kind}: failures this node's
//     subscriptions met (claim, permanent, lock_lost, bad_row);
//     gotp_inbox_failing_claimers{table}: claimers backing off now.
//   - gotp_inbox_limit_held{table}: places of Limits (slots of Concurrency,
//     places of PerPartition) this node's subscriptions hold now;
//     gotp_inbox_limit_waiting{table}: jobs they hold that wait for one.
//   - gotp_inbox_prepared_statements{table}: statements a SQLite table's
//     Queue keeps prepared while its subscriptions run (at most 96).
//   - gotp_cluster_peers: nodes connected.
//   - gotp_cluster_messages_total{peer,direction}: messages exchanged with
//     each connected peer (in, out), since it connected.
//   - gotp_cluster_bytes_total{direction}, gotp_cluster_dropped_total,
//     gotp_cluster_codec_errors_total{direction} (encode, decode),
//     gotp_cluster_auth_failures: the cluster's counters.
//
// # Safety
//
// The observer is read-only unless AllowKill is set, and AllowKill needs
// a Token: a kill endpoint anyone who can reach the port may use is never
// served. Every path can be put behind the bearer token (Authorized lets
// a program put its own handlers behind it too). The kill endpoint and the
// job actions take only JSON, which a cross-site form cannot send, and
// refuse requests whose Origin or Sec-Fetch-Site names another site. Every
// refused action (a wrong or missing token, another site, a form, actions
// off) is logged at ERROR as "observer: action refused", with the action,
// the status and the remote address. Pages are sent with
// Referrer-Policy: no-referrer, since the token may be in their URL.
//
// # Cost
//
// Supervisors are found on the node by themselves; other parts are added
// with Sources. Every request builds a fresh Snapshot from cheap
// introspection that reads what processes publish rather than calling
// them, so the observer does not queue behind busy processes: a metrics
// scrape visits each process once (gotp.Node.EachProcess) without a row
// per process, and ScopeSource alone makes one call, to find the scope.
// Two things do wait: a server's state on its process page (a message to
// an idle server, answered between its callbacks, given up after a
// second), and the stack of a resident process (a goroutine profile of the
// program, taken only when asked for, on a page that then stops
// refreshing). The registry page reads every entry of the registry.
package observer
