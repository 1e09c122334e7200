package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// TestInlineCalls runs the kv server's calls on the caller's goroutine
// when it is idle, alone and with Dedicated: replies, error replies,
// deferred replies, casts before calls, crashes and stops behave as
// without the option.
func TestInlineCalls(t *testing.T) {
	for _, opts := range [][]server.Option{{server.InlineCalls()}, {server.InlineCalls(), server.Dedicated()}} {
		n := gotptest.NewNode(t)
		s := newKV()
		pid, err := server.Start(gotptest.Context(t), n, s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := server.Call[string](gotptest.Context(t), n, pid, put{"a", 1}); err != nil || got != "ok" {
			t.Fatalf("put = %q, %v", got, err)
		}
		server.Cast(n, pid, put{"b", 2})
		if got, err := server.Call[int](gotptest.Context(t), n, pid, get{"b"}); err != nil || got != 2 {
			t.Fatalf("get b = %d, %v (a cast is handled before a later call)", got, err)
		}
		if _, err := server.Call[int](gotptest.Context(t), n, pid, get{"zz"}); !errors.Is(err, errNotFound) {
			t.Fatalf("error reply: %v", err)
		}

		// A deferred reply: the inline HandleCall returns NoReply, the
		// caller waits for Reply from a later cast.
		got := make(chan error, 1)
		go func() {
			r, err := server.Call[string](gotptest.Context(t), n, pid, deferred{})
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
		_, err = server.Call[int](gotptest.Context(t), n, pid, crash{boom})
		if !errors.As(err, &ce) || !errors.Is(err, boom) {
			t.Fatalf("crashing call: %v", err)
		}
		if r := <-s.terminate; !errors.Is(r, boom) {
			t.Fatalf("Terminate reason %v", r)
		}
		if _, err := server.Call[int](gotptest.Context(t), n, pid, get{"a"}); !errors.Is(err, gotp.ErrNoProc) {
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
	n := gotptest.NewNode(t)
	inline, _ := server.Start(gotptest.Context(t), n, slow{}, server.InlineCalls())
	plain, _ := server.Start(gotptest.Context(t), n, slow{})
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

// pending keeps the From of every call it defers, keyed by From.Ref, as a
// server that answers calls out of order would, and answers each with its
// Ref on release. deferDie makes the server die during the call, by an
// exit signal to itself, and defer its reply.
type pending struct {
	server.Defaults
	froms    map[gotp.Ref]server.From
	deferred chan struct{} // a call was deferred
}

type deferDie struct{ reason error }

func (s *pending) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	switch r := req.(type) {
	case deferred:
		s.froms[from.Ref()] = from
		s.deferred <- struct{}{}
		return server.NoReply, nil
	case deferDie:
		p.Exit(p.Self(), r.reason)
		return server.NoReply, nil
	}
	return s.Defaults.HandleCall(p, from, req)
}

func (s *pending) HandleCast(p *gotp.Process, msg any) error {
	if _, ok := msg.(release); ok {
		for ref, f := range s.froms {
			server.Reply(f, ref)
		}
		clear(s.froms)
	}
	return nil
}

func newPending() *pending {
	return &pending{froms: map[gotp.Ref]server.From{}, deferred: make(chan struct{}, 16)}
}

// TestInlineDeferredCallsHaveDistinctRefs: From.Ref is unique for every
// call, inline or not, so a server can key the calls it defers by it.
func TestInlineDeferredCallsHaveDistinctRefs(t *testing.T) {
	for _, opts := range [][]server.Option{nil, {server.InlineCalls()}} {
		n := gotptest.NewNode(t)
		s := newPending()
		pid, err := server.Start(gotptest.Context(t), n, s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		const calls = 3
		refs := make(chan gotp.Ref, calls)
		errs := make(chan error, calls)
		for range calls {
			// One at a time: each call is deferred before the next starts
			// (and, with the option, finds the server idle: it runs inline).
			go func() {
				r, err := server.Call[gotp.Ref](gotptest.Context(t), n, pid, deferred{})
				if err != nil {
					errs <- err
					return
				}
				refs <- r
			}()
			gotptest.Recv(t, s.deferred)
		}
		server.Cast(n, pid, release{})
		seen := map[gotp.Ref]bool{}
		for range calls {
			select {
			case err := <-errs:
				t.Fatalf("deferred call: %v", err)
			case r := <-refs:
				if r == (gotp.Ref{}) || seen[r] {
					t.Fatalf("options %d: a call was answered for ref %v, zero or answered before (%v)", len(opts), r, seen)
				}
				seen[r] = true
			case <-time.After(10 * time.Second):
				t.Fatal("deferred calls not answered")
			}
		}
	}
}

// TestInlineDeferredCallLearnsExitReason: a call that HandleCall defers
// and that the server then dies without answering fails with the server's
// exit reason, inline or not (the caller's monitor is in place before the
// server gets the call, as in OTP), never with ErrNoProc.
func TestInlineDeferredCallLearnsExitReason(t *testing.T) {
	for _, opts := range [][]server.Option{nil, {server.InlineCalls()}, {server.InlineCalls(), server.Dedicated()}} {
		n := gotptest.NewNode(t)
		pid, err := server.Start(gotptest.Context(t), n, newPending(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		_, err = server.Call[int](gotptest.Context(t), n, pid, deferDie{boom})
		if !errors.Is(err, boom) {
			t.Fatalf("options %d: call during which the server died: %v, want %v", len(opts), err, boom)
		}
	}
}

// TestCallToStoppingServerReturnsAfterExit: a call whose HandleCall stops
// the server without a reply fails only once the server has exited, as in
// OTP, where the caller learns of it from its monitor: the server's name
// is free and it is not alive, so a caller may start it again at once.
// Without InlineCalls the server runs on another goroutine, which the
// caller may otherwise outrun; the loop gives it many chances to.
func TestCallToStoppingServerReturnsAfterExit(t *testing.T) {
	for _, opts := range [][]server.Option{nil, {server.InlineCalls()}} {
		n := gotptest.NewNode(t)
		boom := errors.New("boom")
		for i := range 2000 {
			pid, err := server.Start(gotptest.Context(t), n, newKV(), append(opts, server.Named("again"))...)
			if err != nil {
				t.Fatalf("options %d, round %d: start: %v", len(opts), i, err)
			}
			if _, err := server.Call[int](gotptest.Context(t), n, pid, crash{boom}); !errors.Is(err, boom) {
				t.Fatalf("crashing call: %v", err)
			}
			if n.IsAlive(pid) {
				t.Fatalf("options %d, round %d: the server is alive after its call failed with its exit reason", len(opts), i)
			}
		}
	}
}
