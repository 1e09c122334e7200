package main

import (
	"strings"
	"testing"

	"github.com/gotp/gotp/gotptest"
)

func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }

// The tour prints what its comments promise: three calls, one failure
// reported with its reason, and a counter that outlived it.
func TestTour(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := `worker 1 added 1, total now 1
worker 1 ended normally
worker 2 added 2, total now 3
worker 2 ended normally
worker 3 added 3, total now 6
worker 3 failed alone: worker 3 gave up
the counter is still running, total: 6 <nil>
`
	if out.String() != want {
		t.Fatalf("the tour printed\n%s\nwant\n%s", out.String(), want)
	}
}
