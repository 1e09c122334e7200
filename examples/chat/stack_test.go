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
// for input, over TCP and over the WebSocket. If it did not, every reader
// would grow its stack for its next SEND after each garbage collection,
// which shrinks it again while it waits: with a thousand users, the
// collector's stack copies were most of its work (sitting AN), and its
// longer cycles most of the chat's slowest messages.
func TestSendRunsInTheReadersStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's frames are larger")
	}
	const users = 200
	t.Run("tcp", func(t *testing.T) {
		ts := startService(t, t.TempDir())
		cs := make([]*client, users)
		for i := range cs {
			cs[i] = connect(t, ts, fmt.Sprintf("u%d", i))
		}
		checkStacksKept(t, users, func(i int) {
			from, to := cs[i], cs[(i+1)%users]
			if _, err := fmt.Fprintf(from.c, "SEND u%d hello\n", (i+1)%users); err != nil {
				t.Fatal(err)
			}
			readExactly(t, from.c, fmt.Sprintf("SENT u%d\n", (i+1)%users))
			readExactly(t, to.c, fmt.Sprintf("MSG u%d hello\n", i))
		})
	})
	t.Run("websocket", func(t *testing.T) {
		ts := startService(t, t.TempDir())
		cs := make([]*wsClient, users)
		for i := range cs {
			cs[i] = wsConnect(t, ts, fmt.Sprintf("u%d", i))
		}
		checkStacksKept(t, users, func(i int) {
			cs[i].expectType(map[string]string{"cmd": "send", "to": fmt.Sprintf("u%d", (i+1)%users), "text": "hello"}, "sent")
			if got := cs[(i+1)%users].next(); got.Type != "msg" || got.Text != "hello" {
				t.Fatalf("recipient got %+v", got)
			}
		})
	})
}

// readExactly reads len(want) bytes from r and fails unless they are want.
func readExactly(t *testing.T, r io.Reader, want string) {
	t.Helper()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(r, buf); err != nil || !bytes.Equal(buf, []byte(want)) {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// checkStacksKept runs one(0) (the history's statements, the owner's
// stack), collects twice, then one(i) for each of users connections, and
// fails if the goroutines' stacks grew by more than 1 KiB a connection: a
// reader that grew would take 4 KiB more (the stack pool's 32 KiB spans
// make a span or two of noise).
func checkStacksKept(t *testing.T, users int, one func(i int)) {
	t.Helper()
	one(0)
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
	if grown > int64(users)*1024 {
		t.Errorf("stacks grew by %d B for %d SENDs (%d B each): the SEND path outgrows the reader's stack", grown, users, grown/int64(users))
	}
}
