package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// TestIgnoreSparesLinkedParent: a server whose Init returns ErrIgnore
// under StartLink must not kill its parent (OTP's ignore is a normal end),
// in handler mode and dedicated mode.
func TestIgnoreSparesLinkedParent(t *testing.T) {
	for _, opts := range [][]server.Option{nil, {server.Dedicated()}} {
		n := gotptest.NewNode(t)
		res := make(chan error, 1)
		parent, err := n.Spawn(func(p *gotp.Process) error {
			s := newKV()
			s.initErr = server.ErrIgnore
			_, err := server.StartLink(context.Background(), p, s, opts...)
			res <- err
			_, err = p.Receive(p.Context())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, server.ErrIgnore) {
			t.Fatalf("StartLink: %v", err)
		}
		// The parent is still receiving: a call-free probe is a second
		// message it would take if alive.
		if !n.IsAlive(parent) {
			t.Fatal("an ignoring server killed its linked parent")
		}
	}
}
