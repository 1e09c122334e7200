package chat

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// TestSendRunsInTheReadersStack: a SEND that an idle connection runs on
// its reader's goroutine fits in the stack the reader has while it waits
// for input. If it did not, every reader would grow its stack for its next
// SEND after each garbage collection, which shrinks it again while it
// waits: with a thousand users, the collector's stack copies were most of
// its work (sitting AN), and its longer cycles most of the chat's slowest
// messages.
func TestSendRunsInTheReadersStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's frames are larger")
	}
	ts := startService(t, t.TempDir())
	const users = 200
	cs := make([]*client, users)
	for i := range cs {
		cs[i] = connect(t, ts, fmt.Sprintf("u%d", i))
	}
	one := func(i int) {
		from, to := cs[i], cs[(i+1)%users]
		if _, err := from.c.Write([]byte(fmt.Sprintf("SEND u%d hello\n", (i+1)%users))); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("SENT u%d\n", (i+1)%users)
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(from.c, buf); err != nil || !bytes.Equal(buf, []byte(want)) {
			t.Fatalf("sender read %q, %v", buf, err)
		}
		want = fmt.Sprintf("MSG u%d hello\n", i)
		buf = make([]byte, len(want))
		if _, err := io.ReadFull(to.c, buf); err != nil || !bytes.Equal(buf, []byte(want)) {
			t.Fatalf("recipient read %q, %v", buf, err)
		}
	}
	one(0) // the history's statements, the owner's stack
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range users {
		one(i)
	}
	runtime.ReadMemStats(&after)
	grown := int64(after.StackInuse) - int64(before.StackInuse)
	t.Logf("stacks grew by %d B for %d SENDs", grown, users)
	if grown > users*1024 {
		t.Errorf("stacks grew by %d B for %d SENDs (%d B each): the SEND path outgrows the reader's stack", grown, users, grown/users)
	}
}
