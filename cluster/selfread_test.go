package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// A caller reads its reply from the direct link itself when the link's
// socket is free (see rsReader): sequential calls do, and everything else
// on the link behaves as when the link's goroutine reads: frames that
// come between calls, a call's deadline and cancellation (with the link
// usable after them), replies longer than the read buffer, concurrent
// callers, and a peer lost during the call.
func TestCallerReadsItsReply(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := make(chan struct{}, 64)
	srv, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 64), held: held})
	gotptest.Must(t, err)
	call := func(i int) {
		t.Helper()
		if v, err := server.Call[int](ctx, a.n, srv, i); err != nil || v != 2*i {
			t.Fatalf("call %d: %v, %v", i, v, err)
		}
	}
	before := a.c.Stats().SelfReadCalls
	for i := range 200 {
		call(i)
	}
	self := a.c.Stats().SelfReadCalls - before
	t.Logf("%d of 200 sequential calls read their own reply", self)
	if self == 0 {
		t.Fatal("no call read its own reply")
	}

	// A message from b that comes while no call is under way (the
	// socket free) is delivered all the same.
	sink, got := sinkOf(t, a.n)
	call(1)
	b.n.Send(sink, "between calls")
	if m := gotptest.RecvWithin(t, 5*time.Second, got); m != "between calls" {
		t.Fatalf("got %v", m)
	}

	// A call past its deadline, or cancelled, while its caller reads the
	// socket: it ends, and the link's stream is intact after it.
	call(2)
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	start := time.Now()
	_, err = server.Call[string](short, a.n, srv, "hold")
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("call past its deadline: %v after %v", err, time.Since(start))
	}
	<-held
	call(3)
	cctx, cancelCall := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := server.Call[string](cctx, a.n, srv, "hold"); done <- err }()
	<-held
	cancelCall()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled call did not end")
	}
	call(4)

	// A reply longer than the link's read buffer (64 KB).
	long := strings.Repeat("x", 100<<10)
	for range 3 {
		if v, err := server.Call[string](ctx, a.n, srv, long); err != nil || v != "echo "+long {
			t.Fatalf("long reply: %d bytes, %v", len(v), err)
		}
	}
	call(5)

	// Concurrent callers: one reads the socket, the others are handed
	// their replies.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if v, err := server.Call[int](ctx, a.n, srv, g*1000+i); err != nil || v != 2*(g*1000+i) {
					errs <- errors.Join(err, errors.New("wrong reply"))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// The link lost during a call whose caller reads the socket (b
	// closes it): the call fails with noconnection.
	call(6)
	go func() { _, err := server.Call[string](ctx, a.n, srv, "hold"); done <- err }()
	<-held
	b.c.mu.Lock()
	for l := range b.c.links {
		l.conn.Close()
	}
	b.c.mu.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, gotp.ErrNoConnection) {
			t.Fatalf("call to a lost node: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call to a lost node did not end")
	}
}

// Many callers at once, some of whose calls end by their deadline or are
// cancelled while they may be reading the socket: each caller that ends
// hands the read on, so every other call gets its own answer and messages
// sent meanwhile all arrive, in order.
func TestSelfReadHandOffUnderCancellation(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 64)})
	gotptest.Must(t, err)
	sink, got := sinkOf(t, a.n)
	const msgs = 2000
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range msgs {
			b.n.Send(sink, i)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			for i := range 150 {
				switch i % 7 {
				case 3: // a call that is never answered, ended by its deadline
					short, c := context.WithTimeout(ctx, time.Duration(1+i%3)*time.Millisecond)
					_, err := server.Call[string](short, a.n, srv, "hold")
					c()
					if !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("held call past its deadline: %v", err)
						return
					}
				case 5: // cancelled from another goroutine
					cctx, c := context.WithCancel(ctx)
					stop := time.AfterFunc(time.Duration(200+100*(i%4))*time.Microsecond, c)
					_, err := server.Call[string](cctx, a.n, srv, "hold")
					stop.Stop()
					c()
					if !errors.Is(err, context.Canceled) {
						errs <- fmt.Errorf("cancelled held call: %v", err)
						return
					}
				default:
					n := g*1000 + i
					if v, err := server.Call[int](ctx, a.n, srv, n); err != nil || v != 2*n {
						errs <- fmt.Errorf("call %d: %v, %v", n, v, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	<-sent
	for i := range msgs {
		if m := gotptest.RecvWithin(t, 10*time.Second, got); m != i {
			t.Fatalf("message %d: got %v", i, m)
		}
	}
	// The link still works, and sequential calls read their own replies
	// again.
	before := a.c.Stats().SelfReadCalls
	for i := range 50 {
		if v, err := server.Call[int](ctx, a.n, srv, i); err != nil || v != 2*i {
			t.Fatalf("call %d after: %v, %v", i, v, err)
		}
	}
	if a.c.Stats().SelfReadCalls == before {
		t.Fatal("no call read its own reply after the storm")
	}
}
