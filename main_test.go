package gotp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: every Node
// a test starts must be stopped, and Stop must wait for what it owns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
