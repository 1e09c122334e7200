package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestMarkPhasesOnTheWallClock: a trace with a collection in it gives
// that collection's mark phase, placed on the wall clock within the time
// the trace ran.
func TestMarkPhasesOnTheWallClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := trace.Start(f); err != nil {
		t.Skipf("cannot trace: %v", err) // another trace is running (go test -trace)
	}
	runtime.GC()
	trace.Stop()
	after := time.Now()
	f.Close()
	marks, err := markPhases(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) == 0 {
		t.Fatal("no mark phase in a trace with runtime.GC in it")
	}
	for _, m := range marks {
		if m.from > m.to || m.from < before.UnixNano() || m.to > after.UnixNano() {
			t.Errorf("mark phase %v–%v outside the trace's %v–%v", time.Unix(0, m.from), time.Unix(0, m.to), before, after)
		}
	}
}

// TestReportCountsTheSlowInMarkPhases: of 200 messages, the two slowest
// sent during a mark phase are counted there, and the p99 of the others
// leaves them out.
func TestReportCountsTheSlowInMarkPhases(t *testing.T) {
	start := int64(1_000_000_000_000)
	var b strings.Builder
	fmt.Fprintf(&b, "# start %d\n", start)
	for i := range 200 {
		lat := 100_000 // 100 µs
		if i == 50 || i == 51 {
			lat = 9_000_000 // 9 ms, sent in the mark phase below
		}
		fmt.Fprintf(&b, "%d %d\n", i*1_000_000, lat)
	}
	path := filepath.Join(t.TempDir(), "lat.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, err := readLatencies(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 200 || msgs[50].at != start+50_000_000 {
		t.Fatalf("read %d messages, the 51st sent at %d", len(msgs), msgs[50].at)
	}
	var out bytes.Buffer
	report(&out, []span{{start + 49_500_000, start + 51_500_000}}, msgs, 0)
	want := "messages: 200, p99 9ms; sent in a mark phase: 2, of the slowest 1% (2): 2; p99 of the others 100µs"
	if !strings.Contains(out.String(), want) {
		t.Errorf("report:\n%s\nwant a line %q", out.String(), want)
	}
}

// FuzzReadLatencies: any file gives messages or an error, never a panic.
func FuzzReadLatencies(f *testing.F) {
	f.Add("# start 5\n1 2\n3 4\n")
	f.Add("1 2\n")
	f.Add("# start x\n")
	f.Add("# start 5\n1\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		path := filepath.Join(dir, "lat.txt")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		msgs, err := readLatencies(path)
		if err == nil {
			report(new(bytes.Buffer), nil, msgs, 0)
		}
	})
}
