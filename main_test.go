package gotp_test

import (
	"testing"

	"github.com/gotp/gotp/gotptest"
)

// TestMain fails the run if any test leaves a goroutine behind: every Node
// a test starts must be stopped, and Stop must wait for what it owns.
func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }
