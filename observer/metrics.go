package observer

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gotp/gotp"
)

// The metric families of the observer's collector. No label takes a value
// per process, user, key or group: labels name a behaviour, a supervisor
// (by name or path), a registry, a scope, an inbox table or a peer node,
// all of which a program has a handful of. What is per process or per
// group is on the observer's page instead, the largest first.
var (
	descProcesses = prometheus.NewDesc("gotp_processes",
		"Live processes on the node, by behaviour (the gotp.Behaviour spawn label; none for unlabelled processes).",
		[]string{"behaviour"}, nil)
	descMailbox = prometheus.NewDesc("gotp_mailbox_length",
		"Mailbox lengths of the live processes (the sum is every message waiting).", nil, nil)
	descDropped = prometheus.NewDesc("gotp_mailbox_dropped_total",
		"Messages dropped by mailbox limits (OverflowDrop) on the node.", nil, nil)
	descKilled = prometheus.NewDesc("gotp_mailbox_overflow_kills_total",
		"Processes killed by mailbox limits (OverflowKill) on the node.", nil, nil)
	descCrashes = prometheus.NewDesc("gotp_process_crashes_total",
		"Processes whose own code ended them abnormally (crash reports) since the node started.", nil, nil)
	descRestarts = prometheus.NewDesc("gotp_supervisor_restarts_total",
		"Restarts made by each supervisor since it started.", []string{"supervisor"}, nil)
	descStartFailures = prometheus.NewDesc("gotp_supervisor_start_failures_total",
		"Child starts that failed, by supervisor, since it started.", []string{"supervisor"}, nil)
	descChildren = prometheus.NewDesc("gotp_supervisor_children",
		"Children of each supervisor by state (running, restarting, not_running).", []string{"supervisor", "state"}, nil)
	descRegistry = prometheus.NewDesc("gotp_registry_entries",
		"Entries in each registry.", []string{"registry"}, nil)
	descRegistryKeys = prometheus.NewDesc("gotp_registry_keys",
		"Distinct keys in each registry.", []string{"registry"}, nil)
	descGroups = prometheus.NewDesc("gotp_pg_groups",
		"Groups with at least one member, on any node, in each pg scope.", []string{"scope"}, nil)
	descMembers = prometheus.NewDesc("gotp_pg_members",
		"Memberships (a process joined to a group, counted once per join) in each pg scope, on every node.",
		[]string{"scope"}, nil)
	descInbox = prometheus.NewDesc("gotp_inbox_jobs",
		"Jobs of each inbox table by state (ready, in_work, delayed, dead, processed, invalid, cancelled); absent while the table's counts cannot be read.", []string{"table", "state"}, nil)
	descOutcomes = prometheus.NewDesc("gotp_inbox_outcomes_total",
		"Jobs handled by this node's subscriptions, by outcome.", []string{"table", "outcome"}, nil)
	descInboxErrors = prometheus.NewDesc("gotp_inbox_errors_total",
		"Failures met by this node's subscriptions of each inbox table, by kind (claim, permanent, lock_lost, bad_row).", []string{"table", "kind"}, nil)
	descInboxHandle = prometheus.NewDesc("gotp_inbox_handle_seconds",
		"How long this node's handlers of each inbox table ran (payload decoding included), by the outcome they chose (ack, retry, drop, dead, release).",
		[]string{"table", "outcome"}, nil)
	descInboxStartDelay = prometheus.NewDesc("gotp_inbox_start_delay_seconds",
		"Time from publish (the row's created_at, by the database's clock) to the start of each job's first attempt on this node, run-at delays included.",
		[]string{"table"}, nil)
	descInboxFailing = prometheus.NewDesc("gotp_inbox_failing_claimers",
		"Claimers of each inbox table backing off after a failed claim.", []string{"table"}, nil)
	descInboxLimitHeld = prometheus.NewDesc("gotp_inbox_limit_held",
		"Places of Limits (slots of Concurrency, places of PerPartition) this node's subscriptions of each inbox table hold now.", []string{"table"}, nil)
	descInboxLimitWaiting = prometheus.NewDesc("gotp_inbox_limit_waiting",
		"Jobs this node's subscriptions of each inbox table hold that wait for a place of Limits to run in now.", []string{"table"}, nil)
	descInboxPrepared = prometheus.NewDesc("gotp_inbox_prepared_statements",
		"Statements each SQLite inbox table's Queue keeps prepared now, while its subscriptions run (at most 96 a Queue).", []string{"table"}, nil)
	descPeers = prometheus.NewDesc("gotp_cluster_peers",
		"Other nodes connected to this one.", nil, nil)
	descClusterMsgs = prometheus.NewDesc("gotp_cluster_messages_total",
		"Cluster messages (signals) exchanged with each connected peer since it connected, by direction (in, out).",
		[]string{"peer", "direction"}, nil)
	descClusterBytes = prometheus.NewDesc("gotp_cluster_bytes_total",
		"Bytes of cluster batches sent and received by this node, by direction (in, out).", []string{"direction"}, nil)
	descClusterDropped = prometheus.NewDesc("gotp_cluster_dropped_total",
		"Cluster messages not sent: to nodes not connected, or beyond cluster.Options.MaxPending.", nil, nil)
	descClusterCodec = prometheus.NewDesc("gotp_cluster_codec_errors_total",
		"Cluster messages the codec refused (encode) or could not read (decode).", []string{"direction"}, nil)
	descClusterAuth = prometheus.NewDesc("gotp_cluster_auth_failures",
		"Peers (and hosts) whose credentials were refused, either way, since Join.", nil, nil)
)

