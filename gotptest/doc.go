// Package gotptest helps test code built on gotp: a node that stops itself
// when the test ends, a process that hands the test every message it
// receives, waits with a deadline, an exit watcher, a captured log, and a
// goroutine-leak check, as net/http/httptest does for HTTP handlers and
// River's rivertest for job workers: testing your own gen_server or
// supervision tree should be as short as testing a plain function.
//
//	func TestCounter(t *testing.T) {
//		n := gotptest.NewNode(t) // stopped when the test ends
//		pid, err := server.Start(gotptest.Context(t), n, &counter{})
//		if err != nil {
//			t.Fatal(err)
//		}
//		exited := gotptest.Watch(t, n, pid)
//
//		got, err := server.Call[int](gotptest.Context(t), n, pid, 5)
//		if err != nil || got != 5 {
//			t.Fatalf("Call = %v, %v; want 5, nil", got, err)
//		}
//		n.Exit(pid, gotp.ErrKill)
//		if reason := gotptest.Recv(t, exited); !errors.Is(reason, gotp.ErrKilled) {
//			t.Fatalf("exit reason %v, want killed", reason)
//		}
//	}
//
//	func TestMain(m *testing.M) { gotptest.VerifyTestMain(m) }
//
// # Waiting
//
// Every wait in this package is bounded: [Recv], [Eventually], [Watch] and
// [Sink.Next] fail the test after [Timeout] (the Within variants take their
// own bound). The bound is generous on purpose, so that a loaded machine
// never fails a correct test; a wait that runs out is a bug, not a slow
// machine. [Eventually] polls, and is for conditions no message or channel
// announces; prefer a message.
//
// # Goroutine leaks
//
// [VerifyTestMain] fails a test binary that leaves a goroutine running after
// its tests, whoever started it; it works with parallel tests. [NoLeaks]
// checks one test on its own, and so refuses parallel tests.
//
// # Test types
//
// The helpers take a [TB], which *testing.T, *testing.B, *testing.F and
// pgregory.net/rapid's *rapid.T all satisfy. They must be called from the
// test's goroutine, like t.Fatal, unless their doc says otherwise.
package gotptest
