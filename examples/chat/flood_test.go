//go:build unix

package chat

import (
	"strings"
	"testing"
	"time"
)

// With Config.CommandRate, a client that pipelines commands gets every
// reply, in order, and the commands beyond the burst wait (counted);
// without it none waits.
func TestCommandRateHoldsBackAPipeliningClient(t *testing.T) {
	const n, burst = 30, 5
	for _, rate := range []float64{0, 100} {
		ts := startServiceConfig(t, Config{CommandRate: rate, CommandBurst: burst})
		c := connect(t, ts, "flood") // CONNECT takes a token too
		c.send(strings.Repeat("WHO\n", n-1) + "WHO")
		for i := range n {
			if got := c.line(); got != "ONLINE 1 flood" {
				t.Fatalf("rate %v: reply %d is %q", rate, i, got)
			}
		}
		got := ts.ThrottledCommands()
		if rate == 0 && got != 0 {
			t.Fatalf("no command rate: %d commands waited, want 0", got)
		}
		// n+1 commands, burst of them at once: the others wait, but for
		// those whose token came while the earlier ones were handled.
		if rate > 0 && got < n-burst-5 {
			t.Fatalf("rate %v, burst %d: %d of %d commands waited, want about %d", rate, burst, got, n+1, n+1-burst)
		}
	}
}

// The bucket gives burst tokens at once, then one every 1/rate, and never
// holds more than burst however long it is left.
func TestCommandBucket(t *testing.T) {
	if newCommandBucket(0, 5) != nil {
		t.Fatal("a zero rate has a bucket")
	}
	b := newCommandBucket(10, 3)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if d := b.delay(t0); d != 0 {
			t.Fatalf("token %d of the burst: delay %v", i, d)
		}
	}
	if d := b.delay(t0); d != 100*time.Millisecond {
		t.Fatalf("the fourth at once: delay %v, want 100ms", d)
	}
	if d := b.delay(t0.Add(100 * time.Millisecond)); d != 100*time.Millisecond {
		t.Fatalf("the fifth, when the fourth was due: delay %v, want 100ms", d)
	}
	if d := b.delay(t0.Add(time.Hour)); d != 0 {
		t.Fatalf("after an hour: delay %v", d)
	}
	for range 2 {
		b.delay(t0.Add(time.Hour))
	}
	if d := b.delay(t0.Add(time.Hour)); d <= 0 {
		t.Fatal("an hour idle gave more than the burst")
	}
}
