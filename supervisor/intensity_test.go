package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/supervisor"
)

// killChild kills the running child id of sup and waits until the
// supervisor has handled the exit (a WhichChildren call after the Down).
func killChild(t *testing.T, n *gotp.Node, sup gotp.PID, id string) {
	t.Helper()
	pid := pids(mustWhich(t, n, sup))[id]
	if pid.IsZero() {
		t.Fatalf("child %s not running", id)
	}
	down := gotptest.Watch(t, n, pid)
	n.Exit(pid, gotp.ErrKill)
	<-down
}

// TestIntensityNotReachedWithinPeriod: restarts spaced so that no Period
// holds more than Intensity of them never make the supervisor give up.
func TestIntensityNotReachedWithinPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
		defer n.Stop(context.Background())
		sup, err := supervisor.Start(context.Background(), n, supervisor.Spec{
			Intensity: 2, Period: 5 * time.Second,
			Children: []supervisor.ChildSpec{supervisor.Func("w", worker)},
		})
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			killChild(t, n, sup, "w")
			time.Sleep(3 * time.Second) // two restarts per 6 s: at most 2 in any 5 s
		}
		if !n.IsAlive(sup) {
			t.Fatal("supervisor gave up although restarts were spread out")
		}
		if in, _ := supervisor.Inspect(n, sup); in.Restarts != 10 || in.Children[0].Restarts != 10 {
			t.Fatalf("restarts %d / child %d, want 10", in.Restarts, in.Children[0].Restarts)
		}
	})
}

// TestIntensityReached: Intensity restarts within Period are fine; one
// more makes the supervisor stop its children and exit with
// ErrMaxIntensity, a shutdown, which a monitor sees; the give-up is logged.
func TestIntensityReached(t *testing.T) {
	for _, intensity := range []int{supervisor.NoRestarts, 0, 1, 3} {
		allowed := intensity
		switch {
		case intensity == 0:
			allowed = supervisor.DefaultIntensity
		case intensity < 0:
			allowed = 0
		}
		t.Run("", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := gotptest.NewLogRecorder()
				n := gotp.NewNode(gotp.Options{Name: "t", Logger: rec.Logger()})
				defer n.Stop(context.Background())
				sup, err := supervisor.Start(context.Background(), n, supervisor.Spec{
					Intensity: intensity, // Period: the default 5 s
					Children:  []supervisor.ChildSpec{supervisor.Func("w", worker), supervisor.Func("x", worker)},
				})
				if err != nil {
					t.Fatal(err)
				}
				supDown := gotptest.Watch(t, n, sup)
				for range allowed {
					time.Sleep(time.Second)
					killChild(t, n, sup, "w")
				}
				if !n.IsAlive(sup) {
					t.Fatalf("gave up after %d restarts, intensity %d", allowed, intensity)
				}
				time.Sleep(time.Second / 2) // all within one period
				x := pids(mustWhich(t, n, sup))["x"]
				w := pids(mustWhich(t, n, sup))["w"]
				n.Exit(w, gotp.ErrKill)
				reason := <-supDown
				if !errors.Is(reason, supervisor.ErrMaxIntensity) || !errors.Is(reason, gotp.ErrShutdown) {
					t.Fatalf("supervisor exited with %v, want ErrMaxIntensity (a shutdown)", reason)
				}
				if n.IsAlive(x) {
					t.Fatal("sibling still running after the supervisor gave up")
				}
				if got := rec.Find("supervisor: reached max restart intensity, shutting down"); len(got) != 1 || got[0].Attrs["child"] != "w" || !errors.Is(got[0].Attrs["reason"].(error), gotp.ErrKilled) {
					t.Fatalf("give-up log: %+v", got)
				}
			})
		})
	}
}

// TestIntensityWindowSlides: after a burst that reaches the intensity,
// waiting one period makes room again.
func TestIntensityWindowSlides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{Name: "t", Logger: discard})
		defer n.Stop(context.Background())
		sup, err := supervisor.Start(context.Background(), n, supervisor.Spec{
			Intensity: 3, Period: time.Second,
			Children: []supervisor.ChildSpec{supervisor.Func("w", worker)},
		})
		if err != nil {
			t.Fatal(err)
		}
		for round := range 5 {
			for range 3 {
				killChild(t, n, sup, "w")
			}
			if !n.IsAlive(sup) {
				t.Fatalf("round %d: gave up", round)
			}
			time.Sleep(time.Second)
		}
		for range 3 {
			killChild(t, n, sup, "w")
		}
		down := gotptest.Watch(t, n, sup)
		n.Exit(pids(mustWhich(t, n, sup))["w"], gotp.ErrKill)
		if r := <-down; !errors.Is(r, supervisor.ErrMaxIntensity) {
			t.Fatalf("exit %v", r)
		}
	})
}
