package server_test

import (
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// breaksInTerminate is a server whose Terminate panics.
type breaksInTerminate struct{ server.Defaults }

func (breaksInTerminate) Terminate(*gotp.Process, error) { panic("cleanup failed") }

// TestCrashInTerminateIsReported: a server that stops normally but whose
// Terminate panics ends with the panic, as in OTP, and that crash is
// reported, with Terminate's stack.
func TestCrashInTerminateIsReported(t *testing.T) {
	_, r := crashOf(t, breaksInTerminate{}, func(n *gotp.Node, pid gotp.PID) {
		n.Send(pid, server.StopRequest{Reason: nil})
	})
	if str(r, "reason") != "panic: cleanup failed" || str(r, "last_message_kind") != "stop" {
		t.Errorf("report %v", r.Attrs)
	}
	if st := str(r, "stack"); !strings.Contains(st, "breaksInTerminate.Terminate") {
		t.Errorf("the stack does not show Terminate:\n%s", st)
	}
}
