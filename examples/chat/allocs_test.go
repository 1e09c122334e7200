package chat

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestAllocationsPerMessage pins what one SEND costs the server in
// allocations, all of them (reader, connection, history owner, SQLite,
// the recipient's MSG): a client sends to another and reads its SENT, the
// other reads the MSG, with buffers of their own, so that what
// testing.AllocsPerRun counts is the server's (and a few of the
// runtime's). Before the reply formatting, the try-write, the history
// owner's Batch function and the SEND's request stopped allocating, one
// such message cost 41 (main at 75ebe88); 28 until the history owner's
// commit stopped giving the SQLite driver a context that can end (the
// driver then starts a goroutine per statement to watch it); then 25, and
// 26 on 2026-12-07 (SQLite's driver and database/sql are ~10 of them); 22
// since the history owner answers a quiet chat's SEND itself (no message
// to the sender's process, no MakeRef) and commits with a context made
// once.
func TestAllocationsPerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ts := startService(t, t.TempDir())
	a := connect(t, ts, "ana")
	b := connect(t, ts, "bob")
	send := []byte("SEND bob hello there\n")
	wantSent := []byte("SENT bob\n")
	wantMsg := []byte("MSG ana hello there\n")
	bufA := make([]byte, len(wantSent))
	bufB := make([]byte, len(wantMsg))
	one := func() {
		if _, err := a.c.Write(send); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(a.c, bufA); err != nil || !bytes.Equal(bufA, wantSent) {
			t.Fatalf("sender read %q, %v", bufA, err)
		}
		if _, err := io.ReadFull(b.c, bufB); err != nil || !bytes.Equal(bufB, wantMsg) {
			t.Fatalf("recipient read %q, %v", bufB, err)
		}
	}
	for range 50 { // prepared statements, stacks, buffers
		one()
	}
	a.c.SetDeadline(time.Now().Add(time.Minute))
	b.c.SetDeadline(time.Now().Add(time.Minute))
	got := testing.AllocsPerRun(500, one)
	t.Logf("%.1f allocations per message", got)
	if got > 23 {
		t.Errorf("%.1f allocations per message, want at most 23", got)
	}
}

// formatSink keeps what TestFormatOneAllocation formats on the heap, as
// the outbox does.
var formatSink []byte

// TestFormatOneAllocation: the reply and the event of every message are
// formatted in one allocation each, as FormatReply formats them.
func TestFormatOneAllocation(t *testing.T) {
	if got := testing.AllocsPerRun(100, func() { formatSink = formatSent("bob") }); got != 1 {
		t.Errorf("formatSent: %v allocations, want 1", got)
	}
	if got := testing.AllocsPerRun(100, func() { formatSink = formatMsg("ana", "hello") }); got != 1 {
		t.Errorf("formatMsg: %v allocations, want 1", got)
	}
	if s, want := formatSent("bob"), FormatReply(Sent{To: "bob"}); !bytes.Equal(s, want) {
		t.Errorf("formatSent %q, FormatReply %q", s, want)
	}
	if s, want := formatMsg("ana", "hi"), FormatReply(Msg{From: "ana", Text: "hi"}); !bytes.Equal(s, want) {
		t.Errorf("formatMsg %q, FormatReply %q", s, want)
	}
}
