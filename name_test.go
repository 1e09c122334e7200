package gotp_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestRegisterWhereisAndTakenName(t *testing.T) {
	n := gotptest.NewNode(t)
	a, b := waiter(t, n), waiter(t, n)
	if err := n.Register("db", a); err != nil {
		t.Fatal(err)
	}
	if pid, ok := n.Whereis("db"); !ok || pid != a {
		t.Fatalf("Whereis = %v, %v", pid, ok)
	}
	err := n.Register("db", b)
	var are *gotp.AlreadyRegisteredError
	if !errors.As(err, &are) || are.Owner != a || are.Name != "db" {
		t.Fatalf("Register taken name = %v, want *AlreadyRegisteredError naming %v", err, a)
	}
	if e, ok := errors.AsType[*gotp.AlreadyRegisteredError](err); !ok || e.Owner != a {
		t.Fatalf("errors.AsType = %v, %v", e, ok)
	}
	if err := n.Register("cache", a); !errors.Is(err, gotp.ErrAlreadyNamed) {
		t.Fatalf("second name for one process = %v, want ErrAlreadyNamed", err)
	}
	if err := n.Register("", b); !errors.Is(err, gotp.ErrEmptyName) {
		t.Fatalf("empty name = %v, want ErrEmptyName", err)
	}
	if got := n.Registered(); !slices.Equal(got, []string{"db"}) {
		t.Fatalf("Registered = %v", got)
	}
	if in, _ := n.ProcessInfo(a); in.Name != "db" {
		t.Fatalf("ProcessInfo name = %q", in.Name)
	}
	// Send by name.
	if !n.SendTo(gotp.Name("db"), errBoom) {
		t.Fatal("SendTo(Name) found nobody")
	}
	if n.SendTo(gotp.Name("nobody"), "x") {
		t.Fatal("SendTo an unknown Name reported true")
	}
}

func TestNameFreedAtExit(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, end := range []func(pid gotp.PID){
		func(pid gotp.PID) { n.Send(pid, nil) },
		func(pid gotp.PID) { n.Send(pid, errBoom) },
		func(pid gotp.PID) { n.Exit(pid, gotp.ErrKill) },
	} {
		pid := waiter(t, n, gotp.Named("worker"))
		if got, _ := n.Whereis("worker"); got != pid {
			t.Fatalf("Whereis = %v, want %v", got, pid)
		}
		d := gotptest.Watch(t, n, pid)
		end(pid)
		gotptest.Recv(t, d)
		if got, ok := n.Whereis("worker"); ok {
			t.Fatalf("name still held by %v after exit", got)
		}
	}
	// A name freed at exit can be taken by the next process.
	pid := waiter(t, n, gotp.Named("worker"))
	if got, _ := n.Whereis("worker"); got != pid {
		t.Fatalf("Whereis = %v, want %v", got, pid)
	}
}

func TestNamedSpawnOption(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n, gotp.Named("svc"))
	before := n.ProcessCount()
	_, err := n.Spawn(func(*gotp.Process) error { return nil }, gotp.Named("svc"))
	var are *gotp.AlreadyRegisteredError
	if !errors.As(err, &are) || are.Owner != a {
		t.Fatalf("Spawn under a taken name = %v", err)
	}
	_, err = n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil }), nil, gotp.Named("svc"))
	if !errors.As(err, &are) || are.Owner != a {
		t.Fatalf("SpawnHandler under a taken name = %v", err)
	}
	if n.ProcessCount() != before {
		t.Fatalf("failed spawns left processes: %d, want %d", n.ProcessCount(), before)
	}
	h, err := n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil }), nil, gotp.Named("h"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := n.Whereis("h"); got != h {
		t.Fatalf("Whereis(h) = %v, want %v", got, h)
	}
	// Register from inside the process.
	_, res := run(t, n, func(p *gotp.Process) []error {
		return []error{p.Register("self-named"), p.Register("again")}
	})
	errs := gotptest.Recv(t, res)
	if errs[0] != nil || !errors.Is(errs[1], gotp.ErrAlreadyNamed) {
		t.Fatalf("Process.Register = %v", errs)
	}
}

