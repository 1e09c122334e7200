package chat

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gotp/gotp"
)

// Killing the history owner outright (gotp.ErrKill, as the observer's kill
// button does: no Terminate) restarts it with every message intact, and
// leaves nothing running once the service and the node have stopped.
func TestHistoryOwnerKilled(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	ana.expect("SEND bob before the kill", "SENT bob")
	bob.line()
	old, _ := ts.n.Whereis(historyName)
	ts.n.Exit(old, gotp.ErrKill)
	eventually(t, "a new history owner", func() bool {
		pid, ok := ts.n.Whereis(historyName)
		return ok && pid != old
	})
	ana.expect("SEND bob after the kill", "SENT bob")
	bob.line()
	bob.expect("HISTORY ana", "HISTORY 2")
	if a, b := bob.line(), bob.line(); a != "ana before the kill" || b != "ana after the kill" {
		t.Fatalf("history = %q, %q", a, b)
	}
	ana.c.Close()
	bob.c.Close()
	ts.stop(t)
	// Nothing of the service may outlive it, the killed owner's store
	// included (an *sql.DB left open keeps a goroutine).
	goleak.VerifyNone(t)
}
