package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gotp/gotp/examples/chat"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/internal/fdlimit"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main() // the re-executed client process
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestSmallLoad runs the whole program, server here and clients in a child
// process, at a small size, and checks that every message was counted and
// every figure reported.
func TestSmallLoad(t *testing.T) {
	for _, server := range []string{"gotp", "bare", "bare-sqlite", "bare-sqlite-group"} {
		t.Run(server, func(t *testing.T) { smallLoad(t, server) })
	}
}

func smallLoad(t *testing.T, server string) {
	var out strings.Builder
	data := t.TempDir()
	if err := run([]string{"-server", server, "-users", "20", "-messages", "15", "-window", "3", "-data", data}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if server != "bare" { // every message acknowledged is in the history
		db, err := inbox.OpenSQLite(t.Context(), filepath.Join(data, "history.db"))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = db.QueryRowContext(t.Context(), `SELECT count(*) FROM messages`).Scan(&n)
		db.Close()
		if err != nil || n != 300 {
			t.Errorf("the history holds %d messages (%v), want 300", n, err)
		}
	}
	s := out.String()
	t.Log(s)
	for _, re := range []string{
		`connect: 20 users in [0-9.]+ s`,
		`messages: 300 in [0-9.]+ s = [0-9]+ messages/s`,
		`send→receive latency: p50 \S+, p99 \S+, max \S+`,
		`server bytes per connection: (-?[0-9]+) heap\+stack`,
		`server runtime over the load: [0-9]+ GCs \([0-9.]+ ms of CPU\), [0-9.]+ allocations \([0-9]+ B\) per message; scheduler latency p50 \S+, p99 \S+, p99.9 \S+`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("output lacks %s", re)
		}
	}
	m := regexp.MustCompile(`server bytes per connection: (-?[0-9]+) heap\+stack`).FindStringSubmatch(s)
	if m != nil {
		if b, _ := strconv.Atoi(m[1]); b <= 0 {
			t.Errorf("bytes per connection = %d, want > 0", b)
		}
	}
}

// TestHostileMix runs the users beside flooding clients, users and
// flooders alike some of them over the WebSocket, and checks that every
// message still arrives and that the flooders were answered (slowly)
// rather than cut off.
func TestHostileMix(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-users", "20", "-ws", "8", "-messages", "20", "-rate", "400", "-flood", "3", "-flood-ws", "1", "-flood-read", "8192", "-data", t.TempDir()}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	t.Log(s)
	for _, re := range []string{
		`20 users \(12 TCP, 8 WebSocket\)`,
		`messages: 400 in [0-9.]+ s`,
		`flooding clients \(2 TCP, 1 WebSocket\): [1-9][0-9]* replies \([0-9.]+ MB\) read at 8192 B/s each; 0 of 3 disconnected`,
		`server RSS peak: [0-9.]+ MB`,
		`server: 0 slow consumers disconnected`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("output lacks %s", re)
		}
	}
}

// TestIdleConnections: -messages 0 connects, measures and stops.
func TestIdleConnections(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-users", "30", "-ws", "30", "-messages", "0", "-data", t.TempDir()}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if s := out.String(); !regexp.MustCompile(`connect: 30 users in .*\n(?s:.*)server bytes per connection: [0-9]+ heap\+stack`).MatchString(s) {
		t.Fatalf("output:\n%s", s)
	}
}

