//go:build unix

package chat

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// With flood control, a client that pipelines commands gets every reply,
// in order, and the commands beyond the burst wait (counted); with it
// turned off (a negative rate) none waits.
func TestCommandRateHoldsBackAPipeliningClient(t *testing.T) {
	const n, burst = 30, 5
	for _, rate := range []float64{-1, 100} {
		ts := startServiceConfig(t, Config{CommandRate: rate, CommandBurst: burst})
		c := connect(t, ts, "flood") // CONNECT costs too
		c.send(strings.Repeat("WHO\n", n-1) + "WHO")
		for i := range n {
			if got := c.line(); got != "ONLINE 1 flood" {
				t.Fatalf("rate %v: reply %d is %q", rate, i, got)
			}
		}
		got := ts.ThrottledCommands()
		if rate < 0 && got != 0 {
			t.Fatalf("flood control off: %d commands waited, want 0", got)
		}
		// n+1 commands of one unit each, burst of them at once: the
		// others wait, but for those whose units came while the earlier
		// ones were handled.
		if rate > 0 && got < n-burst-5 {
			t.Fatalf("rate %v, burst %d: %d of %d commands waited, want about %d", rate, burst, got, n+1, n+1-burst)
		}
	}
}

// Under the default configuration, a client that pipelines WHO while many
// users are online is held back (its commands wait, counted, and every
// one is answered), while a user who pipelines a hundred SENDs is not.
func TestDefaultFloodControl(t *testing.T) {
	ts := startServiceConfig(t, Config{})
	// 30 users with long names: a WHO reply of about 2 KB, 15 units.
	for i := range 30 {
		connect(t, ts, fmt.Sprintf("%02d%s", i, strings.Repeat("u", MaxName-2)))
	}
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	const sends = 100
	var b strings.Builder
	for k := range sends {
		fmt.Fprintf(&b, "SEND bob message %d %d\n", k, time.Now().UnixNano())
	}
	ana.send(strings.TrimSuffix(b.String(), "\n"))
	for k := range sends {
		if got := ana.line(); got != "SENT bob" {
			t.Fatalf("SEND %d: %q", k, got)
		}
		if got := bob.line(); !strings.HasPrefix(got, fmt.Sprintf("MSG ana message %d ", k)) {
			t.Fatalf("MSG %d: %q", k, got)
		}
	}
	if got := ts.ThrottledCommands(); got != 0 {
		t.Fatalf("a user pipelining %d SENDs: %d commands waited, want 0", sends, got)
	}

	// 40 WHO of 15 units: 600, against a burst of 400.
	flood := connect(t, ts, "flood")
	const whos = 40
	flood.send(strings.TrimSuffix(strings.Repeat("WHO\n", whos), "\n"))
	for i := range whos {
		if got := flood.line(); !strings.HasPrefix(got, "ONLINE 33 ") {
			t.Fatalf("WHO %d: %.40q", i, got)
		}
	}
	// The replies are charged to the commands after them: of the last
	// WHOs, those beyond the burst waited.
	if got := ts.ThrottledCommands(); got == 0 {
		t.Fatalf("a client pipelining %d WHO of 33 users: no command waited", whos)
	}
	// The others were not held back meanwhile.
	ana.expect("SEND bob after", "SENT bob")
	if got := bob.line(); got != "MSG ana after" {
		t.Fatalf("MSG after the flood: %q", got)
	}
}

// The budget gives burst units at once, then rate a second; it never
// holds more than burst however long it is left; replies are charged by
// their bytes, to the next command.
func TestCommandBucket(t *testing.T) {
	if newCommandBucket(0, 5) != nil || newCommandBucket(-1, 5) != nil {
		t.Fatal("a rate ≤ 0 has a budget")
	}
	b := newCommandBucket(10, 3)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if d := b.delay(t0, 1, 0); d != 0 {
			t.Fatalf("unit %d of the burst: delay %v", i, d)
		}
	}
	if d := b.delay(t0, 1, 0); d != 100*time.Millisecond {
		t.Fatalf("the fourth at once: delay %v, want 100ms", d)
	}
	if d := b.delay(t0.Add(100*time.Millisecond), 1, 0); d != 100*time.Millisecond {
		t.Fatalf("the fifth, when the fourth was due: delay %v, want 100ms", d)
	}
	if d := b.delay(t0.Add(time.Hour), 1, 0); d != 0 {
		t.Fatalf("after an hour: delay %v", d)
	}
	for range 2 {
		b.delay(t0.Add(time.Hour), 1, 0)
	}
	if d := b.delay(t0.Add(time.Hour), 1, 0); d <= 0 {
		t.Fatal("an hour idle gave more than the burst")
	}

	// 20 units of replies (2,560 bytes) charged to the next command,
	// with its own text.
	b = newCommandBucket(10, 30)
	if d := b.delay(t0, 0, 20*CostBytes); d != 0 {
		t.Fatalf("20 of 30 units: delay %v", d)
	}
	if d := b.delay(t0, 2*CostBytes, 30*CostBytes); d != 200*time.Millisecond {
		t.Fatalf("32 of 30 units: delay %v, want 200ms", d)
	}
	if d := b.delay(t0.Add(200*time.Millisecond), 0, 30*CostBytes); d != 100*time.Millisecond {
		t.Fatalf("the same replies charged twice? delay %v, want 100ms", d)
	}
	if d := b.delay(t0.Add(300*time.Millisecond), CostBytes/2, 30*CostBytes+CostBytes/4); d != 100*time.Millisecond {
		t.Fatalf("a command under CostBytes in and out costs 1: delay %v, want 100ms", d)
	}
	if n := commandBytes(Send{To: "bob", Text: "hello"}); n != 5 {
		t.Fatalf("a SEND of hello carries %d bytes, want 5", n)
	}
}

