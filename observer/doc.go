// Package observer shows a running gotp node in a browser and as metrics,
// as Erlang's observer does: its supervision trees, its processes (the
// longest mailboxes first), and, through Sources, its registries, process
// groups, inbox tables and cluster peers.
//
//	mux := http.NewServeMux()
//	observer.Mount(mux, node, observer.Options{Token: os.Getenv("OBSERVER_TOKEN")})
//	http.ListenAndServe(":8080", mux)
//
// Under Prefix ("/observer/") it serves:
//
//   - the page, server-rendered HTML that refreshes itself with a few lines
//     of JavaScript (no build step), with sortable, filterable tables;
//   - api/snapshot, the same content as JSON (a Snapshot);
//   - metrics, Prometheus text: gotp_processes, gotp_mailbox_length (a
//     histogram), gotp_mailbox_dropped_total and
//     gotp_mailbox_overflow_kills_total (mailbox limits),
//     gotp_supervisor_restarts_total, gotp_registry_entries,
//     gotp_pg_group_members, gotp_inbox_jobs, gotp_inbox_outcomes_total,
//     gotp_inbox_errors_total, gotp_inbox_failing_claimers and
//     gotp_cluster_messages_total;
//   - api/kill (POST pid=...), only with Options.AllowKill.
//
// The observer is read-only unless AllowKill is set, and every path can be
// put behind a bearer token. Supervisors are found on the node by
// themselves; other parts are added with Sources. Every request builds a
// fresh Snapshot from cheap introspection that reads what processes
// publish rather than calling them (ScopeSource alone makes one call, to
// find the scope), so the observer does not queue behind busy processes.
package observer
