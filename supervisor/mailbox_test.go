package supervisor_test

import (
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// A child killed by its mailbox limit (OverflowKill) is a crash like any
// other: the supervisor logs it with its distinct reason and restarts it.
func TestChildKilledByMailboxLimitIsRestarted(t *testing.T) {
	rec := gotptest.NewLogRecorder()
	n := gotptest.NewNode(t, gotptest.Logger(rec.Logger()))
	hold := make(chan struct{})
	defer close(hold)
	limited := make(chan struct{}, 2) // each incarnation says it has its limit
	busy := func(p *gotp.Process) error {
		p.SetMailboxLimit(2, gotp.OverflowKill)
		limited <- struct{}{}
		<-hold // never receives: every message waits
		return nil
	}
	sup, err := supervisor.Start(gotptest.Context(t), n, supervisor.Spec{
		Strategy: supervisor.OneForOne,
		Children: []supervisor.ChildSpec{supervisor.Func("busy", busy)},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := pids(mustWhich(t, n, sup))["busy"]
	down := gotptest.Watch(t, n, before)
	gotptest.Recv(t, limited) // messages sent before the limit is set would not count against it
	for i := range 3 {
		n.Send(before, i)
	}
	if r := gotptest.Recv(t, down); !errors.Is(r, gotp.ErrMailboxOverflow) {
		t.Fatalf("child exited with %v, want ErrMailboxOverflow", r)
	}
	after := pids(mustWhich(t, n, sup))["busy"]
	if after == before || !n.IsAlive(after) {
		t.Fatalf("child not restarted: %v -> %v", before, after)
	}
	term := rec.Find("supervisor: child terminated")
	if len(term) != 1 {
		t.Fatalf("child terminated logged %d times, want 1", len(term))
	}
	if r, _ := term[0].Attrs["reason"].(error); !errors.Is(r, gotp.ErrMailboxOverflow) {
		t.Fatalf("logged reason %v, want ErrMailboxOverflow", term[0].Attrs["reason"])
	}
	if _, k := n.MailboxOverflows(); k != 1 {
		t.Fatalf("MailboxOverflows counts %d kills, want 1", k)
	}
}
