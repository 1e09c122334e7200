package gotp_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// The timer tests run in a synctest bubble: time is fake, and
// synctest.Wait makes "nothing arrived" a fact rather than a guess.
func TestSendAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{})
		defer n.Stop(context.Background())
		toSink := gotptest.NewSink(t, n)
		to, got := toSink.PID(), toSink.C()

		n.SendAfter(time.Second, to, "tick")
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("the timer fired early")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if len(got) != 1 || <-got != "tick" {
			t.Fatal("the timer did not fire on time")
		}
	})
}

func TestCancelTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{})
		defer n.Stop(context.Background())
		toSink := gotptest.NewSink(t, n)
		to, got := toSink.PID(), toSink.C()

		ref := n.SendAfter(time.Second, to, "cancelled")
		time.Sleep(time.Second / 2)
		if !n.CancelTimer(ref) {
			t.Fatal("CancelTimer of a pending timer = false")
		}
		if n.CancelTimer(ref) {
			t.Fatal("second CancelTimer = true")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatalf("a cancelled timer delivered %v", <-got)
		}

		fired := n.SendAfter(time.Millisecond, to, "fired")
		time.Sleep(time.Second)
		synctest.Wait()
		if n.CancelTimer(fired) {
			t.Fatal("CancelTimer of a fired timer = true")
		}
		if len(got) != 1 || <-got != "fired" {
			t.Fatal("the timer did not fire")
		}
		if n.CancelTimer(gotp.Ref{}) || n.CancelTimer(n.MakeRef()) {
			t.Fatal("CancelTimer of an unknown ref = true")
		}
	})
}

func TestSendAfterToDeadProcessAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := gotp.NewNode(gotp.Options{})
		to := waiter(t, n)
		n.SendAfter(time.Second, to, "late")
		n.Exit(to, gotp.ErrKill)
		time.Sleep(2 * time.Second) // the timer fires into nothing
		synctest.Wait()

		liveSink := gotptest.NewSink(t, n)

		live, got := liveSink.PID(), liveSink.C()
		ref := n.SendAfter(time.Second, live, "never")
		if err := n.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n.CancelTimer(ref) {
			t.Fatal("a timer survived Stop")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("a timer fired after Stop")
		}
		// SendAfter on a stopped node does nothing.
		n.SendAfter(time.Second, live, "x")
		time.Sleep(time.Hour)
		synctest.Wait()
	})
}

func TestSendAfterRealClock(t *testing.T) {
	n := gotptest.NewNode(t)
	toSink := gotptest.NewSink(t, n)
	to, got := toSink.PID(), toSink.C()
	start := time.Now()
	n.SendAfter(20*time.Millisecond, to, "tick")
	if m := gotptest.Recv(t, got); m != "tick" {
		t.Fatalf("got %v", m)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("delivered after %v, before its delay", d)
	}
}
