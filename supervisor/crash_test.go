package supervisor_test

import (
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/supervisor"
)

// TestCrashOfChildIsReportedInOrder: a child that panics is reported by
// the runtime (with its stack), then by its supervisor as terminated (with
// the reason) and restarted, in that order.
func TestCrashOfChildIsReportedInOrder(t *testing.T) {
	n, rec := newNodeLog(t)
	sup, err := supervisor.Start(tctx(t), n, supervisor.Spec{
		Children: []supervisor.ChildSpec{supervisor.Func("w", worker)},
	})
	if err != nil {
		t.Fatal(err)
	}
	old := pids(mustWhich(t, n, sup))["w"]
	down := waitDown(n, old)
	n.Send(old, panicWith{"corrupt input"})
	recvReason(t, down)
	mustWhich(t, n, sup) // handled after the child's Exit: the restart is done
	rec.mu.Lock()
	var seq []string
	for _, r := range rec.recs {
		seq = append(seq, r.msg)
	}
	recs := append([]logRec(nil), rec.recs...)
	rec.mu.Unlock()
	want := []string{gotp.CrashReportMsg, "supervisor: child terminated", "supervisor: child restarted"}
	if strings.Join(seq, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", seq, want)
	}
	crash, term := recs[0], recs[1]
	if crash.attrs["pid"] != old || !strings.Contains(crash.attrs["stack"].(string), "supervisor_test.worker") {
		t.Errorf("crash report %v", crash.attrs)
	}
	if term.attrs["child"] != "w" || term.attrs["pid"] != old || term.attrs["action"] != "restart" {
		t.Errorf("child terminated %v", term.attrs)
	}
	if r, ok := term.attrs["reason"].(error); !ok || r.Error() != "panic: corrupt input" {
		t.Errorf("child terminated reason %v", term.attrs["reason"])
	}
}