var allDescs = []*prometheus.Desc{
	descProcesses, descMailbox, descDropped, descKilled, descCrashes,
	descRestarts, descStartFailures, descChildren,
	descRegistry, descRegistryKeys, descGroups, descMembers,
	descInbox, descOutcomes, descInboxErrors, descInboxFailing, descInboxLimitHeld, descInboxLimitWaiting, descInboxPrepared, descInboxHandle, descInboxStartDelay,
	descPeers, descClusterMsgs, descClusterBytes, descClusterDropped, descClusterCodec, descClusterAuth,
}

// mailboxBuckets are the upper bounds of the mailbox histogram.
var mailboxBuckets = []float64{0, 1, 10, 100, 1000, 10000, 100000}

// collector builds every metric from one snapshot per scrape.
type collector struct{ o *Observer }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	byBehaviour := map[string]int{}
	buckets := make(map[float64]uint64, len(mailboxBuckets))
	var count uint64
	var sum float64
	s := c.o.snapshot(ctx, false, func(b gotp.ProcessBrief) {
		label := b.Behaviour
		if label == "" {
			label = "none"
		}
		byBehaviour[label]++
		count++
		sum += float64(b.MailboxLen)
		for _, ub := range mailboxBuckets {
			if float64(b.MailboxLen) <= ub {
				buckets[ub]++
			}
		}
	})
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for b, k := range byBehaviour {
		gauge(descProcesses, float64(k), b)
	}
	ch <- prometheus.MustNewConstHistogram(descMailbox, count, sum, buckets)
	counter(descCrashes, float64(c.o.n.Summary().Crashes))
	dropped, killed := c.o.n.MailboxOverflows()
	counter(descDropped, float64(dropped))
	counter(descKilled, float64(killed))

	// Supervisors with one path (unnamed ones at the top) are summed, so
	// that each label set is exported once.
	type supSums struct {
		restarts, failures              uint64
		running, restarting, notRunning int
	}
	sups := map[string]*supSums{}
	var walk func(t SupTree)
	walk = func(t SupTree) {
		ss := sups[t.Path]
		if ss == nil {
			ss = &supSums{}
			sups[t.Path] = ss
		}
		ss.restarts += t.Restarts
		ss.failures += t.Failures
		for _, ch := range t.Children {
			switch ch.State {
			case "running":
				ss.running++
			case "restarting":
				ss.restarting++
			default:
				ss.notRunning++
			}
			if ch.Sub != nil {
				walk(*ch.Sub)
			}
		}
	}
	for _, t := range s.Supervisors {
		walk(t)
	}
	for path, ss := range sups {
		counter(descRestarts, float64(ss.restarts), path)
		counter(descStartFailures, float64(ss.failures), path)
		gauge(descChildren, float64(ss.running), path, "running")
		gauge(descChildren, float64(ss.restarting), path, "restarting")
		gauge(descChildren, float64(ss.notRunning), path, "not_running")
	}

	seen := map[string]bool{} // a label set is exported once, the first source wins
	once := func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		return true
	}
	for _, r := range s.Registries {
		if !once("registry " + r.Name) {
			continue
		}
		keys := 0
		for _, k := range r.Keys {
			keys += k
		}
		gauge(descRegistry, float64(r.Entries), r.Name)
		gauge(descRegistryKeys, float64(keys), r.Name)
	}
	for _, sc := range s.Scopes {
		if !once("scope " + sc.ID) {
			continue
		}
		gauge(descGroups, float64(sc.GroupCount), sc.ID)
		gauge(descMembers, float64(sc.Memberships), sc.ID)
	}
	for _, t := range s.Inboxes {
		if !once("inbox " + t.Name) {
			continue
		}
		// Counts that could not be read are left out, not exported as 0: an
		// empty queue is not what a failing database looks like.
		if t.Err == "" {
			for state, v := range map[string]int64{"ready": t.Ready, "in_work": t.InWork, "delayed": t.Delayed, "dead": t.Dead, "processed": t.Processed, "invalid": t.Invalid, "cancelled": t.Cancelled} {
				gauge(descInbox, float64(v), t.Name, state)
			}
		}
		for outcome, v := range t.Outcomes {
			counter(descOutcomes, float64(v), t.Name, outcome)
		}
		if h := t.Health; h != nil {
			for kind, v := range map[string]int64{"claim": h.ClaimErrors, "permanent": h.PermanentErrors, "lock_lost": h.LocksLost, "bad_row": h.BadRows} {
				ch <- prometheus.MustNewConstMetric(descInboxErrors, prometheus.CounterValue, float64(v), t.Name, kind)
			}
			ch <- prometheus.MustNewConstMetric(descInboxFailing, prometheus.GaugeValue, float64(h.Failing), t.Name)
			ch <- prometheus.MustNewConstMetric(descInboxLimitHeld, prometheus.GaugeValue, float64(h.LimitHeld), t.Name)
			ch <- prometheus.MustNewConstMetric(descInboxLimitWaiting, prometheus.GaugeValue, float64(h.LimitWaiting), t.Name)
			ch <- prometheus.MustNewConstMetric(descInboxPrepared, prometheus.GaugeValue, float64(h.Prepared), t.Name)
		}
		if tm := t.timings; tm != nil {
			for outcome, h := range tm.Handle {
				ch <- prometheus.MustNewConstHistogram(descInboxHandle, h.Count, h.Sum, h.Buckets, t.Name, outcome)
			}
			ch <- prometheus.MustNewConstHistogram(descInboxStartDelay, tm.StartDelay.Count, tm.StartDelay.Sum, tm.StartDelay.Buckets, t.Name)
		}
	}
	if tot := s.ClusterTotals; tot != nil {
		peers := 0
		for _, p := range s.Cluster {
			if !p.Up || p.Self || !once("peer "+p.Node) {
				continue
			}
			peers++
			counter(descClusterMsgs, float64(p.MessagesIn), p.Node, "in")
			counter(descClusterMsgs, float64(p.MessagesOut), p.Node, "out")
		}
		gauge(descPeers, float64(peers))
		counter(descClusterBytes, float64(tot.BytesIn), "in")
		counter(descClusterBytes, float64(tot.BytesOut), "out")
		counter(descClusterDropped, float64(tot.Dropped))
		counter(descClusterCodec, float64(tot.EncodeErrors), "encode")
		counter(descClusterCodec, float64(tot.DecodeErrors), "decode")
		gauge(descClusterAuth, float64(tot.AuthFailures))
	}
}
