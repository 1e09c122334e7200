package cluster

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// linkServer is a server for calls run on the link's goroutine: an int
// comes back plus one, "wait" tells started whether it runs on a link's
// goroutine and blocks until release is closed, "back"
// calls the echo server on the caller's node (over the same link), and
// "goexit" ends the goroutine that runs the handler.
type linkServer struct {
	server.Defaults
	started chan bool
	release chan struct{}
	back    gotp.Dest
}

// onLink reports whether the calling goroutine is running a call on a
// direct link's goroutine (link.runCall), as its stack says.
func onLink() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "cluster.(*link).runCall")
}

func (s *linkServer) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch req {
	case "wait":
		s.started <- onLink()
		<-s.release
		return "released", nil
	case "back":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return server.Call[int](ctx, p.Node(), s.back, 21)
	case "goexit":
		runtime.Goexit()
	}
	if n, ok := req.(int); ok {
		return n + 1, nil
	}
	return req, nil
}

// TestCallsRunOnLink: calls from another node run on the goroutine of the
// direct link that read them, and the link goes on reading when such a
// call blocks (another goroutine takes over), calls the caller's node
// back, or ends its goroutine with runtime.Goexit; Leave does not wait for
// a handler still blocked.
func TestCallsRunOnLink(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	echoA, err := server.Start(ctx, a.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)
	s := &linkServer{started: make(chan bool, 1), release: make(chan struct{}), back: echoA}
	srv, err := server.Start(ctx, b.n, s)
	gotptest.Must(t, err)
	other, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)

	before := b.c.Stats()
	for i := range 50 {
		if v, err := server.Call[int](ctx, a.n, srv, i); err != nil || v != i+1 {
			t.Fatalf("call %d: %v, %v", i, v, err)
		}
	}
	if k := b.c.Stats().InlineCalls - before.InlineCalls; k < 10 {
		t.Errorf("%d of 50 sequential calls ran on the link's goroutine", k)
	}

	// A callback over the same link from a handler running on it.
	if v, err := server.Call[int](ctx, a.n, srv, "back"); err != nil || v != 42 {
		t.Fatalf("call back: %v, %v", v, err)
	}

	// runtime.Goexit in a handler: the server ends, the link goes on.
	before = b.c.Stats()
	if _, err := server.Call[any](ctx, a.n, srv, "goexit"); err == nil || !strings.Contains(err.Error(), gotp.ErrGoexit.Error()) {
		t.Fatalf("call to a handler calling Goexit: %v", err)
	}
	// The link still reads (the goroutine that ended was its reader when
	// the call ran on it: Stats counts the call and the rescue).
	after, cancelAfter := context.WithTimeout(ctx, 5*time.Second)
	defer cancelAfter()
	if v, err := server.Call[int](after, a.n, other, 4); err != nil || v != 8 {
		t.Fatalf("call after Goexit: %v, %v", v, err)
	}

	// A handler that blocks: other calls on the link are answered
	// meanwhile. Until the blocking call runs on the link (it may come
	// behind another frame, and be delivered), a few tries.
	s2 := &linkServer{started: make(chan bool, 1), release: make(chan struct{})}
	srv2, err := server.Start(ctx, b.n, s2)
	gotptest.Must(t, err)
	waited := make(chan error, 1)
	var inline bool // the blocking call runs on the link's goroutine
	for try := 0; ; try++ {
		before = b.c.Stats()
		go func() { // ends when the call does: s2 is released below
			_, err := server.Call[string](ctx, a.n, srv2, "wait")
			waited <- err
		}()
		// Told by the handler itself: the stats cannot say, as a call run
		// on the link counts once it returns (and the last one's count may
		// come after before was read).
		if inline = gotptest.Recv(t, s2.started); inline || try == 5 {
			break
		}
		s2.release <- struct{}{}
		gotptest.Must(t, gotptest.Recv(t, waited))
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	for i := range 20 {
		if v, err := server.Call[int](short, a.n, other, i); err != nil || v != 2*i {
			t.Fatalf("call %d while a handler blocks: %v, %v", i, v, err)
		}
	}
	if st := b.c.Stats(); inline && st.Rescues == before.Rescues {
		t.Error("a blocked handler on the link's goroutine: no new reader")
	}
	leave, cancelLeave := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLeave()
	if err := b.c.Leave(leave); err != nil {
		t.Fatalf("Leave with a handler blocked: %v", err)
	}
	close(s2.release)
	if err := gotptest.Recv(t, waited); !errors.Is(err, gotp.ErrNoConnection) {
		t.Logf("the blocked call ended with %v", err)
	}
}

// TestLeaveWithCallRunningOnLink: Leave right after a call began to run
// on the link's goroutine, and blocks there, returns without waiting for
// the handler (the closed link's goroutine is replaced as for any handler
// that runs long).
func TestLeaveWithCallRunningOnLink(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &linkServer{started: make(chan bool, 1), release: make(chan struct{})}
	srv, err := server.Start(ctx, b.n, s)
	gotptest.Must(t, err)
	defer close(s.release)
	waited := make(chan error, 1)
	go func() { // ends when b leaves
		_, err := server.Call[string](ctx, a.n, srv, "wait")
		waited <- err
	}()
	gotptest.Recv(t, s.started)
	leave, cancelLeave := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLeave()
	if err := b.c.Leave(leave); err != nil {
		t.Fatalf("Leave with a handler blocked on the link's goroutine: %v", err)
	}
	if err := gotptest.Recv(t, waited); err == nil {
		t.Fatal("the blocked call returned no error after its server's node left")
	}
}
