// Command gcwindows tells how much of a chat-load run's latency tail
// falls in the server's garbage collections. It reads the server's
// execution trace (chat-load -trace) and the run's message latencies
// (chat-load -latencies) and prints each GC's concurrent mark phase, how
// many of the slowest 1% of messages were sent during one (or within
// -slack before one ended), and the p99 of the messages sent outside
// them.
//
//	chat-load -server gotp -messages 10 -rate 2000 -trace t.out -latencies lat.txt
//	go run ./cmd/gcwindows -trace t.out -latencies lat.txt   # in bench/
//
// The two files share a clock: the trace's wall-clock snapshots (Go 1.25
// and later) and the latencies file's "# start <Unix ns>" line.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	tracePath := flag.String("trace", "", "the server's execution trace (chat-load -trace)")
	latPath := flag.String("latencies", "", "the run's latencies (chat-load -latencies)")
	slack := flag.Duration("slack", 2*time.Millisecond, "a message sent this long before a mark phase began counts as in it")
	flag.Parse()
	if *tracePath == "" || *latPath == "" {
		flag.Usage()
		os.Exit(2)
	}
	marks, err := markPhases(*tracePath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcwindows:", err)
		os.Exit(1)
	}
	msgs, err := readLatencies(*latPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcwindows:", err)
		os.Exit(1)
	}
	report(os.Stdout, marks, msgs, *slack)
}

// span is a time range, in ns since the Unix epoch.
type span struct{ from, to int64 }

// msg is one message: when it was sent (ns since the Unix epoch) and its
// send→receive latency (ns).
type msg struct{ at, lat int64 }

// markPhases returns the GC mark phases of the trace at path, on the wall
// clock.
func markPhases(path string) ([]span, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	var (
		snap  *trace.ClockSnapshot
		begin trace.Time
		open  bool
		raw   [][2]trace.Time
	)
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch ev.Kind() {
		case trace.EventSync:
			if s := ev.Sync().ClockSnapshot; s != nil && snap == nil {
				snap = s
			}
		case trace.EventRangeBegin:
			if ev.Range().Name == "GC concurrent mark phase" {
				begin, open = ev.Time(), true
			}
		case trace.EventRangeEnd:
			if ev.Range().Name == "GC concurrent mark phase" && open {
				raw = append(raw, [2]trace.Time{begin, ev.Time()})
				open = false
			}
		}
	}
	if snap == nil {
		return nil, errors.New("the trace has no wall-clock snapshot (it needs Go 1.25 or later)")
	}
	wall := func(t trace.Time) int64 { return snap.Wall.UnixNano() + int64(t-snap.Trace) }
	out := make([]span, len(raw))
	for i, m := range raw {
		out[i] = span{wall(m[0]), wall(m[1])}
	}
	return out, nil
}

// readLatencies reads a chat-load -latencies file.
func readLatencies(path string) ([]msg, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var start int64
	var out []msg
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# start "); ok {
			if start, err = strconv.ParseInt(rest, 10, 64); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, line, err)
			}
			continue
		}
		var at, lat int64
		if _, err := fmt.Sscan(line, &at, &lat); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		out = append(out, msg{at: at, lat: lat})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if start == 0 {
		return nil, fmt.Errorf(`%s: no "# start" line (a chat-load before 2026-12-07)`, path)
	}
	for i := range out {
		out[i].at += start
	}
	return out, nil
}

// p99 returns the 99th percentile of the latencies of ms (0 if none).
func p99(ms []msg) time.Duration {
	if len(ms) == 0 {
		return 0
	}
	l := make([]int64, len(ms))
	for i, m := range ms {
		l[i] = m.lat
	}
	slices.Sort(l)
	return time.Duration(l[len(l)*99/100])
}

func report(w io.Writer, marks []span, msgs []msg, slack time.Duration) {
	in := func(m msg) bool {
		for _, s := range marks {
			if m.at >= s.from-int64(slack) && m.at <= s.to {
				return true
			}
		}
		return false
	}
	for _, s := range marks {
		fmt.Fprintf(w, "GC mark phase: %.1f ms\n", float64(s.to-s.from)/1e6)
	}
	if len(msgs) == 0 {
		fmt.Fprintln(w, "no messages")
		return
	}
	all := p99(msgs)
	var outside []msg
	slow, slowIn := 0, 0
	for _, m := range msgs {
		if !in(m) {
			outside = append(outside, m)
		}
		if time.Duration(m.lat) >= all {
			slow++
			if in(m) {
				slowIn++
			}
		}
	}
	fmt.Fprintf(w, "messages: %d, p99 %v; sent in a mark phase: %d, of the slowest 1%% (%d): %d; p99 of the others %v\n",
		len(msgs), all.Round(time.Microsecond), len(msgs)-len(outside), slow, slowIn, p99(outside).Round(time.Microsecond))
}
