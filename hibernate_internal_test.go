package gotp

import (
	"context"
	"testing"
	"time"
)

// A handler-mode process keeps its mailbox's buffers between bursts (up
// to 256 slots each), unless it hibernates: then, once idle, it holds
// none, and it handles the next burst as before. Both kinds of handler
// process, and the inline path.
func TestHibernateDropsMailboxBuffers(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []SpawnOption
	}{
		{"handler", nil},
		{"resident", []SpawnOption{Resident()}},
		{"inline", []SpawnOption{AllowInline()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNode(Options{Name: "t"})
			defer n.Stop(context.Background())
			handled := make(chan any, 512)
			var proc *Process
			pid, err := n.SpawnHandler(HandlerFunc(func(p *Process, msg any) (bool, error) {
				if msg == "hibernate" {
					p.Hibernate()
				}
				handled <- msg
				return false, nil
			}), func(p *Process) error { proc = p; return nil }, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			burst := func(last any) {
				t.Helper()
				for i := range 100 { // a buffer of more than 256 slots is dropped anyway
					n.Send(pid, i)
				}
				n.Send(pid, last)
				for range 101 {
					select {
					case <-handled:
					case <-time.After(10 * time.Second):
						t.Fatal("burst not handled")
					}
				}
			}
			buffers := func() (rbuf, queue int) {
				for deadline := time.Now().Add(10 * time.Second); ; {
					proc.mu.Lock()
					idle := !proc.running
					rbuf, queue = cap(proc.rbuf), cap(proc.queue)
					proc.mu.Unlock()
					if idle {
						return rbuf, queue
					}
					if time.Now().After(deadline) {
						t.Fatal("process never idle")
					}
					time.Sleep(time.Millisecond)
				}
			}
			burst("plain")
			if r, q := buffers(); r+q == 0 {
				t.Fatalf("an idle process kept no buffer (%d, %d): the test shows nothing", r, q)
			}
			burst("hibernate")
			if r, q := buffers(); r+q != 0 {
				t.Fatalf("a hibernated process keeps buffers of %d and %d slots", r, q)
			}
			if tc.name == "inline" {
				if !n.RunInline(pid, "hibernate") {
					t.Fatal("RunInline on an idle process")
				}
				<-handled
				if r, q := buffers(); r+q != 0 {
					t.Fatalf("hibernated inline: buffers of %d and %d slots", r, q)
				}
			}
			burst("plain") // wakes and works as before
			if r, q := buffers(); r+q == 0 {
				t.Fatal("the request lasted past the idle it was for")
			}
		})
	}
}
