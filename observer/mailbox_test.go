package observer_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/observer"
)

// A process whose mailbox limit drops messages shows its limit and its
// drops in the snapshot and on the page, and the node's drops and kills
// are counters in the metrics.
func TestMailboxLimitsShown(t *testing.T) {
	n, _ := tree(t)
	full, _ := n.Spawn(func(p *gotp.Process) error { <-p.Context().Done(); return nil },
		gotp.MailboxLimit(2, gotp.OverflowDrop))
	for range 7 {
		n.Send(full, "x")
	}
	victim, _ := n.Spawn(func(p *gotp.Process) error { <-p.Context().Done(); return nil },
		gotp.MailboxLimit(1, gotp.OverflowKill))
	n.Send(victim, "x")
	n.Send(victim, "x")
	o := observer.New(n, observer.Options{})

	_, body := get(t, o, "/observer/api/snapshot")
	var s observer.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	var row *observer.Process
	for i := range s.Processes {
		if s.Processes[i].PID == full.String() {
			row = &s.Processes[i]
		}
	}
	if row == nil || row.MailboxLen != 2 || row.MailboxMax != 2 || row.Overflow != "drop" || row.Dropped != 5 {
		t.Fatalf("row %+v, want mailbox 2 of 2, drop, 5 dropped", row)
	}
	if _, page := get(t, o, "/observer/"); !strings.Contains(page, "2 / 2 drop, 5 dropped") {
		t.Error("the page does not show the limit and the drops")
	}

	_, body = get(t, o, "/observer/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.NopCloser(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"gotp_mailbox_dropped_total": 5, "gotp_mailbox_overflow_kills_total": 1} {
		f := fams[name]
		if f == nil {
			t.Errorf("no metric %s", name)
			continue
		}
		if v := f.GetMetric()[0].GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
