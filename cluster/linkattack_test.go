package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// Hostile handlers on the link's goroutine (see runCall): the tests here
// attack the inline calls and their rescue.

// inlineCall calls srv from a until a call runs on b's link goroutine (a
// call may come behind another frame and be delivered instead), each time
// with a fresh server made by start; it returns the error of the call
// that ran inline.
func inlineCall(t *testing.T, a, b member, start func() gotp.PID, req any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for try := 0; try < 50; try++ {
		srv := start()
		before := b.c.Stats()
		_, err := server.Call[any](ctx, a.n, srv, req)
		// A Goexit inline is a rescue, not counted as an inline call.
		if st := b.c.Stats(); st.InlineCalls > before.InlineCalls || st.Rescues > before.Rescues {
			return err
		}
	}
	t.Fatal("no call ran on the link's goroutine in 50 tries")
	return nil
}

// TestInlineGoexitTwice: a handler that calls runtime.Goexit on the
// goroutine that replaced the link's first one (after an earlier Goexit)
// ends that goroutine too; the link goes on, and Leave then returns (the
// wait group's count of every goroutine that ended was marked done).
func TestInlineGoexitTwice(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() gotp.PID {
		pid, err := server.Start(ctx, b.n, &linkServer{})
		gotptest.Must(t, err)
		return pid
	}
	for i := range 3 {
		err := inlineCall(t, a, b, start, "goexit")
		if err == nil || !strings.Contains(err.Error(), gotp.ErrGoexit.Error()) {
			t.Fatalf("goexit %d: %v", i, err)
		}
	}
	if st := b.c.Stats(); st.Rescues < 3 {
		t.Fatalf("%d rescues after 3 inline Goexits", st.Rescues)
	}
	other, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)
	if v, err := server.Call[int](ctx, a.n, other, 4); err != nil || v != 8 {
		t.Fatalf("call after the Goexits: %v, %v", v, err)
	}
	leave, cancelLeave := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLeave()
	if err := b.c.Leave(leave); err != nil {
		t.Fatalf("Leave after Goexits on rescued readers: %v", err)
	}
}
