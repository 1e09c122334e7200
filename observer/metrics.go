package observer

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metric families the observer exports.
var (
	descProcesses = prometheus.NewDesc("gotp_processes", "Live processes on the node.", nil, nil)
	descMailbox   = prometheus.NewDesc("gotp_mailbox_length", "Mailbox lengths of the live processes.", nil, nil)
	descDropped   = prometheus.NewDesc("gotp_mailbox_dropped_total",
		"Messages dropped by mailbox limits (OverflowDrop) on the node.", nil, nil)
	descKilled = prometheus.NewDesc("gotp_mailbox_overflow_kills_total",
		"Processes killed by mailbox limits (OverflowKill) on the node.", nil, nil)
	descRestarts = prometheus.NewDesc("gotp_supervisor_restarts_total",
		"Restarts of each child made by its supervisor.", []string{"supervisor", "child"}, nil)
	descRegistry = prometheus.NewDesc("gotp_registry_entries", "Entries in each registry.", []string{"registry"}, nil)
	descGroup    = prometheus.NewDesc("gotp_pg_group_members",
		"Members of each pg group, on every node.", []string{"scope", "group"}, nil)
	descInbox = prometheus.NewDesc("gotp_inbox_jobs",
		"Jobs of each inbox table by state (ready, in_work, delayed, dead, invalid).", []string{"table", "state"}, nil)
	descOutcomes = prometheus.NewDesc("gotp_inbox_outcomes_total",
		"Jobs handled by this node's subscriptions, by outcome.", []string{"table", "outcome"}, nil)
	descInboxErrors = prometheus.NewDesc("gotp_inbox_errors_total",
		"Failures met by this node's subscriptions of each inbox table, by kind (claim, permanent, lock_lost, bad_row).", []string{"table", "kind"}, nil)
	descInboxFailing = prometheus.NewDesc("gotp_inbox_failing_claimers",
		"Claimers of each inbox table backing off after a failed claim.", []string{"table"}, nil)
	descCluster = prometheus.NewDesc("gotp_cluster_messages_total",
		"Cluster messages exchanged with each peer, by direction.", []string{"peer", "direction"}, nil)
)

// mailboxBuckets are the upper bounds of the mailbox histogram.
var mailboxBuckets = []float64{0, 1, 10, 100, 1000, 10000, 100000}

// collector builds every metric from one snapshot per scrape.
type collector struct{ o *Observer }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProcesses, descMailbox, descDropped, descKilled, descRestarts, descRegistry, descGroup, descInbox, descOutcomes, descInboxErrors, descInboxFailing, descCluster} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := c.o.snapshot(ctx)

	ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(len(s.Processes)))
	buckets := make(map[float64]uint64, len(mailboxBuckets))
	var sum float64
	for _, p := range s.Processes {
		sum += float64(p.MailboxLen)
		for _, b := range mailboxBuckets {
			if float64(p.MailboxLen) <= b {
				buckets[b]++
			}
		}
	}
	ch <- prometheus.MustNewConstHistogram(descMailbox, uint64(len(s.Processes)), sum, buckets)
	dropped, killed := c.o.n.MailboxOverflows()
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(dropped))
	ch <- prometheus.MustNewConstMetric(descKilled, prometheus.CounterValue, float64(killed))

	var walk func(t SupTree)
	walk = func(t SupTree) {
		sup := t.PID
		if t.Name != "" {
			sup = t.Name
		}
		for _, ch2 := range t.Children {
			id := ch2.ID
			if id == "" {
				id = ch2.PID // dynamic children have no id
			}
			ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(ch2.Restarts), sup, id)
			if ch2.Sub != nil {
				walk(*ch2.Sub)
			}
		}
	}
	for _, t := range s.Supervisors {
		walk(t)
	}
	for _, r := range s.Registries {
		ch <- prometheus.MustNewConstMetric(descRegistry, prometheus.GaugeValue, float64(r.Entries), r.Name)
	}
	for _, sc := range s.Scopes {
		for _, g := range sc.Groups {
			ch <- prometheus.MustNewConstMetric(descGroup, prometheus.GaugeValue, float64(g.Size), sc.ID, g.Name)
		}
	}
	for _, t := range s.Inboxes {
		for state, v := range map[string]int64{"ready": t.Ready, "in_work": t.InWork, "delayed": t.Delayed, "dead": t.Dead, "invalid": t.Invalid} {
			ch <- prometheus.MustNewConstMetric(descInbox, prometheus.GaugeValue, float64(v), t.Name, state)
		}
		for outcome, v := range t.Outcomes {
			ch <- prometheus.MustNewConstMetric(descOutcomes, prometheus.CounterValue, float64(v), t.Name, outcome)
		}
		if h := t.Health; h != nil {
			for kind, v := range map[string]int64{"claim": h.ClaimErrors, "permanent": h.PermanentErrors, "lock_lost": h.LocksLost, "bad_row": h.BadRows} {
				ch <- prometheus.MustNewConstMetric(descInboxErrors, prometheus.CounterValue, float64(v), t.Name, kind)
			}
			ch <- prometheus.MustNewConstMetric(descInboxFailing, prometheus.GaugeValue, float64(h.Failing), t.Name)
		}
	}
	for _, p := range s.Cluster {
		ch <- prometheus.MustNewConstMetric(descCluster, prometheus.CounterValue, float64(p.MessagesIn), p.Node, "in")
		ch <- prometheus.MustNewConstMetric(descCluster, prometheus.CounterValue, float64(p.MessagesOut), p.Node, "out")
	}
}