// floodRun sends, under the default flood control, a command of in
// bytes whose reply is reply bytes every interval (or as soon as the
// budget lets it), for d; it returns how many were sent, and how many
// were held back.
func floodRun(interval time.Duration, in, reply int, d time.Duration) (sent, throttled int) {
	b := newCommandBucket(DefaultCommandRate, DefaultCommandBurst)
	now := time.Unix(1000, 0)
	var replied int64
	for end := now.Add(d); now.Before(end); now = now.Add(interval) {
		if w := b.delay(now, in, replied); w > 0 {
			throttled++
			now = now.Add(w) // the client is held back
		}
		sent++
		replied += int64(reply)
	}
	return sent, throttled
}

// The defaults do not hold back a user of H1 flat out (1,000 users send
// about 55 messages a second each, SEND of 40 bytes, SENT), not even at
// three times that rate, for a minute; a client pipelining WHO with 1,000
// users online (9 KB a reply) is held to CommandRate × CostBytes bytes of
// replies a second.
func TestDefaultFloodControlRates(t *testing.T) {
	send := commandBytes(Send{To: "user0002", Text: "17 1733212345678901234"})
	sent := len(formatSent("user0002"))
	for _, perSecond := range []int{55, 165} {
		if _, n := floodRun(time.Second/time.Duration(perSecond), send, sent, time.Minute); n != 0 {
			t.Fatalf("a user sending %d messages a second: %d commands held back", perSecond, n)
		}
	}
	names := make([]string, 1010)
	for i := range names {
		names[i] = fmt.Sprintf("user%04d", i)
	}
	who := len(FormatReply(Online{Names: names}))
	// Unthrottled, the bound on output and a client reading 64 KiB/s
	// allow about 7 a second.
	n, held := floodRun(time.Second/7, 0, who, time.Minute)
	if held == 0 {
		t.Fatal("a WHO flooder was never held back")
	}
	rate := float64(n*who) / time.Minute.Seconds()
	if want := float64(DefaultCommandRate*CostBytes) + float64(DefaultCommandBurst*CostBytes)/time.Minute.Seconds(); rate > 1.05*want {
		t.Fatalf("a WHO flooder gets %.0f bytes of replies a second, want ≤ %.0f", rate, want)
	}
	t.Logf("a WHO of %d bytes; a WHO flooder gets %d in a minute, %.0f B/s", who, n, rate)
}

// A SAY costs flood control by what it makes the service write to the
// room's members, not only by its own text: a client pipelining SAYs to a
// room of 41 members is held back (every SAY still answered, every member
// given every ROOM line), where the same SAYs to a room of its own are not.
// One client cannot make the service fan out more than it could make it
// write to the client itself.
func TestSayChargedByItsRoom(t *testing.T) {
	ts := startServiceConfig(t, Config{})
	talker := connect(t, ts, "talker")
	text := strings.Repeat("x", 100)
	says := func(room string, n int) {
		t.Helper()
		var b strings.Builder
		for range n {
			fmt.Fprintf(&b, "SAY %s %s\n", room, text)
		}
		talker.send(strings.TrimSuffix(b.String(), "\n"))
		for i := 0; i < 2*n; i++ { // an OK and its own ROOM line for each, in either order
			if got := talker.line(); got != "OK" && got != "ROOM "+room+" talker "+text {
				t.Fatalf("SAY to %s: %.40q", room, got)
			}
		}
	}

	// Alone in a room: 30 SAYs of about 2 units each, against a burst of 400.
	talker.expect("JOIN alone", "OK")
	says("alone", 30)
	if got := ts.ThrottledCommands(); got != 0 {
		t.Fatalf("30 SAYs to a room of one: %d commands waited, want 0", got)
	}

	// A room of 41: a ROOM line of 119 bytes to each member, 38 units a
	// SAY. A cost is charged to the commands read after it and the reader
	// runs at most MaxPending commands ahead: by the 30th SAY at least 21
	// are charged (about 800 units).
	const members = 40
	others := make([]*client, members)
	for i := range others {
		others[i] = connect(t, ts, fmt.Sprintf("m%02d", i))
		others[i].expect("JOIN big", "OK")
	}
	talker.expect("JOIN big", "OK")
	says("big", 30)
	if got := ts.ThrottledCommands(); got == 0 {
		t.Fatalf("30 SAYs to a room of %d: no command waited", members+1)
	}
	for i, m := range others {
		for k := range 30 {
			if got := m.line(); got != "ROOM big talker "+text {
				t.Fatalf("member %d, ROOM line %d: %.40q", i, k, got)
			}
		}
	}
}
