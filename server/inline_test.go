package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// TestInlineCalls runs the kv server's calls on the caller's goroutine
// when it is idle, alone and with Dedicated: replies, error replies,
// deferred replies, casts before calls, crashes and stops behave as
// without the option.
func TestInlineCalls(t *testing.T) {
	for _, opts := range [][]server.Option{{server.InlineCalls()}, {server.InlineCalls(), server.Dedicated()}} {
		n := newNode(t)
		s := newKV()
		pid, err := server.Start(ctx(t), n, s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := server.Call[string](ctx(t), n, pid, put{"a", 1}); err != nil || got != "ok" {
			t.Fatalf("put = %q, %v", got, err)
		}
		server.Cast(n, pid, put{"b", 2})
		if got, err := server.Call[int](ctx(t), n, pid, get{"b"}); err != nil || got != 2 {
			t.Fatalf("get b = %d, %v (a cast is handled before a later call)", got, err)
		}
		if _, err := server.Call[int](ctx(t), n, pid, get{"zz"}); !errors.Is(err, errNotFound) {
			t.Fatalf("error reply: %v", err)
		}

		// A deferred reply: the inline HandleCall returns NoReply, the
		// caller waits for Reply from a later cast.
		got := make(chan error, 1)
		go func() {
			r, err := server.Call[string](ctx(t), n, pid, deferred{})
			if err == nil && r != "released" {
				err = errors.New("reply " + r)
			}
			got <- err
		}()
		// Cast release until the call returns: a release handled before
		// the deferred call finds nothing to release.
		tick := time.NewTicker(time.Millisecond)
	wait:
		for {
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("deferred call: %v", err)
				}
				break wait
			case <-tick.C:
				server.Cast(n, pid, release{})
			}
		}
		tick.Stop()

		// A crash in an inline call ends the server, not the caller.
		boom := errors.New("boom")
		var ce *server.CallError
		_, err = server.Call[int](ctx(t), n, pid, crash{boom})
		if !errors.As(err, &ce) || !errors.Is(err, boom) {
			t.Fatalf("crashing call: %v", err)
		}
		if r := <-s.terminate; !errors.Is(r, boom) {
			t.Fatalf("Terminate reason %v", r)
		}
		if _, err := server.Call[int](ctx(t), n, pid, get{"a"}); !errors.Is(err, gotp.ErrNoProc) {
			t.Fatalf("call after the crash: %v", err)
		}
	}
}

// slow answers after a pause.
type slow struct{ server.Defaults }

func (slow) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	time.Sleep(req.(time.Duration))
	return "done", nil
}

// TestInlineCallWaitsPastDeadline states the documented trade-off: an
// inline call waits for HandleCall even past its deadline, where a call
// to a server without the option ends at the deadline.
func TestInlineCallWaitsPastDeadline(t *testing.T) {
	n := newNode(t)
	inline, _ := server.Start(ctx(t), n, slow{}, server.InlineCalls())
	plain, _ := server.Start(ctx(t), n, slow{})
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if r, err := server.Call[string](short, n, inline, 200*time.Millisecond); err != nil || r != "done" {
		t.Fatalf("inline call past its deadline = %q, %v; want the reply", r, err)
	}
	short2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := server.Call[string](short2, n, plain, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("plain call past its deadline: %v, want DeadlineExceeded", err)
	}
}