func TestBadFlags(t *testing.T) {
	var out strings.Builder
	for _, args := range [][]string{{"-users", "1"}, {"-window", "0"}, {"-nope"}, {"-server", "erlang"}, {"-server", "bare", "-ws", "1"}, {"-ws", "5", "-users", "4"}, {"-history-sync", "off"}} {
		if err := run(args, &out); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

// TestAgainstAddrWithRate: clients only, against a server given by
// address, at an offered rate: 20 users × 5 messages at 200 messages/s
// take at least 4 intervals of 100 ms.
func TestAgainstAddrWithRate(t *testing.T) {
	s, err := startBare(t.Context(), t.TempDir(), false, chat.SyncFull, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	var out strings.Builder
	if err := run([]string{"-addr", s.addr(), "-users", "20", "-messages", "5", "-rate", "200"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`messages: 100 in ([0-9.]+) s`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	if secs, _ := strconv.ParseFloat(m[1], 64); secs < 0.4 {
		t.Fatalf("100 messages at 200/s took %.2f s, want ≥ 0.4 s", secs)
	}
	if strings.Contains(out.String(), "bytes per connection") {
		t.Fatal("memory figures reported for a server in another process")
	}
}

// BenchmarkH1Chat is workload H1 in one process (server and clients
// together, so no bytes-per-connection figure: the program measures that
// with the clients in another process). Each iteration is a whole run:
// 1,000 users × 100 messages, closed loop, window 1 (100 × 10 with
// -short). It reports messages/s and the p50 and p99 send-to-receive
// latency, for the chat and its bare-Go baselines:
//
//	go test -run '^$' -bench H1 -benchtime 1x -count 3 ./cmd/chat-load
func BenchmarkH1Chat(b *testing.B) {
	users, messages := 1000, 100
	if testing.Short() {
		users, messages = 100, 10
	}
	for _, server := range []string{"gotp", "bare-sqlite", "bare-sqlite-group", "bare"} {
		b.Run(server, func(b *testing.B) {
			if _, err := fdlimit.Raise(uint64(2*users + 256)); err != nil {
				b.Fatal(err)
			}
			var rate, p50, p99 []float64
			for b.Loop() {
				b.StopTimer()
				ctx := b.Context()
				srv, err := startServer(ctx, server, b.TempDir(), users+16, config{commandBurst: chat.DefaultCommandBurst})
				if err != nil {
					b.Fatal(err)
				}
				stop := srv.stop
				l, err := newLoad(ctx, config{users: users, messages: messages, window: 1, addr: srv.addr})
				if err != nil {
					stop()
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := l.run(ctx)
				b.StopTimer()
				l.close()
				stop()
				if err != nil {
					b.Fatal(err)
				}
				var n int
				var secs float64
				var q50, q99, qmax int64
				fmt.Sscan(res, &n, &secs, &q50, &q99, &qmax)
				rate = append(rate, float64(n)/secs)
				p50 = append(p50, float64(q50))
				p99 = append(p99, float64(q99))
				b.StartTimer()
			}
			b.ReportMetric(median(rate), "messages/s")
			b.ReportMetric(median(p50), "p50-ns")
			b.ReportMetric(median(p99), "p99-ns")
		})
	}
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// serverFrame is an unmasked frame of the server's: opcode op, n bytes of
// payload.
func serverFrame(op byte, n int) []byte {
	b := []byte{0x80 | op}
	switch {
	case n < 126:
		b = append(b, byte(n))
	case n < 1<<16:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, bytes.Repeat([]byte{'x'}, n)...)
}

// FuzzFrameCounter: the WebSocket flooder counts the data frames of a
// stream however its reads cut it (headers of 2, 4 and 10 bytes, control
// frames not counted).
func FuzzFrameCounter(f *testing.F) {
	f.Add([]byte{1, 7, 200, 3})
	f.Add([]byte{255})
	f.Fuzz(func(t *testing.T, cuts []byte) {
		var stream []byte
		for _, n := range []int{0, 5, 125, 126, 300, 70000} {
			stream = append(stream, serverFrame(1, n)...)
			stream = append(stream, serverFrame(9, 3)...) // a ping between them
		}
		var fc frameCounter
		got := 0
		for i := 0; len(stream) > 0; i++ {
			k := len(stream)
			if len(cuts) > 0 {
				k = min(k, int(cuts[i%len(cuts)])+1)
			}
			got += fc.feed(stream[:k])
			stream = stream[k:]
		}
		if got != 6 || fc.left != 0 || len(fc.head) != 0 {
			t.Fatalf("counted %d frames (left %d, head %d), want 6", got, fc.left, len(fc.head))
		}
	})
}
