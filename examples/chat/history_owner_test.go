package chat

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Appends of more text than one transaction takes (maxBatchBytes), all
// waiting at once, are committed in several transactions without another
// message to prompt the later ones: every append is answered.
func TestHistoryOwnerCommitsEveryPendingBatch(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "history-test"})
	t.Cleanup(func() { n.Stop(context.Background()) })
	owner, err := server.Start(t.Context(), n, &historyOwner{path: filepath.Join(t.TempDir(), "history.db")})
	if err != nil {
		t.Fatal(err)
	}
	const count = 100 // × 64 KiB: 6.4 MiB, more than maxBatchBytes
	answers := make(chan error, count)
	rcv, err := n.Spawn(func(p *gotp.Process) error {
		for {
			m, err := p.Receive(p.Context())
			if err != nil {
				return nil
			}
			if r, ok := m.(*appendReq); ok {
				answers <- r.err
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("x", 64<<10)
	// In one Batch: the owner, idle, starts once all of them are in its
	// mailbox, so they are pending together when its mailbox empties.
	n.Batch(func(b *gotp.Batch) {
		for range count {
			b.Send(owner, &appendReq{m: Message{From: "a", To: "b", Text: text}, pid: rcv})
		}
	})
	deadline := time.After(20 * time.Second)
	for i := range count {
		select {
		case err := <-answers:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d appends answered", i, count)
		}
	}
}