func TestUnregister(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n, gotp.Named("x"))
	if !n.Unregister("x") {
		t.Fatal("Unregister of a held name = false")
	}
	if n.Unregister("x") {
		t.Fatal("second Unregister = true")
	}
	if _, ok := n.Whereis("x"); ok {
		t.Fatal("Whereis finds an unregistered name")
	}
	if in, _ := n.ProcessInfo(a); in.Name != "" {
		t.Fatalf("info still names %q", in.Name)
	}
	// The process may be named again, and another may take the old name.
	if err := n.Register("y", a); err != nil {
		t.Fatal(err)
	}
	b := waiter(t, n)
	if err := n.Register("x", b); err != nil {
		t.Fatal(err)
	}
	// a's exit must not free b's name x.
	d := gotptest.Watch(t, n, a)
	n.Send(a, nil)
	gotptest.Recv(t, d)
	if got, _ := n.Whereis("x"); got != b {
		t.Fatalf("Whereis(x) = %v, want %v", got, b)
	}
	if _, ok := n.Whereis("y"); ok {
		t.Fatal("y not freed at exit")
	}
}

func TestRegisterDeadOrUnknown(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n)
	d := gotptest.Watch(t, n, a)
	n.Send(a, nil)
	gotptest.Recv(t, d)
	for _, pid := range []gotp.PID{a, {}, gotp.NewPID("elsewhere", 1, 1)} {
		if err := n.Register("z", pid); !errors.Is(err, gotp.ErrNoProc) {
			t.Errorf("Register(%v) = %v, want ErrNoProc", pid, err)
		}
	}
	if _, ok := n.Whereis("z"); ok {
		t.Fatal("a failed Register took the name")
	}
}

// A spawn that fails (here: its name is taken) must not leave anything
// hanging on the PID it briefly had: a monitor made on that PID while the
// spawn was failing still fires.
func TestFailedSpawnFiresMonitorsOfItsPID(t *testing.T) {
	n := gotptest.NewNode(t)
	waiter(t, n, gotp.Named("taken"))
	h := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
	var lost int
	for range 500 {
		probe, err := n.SpawnHandler(h, nil)
		if err != nil {
			t.Fatal(err)
		}
		next := gotp.NewPID(n.Name(), n.Creation(), probe.ID()+1)
		stop, running := make(chan struct{}), make(chan struct{})
		calls := make(chan int, 1)
		go func() {
			var made, fired atomic.Int64
			for i := 0; ; i++ {
				if i == 10 {
					close(running)
				}
				select {
				case <-stop:
					// The failed spawn is over: every monitor has fired.
					calls <- int(made.Load() - fired.Load())
					return
				default:
				}
				made.Add(1)
				n.MonitorFunc(next, func(d gotp.Down) {
					if d.Reason != gotp.ErrNoProc {
						t.Errorf("Down reason %v, want ErrNoProc", d.Reason)
					}
					fired.Add(1)
				})
			}
		}()
		<-running
		if _, err := n.Spawn(noop, gotp.Named("taken")); err == nil {
			t.Fatal("spawn under a taken name succeeded")
		}
		close(stop)
		lost += gotptest.Recv(t, calls)
		n.Exit(probe, gotp.ErrKill)
	}
	if lost > 0 {
		t.Fatalf("%d monitors of a failed spawn's PID never fired", lost)
	}
}

// TestNameFreeWhenDeathIsSeen: whoever learns of a named process's death
// (a monitor set while it is exiting fires at once) finds its name free,
// so that a successor can take it at once, as a supervisor's restart does.
func TestNameFreeWhenDeathIsSeen(t *testing.T) {
	n := gotptest.NewNode(t)
	for i := range 500 {
		pid, err := n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil }), nil, gotp.Named("x"))
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		seen := make(chan bool, 1)
		go func() {
			for {
				if got, ok := n.Whereis("x"); !ok || got != pid {
					seen <- true // freed before we could watch: nothing to check
					return
				}
				if !n.IsAlive(pid) || i%2 == 0 {
					n.MonitorFunc(pid, func(gotp.Down) {
						_, held := n.Whereis("x")
						seen <- !held
					})
					return
				}
			}
		}()
		n.Exit(pid, gotp.ErrKill)
		if !gotptest.Recv(t, seen) {
			t.Fatalf("round %d: the name was still held when the death was seen", i)
		}
	}
}
