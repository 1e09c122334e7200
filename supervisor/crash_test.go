package supervisor_test

import (
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// TestCrashOfChildIsReportedInOrder: a child that panics is reported by
// the runtime (with its stack), then by its supervisor as terminated (with
// the reason) and restarted, in that order.
func TestCrashOfChildIsReportedInOrder(t *testing.T) {
	rec := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(rec.Logger()))
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
		Children: []supervisor.ChildSpec{supervisor.Func("w", worker)},
	})
	if err != nil {
		t.Fatal(err)
	}
	old := pids(mustWhich(t, n, sup))["w"]
	down := gotptest.Watch(t, n, old)
	n.Send(old, panicWith{"corrupt input"})
	gotptest.Recv(t, down)
	mustWhich(t, n, sup) // handled after the child's Exit: the restart is done
	recs := rec.Records()
	var seq []string
	for _, r := range recs {
		seq = append(seq, r.Message)
	}
	want := []string{gotp.CrashReportMsg, "supervisor: child terminated", "supervisor: child restarted"}
	if strings.Join(seq, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", seq, want)
	}
	crash, term := recs[0], recs[1]
	if crash.Attrs["pid"] != old || !strings.Contains(crash.Attrs["stack"].(string), "supervisor_test.worker") {
		t.Errorf("crash report %v", crash.Attrs)
	}
	if term.Attrs["child"] != "w" || term.Attrs["pid"] != old || term.Attrs["action"] != "restart" {
		t.Errorf("child terminated %v", term.Attrs)
	}
	if r, ok := term.Attrs["reason"].(error); !ok || r.Error() != "panic: corrupt input" {
		t.Errorf("child terminated reason %v", term.Attrs["reason"])
	}
}
