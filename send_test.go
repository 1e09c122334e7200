package gotp_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestSendToDeadUnknownOrZeroPIDIsNoOp(t *testing.T) {
	n := gotptest.NewNode(t)
	dead := waiter(t, n)
	down := gotptest.Watch(t, n, dead)
	n.Send(dead, nil)
	gotptest.Recv(t, down)

	other := gotp.NewNode(gotp.Options{Name: "other"})
	defer other.Stop(t.Context())
	foreign := waiter(t, other) // alive, but on a node with no transport between them

	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, to := range []gotp.PID{
			dead,
			{},
			gotp.NewPID(n.Name(), n.Creation(), 1<<40),       // never spawned
			gotp.NewPID(n.Name(), n.Creation()+1, dead.ID()), // an earlier incarnation
			gotp.NewPID("elsewhere", 1, 1),
			foreign,
		} {
			for range 1000 {
				n.Send(to, "hello")
			}
			if n.SendTo(to, "x") != !to.IsZero() {
				t.Errorf("SendTo(%v) reported wrongly", to)
			}
		}
	}()
	gotptest.Recv(t, done)
	// The same from a process.
	_, res := run(t, n, func(p *gotp.Process) bool {
		for _, to := range []gotp.PID{dead, {}, gotp.NewPID("elsewhere", 1, 1), foreign, dead} {
			for range 100 {
				p.Send(to, "hello")
			}
		}
		return true
	})
	gotptest.Recv(t, res)
	if in, ok := other.ProcessInfo(foreign); !ok || in.MailboxLen != 0 {
		t.Errorf("a message crossed between nodes without a transport: %+v", in)
	}
}

func TestSendFIFOFromOneSender(t *testing.T) {
	n := gotptest.NewNode(t)
	toSink := gotptest.NewSink(t, n)
	to, got := toSink.PID(), toSink.C()
	const count = 10000
	for i := range count {
		n.Send(to, i)
	}
	for i := range count {
		if v := gotptest.Recv(t, got); v != i {
			t.Fatalf("message %d = %v", i, v)
		}
	}
}

func TestSendFIFOFromProcessSender(t *testing.T) {
	n := gotptest.NewNode(t)
	toSink := gotptest.NewSink(t, n)
	to, got := toSink.PID(), toSink.C()
	const count = 5000
	_, done := run(t, n, func(p *gotp.Process) error {
		for i := range count {
			p.Send(to, i)
		}
		return nil
	})
	gotptest.Recv(t, done)
	for i := range count {
		if v := gotptest.Recv(t, got); v != i {
			t.Fatalf("message %d = %v", i, v)
		}
	}
}

type seq struct{ sender, n int }

func TestManySendersOneReceiver(t *testing.T) {
	n := gotptest.NewNode(t)
	toSink := gotptest.NewSink(t, n)
	to, got := toSink.PID(), toSink.C()
	const senders, each = 16, 2000
	var wg sync.WaitGroup
	for s := range senders {
		if s%2 == 0 {
			wg.Go(func() {
				for i := range each {
					n.Send(to, seq{s, i})
				}
			})
			continue
		}
		wg.Add(1)
		_, err := n.Spawn(func(p *gotp.Process) error {
			defer wg.Done()
			for i := range each {
				p.Send(to, seq{s, i})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	next := make([]int, senders)
	for range senders * each {
		m := gotptest.Recv(t, got).(seq)
		if m.n != next[m.sender] {
			t.Fatalf("sender %d: got message %d, want %d", m.sender, m.n, next[m.sender])
		}
		next[m.sender]++
	}
	wg.Wait()
	for s, c := range next {
		if c != each {
			t.Errorf("sender %d: %d messages arrived, want %d", s, c, each)
		}
	}
}

func TestSendNeverBlocksOnSlowReceiver(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	slow := blocker(t, n, release) // never receives until released
	defer close(release)
	const count = 200000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range count {
			n.Send(slow, i)
		}
	}()
	gotptest.Recv(t, done)
	in, ok := n.ProcessInfo(slow)
	if !ok || in.MailboxLen != count {
		t.Fatalf("mailbox length = %d (ok %v), want %d", in.MailboxLen, ok, count)
	}
}

func TestReceiveContextDeadline(t *testing.T) {
	n := gotptest.NewNode(t)
	start := time.Now()
	_, res := run(t, n, func(p *gotp.Process) error {
		ctx, cancel := context.WithTimeout(p.Context(), 20*time.Millisecond)
		defer cancel()
		msg, err := p.Receive(ctx)
		if msg != nil {
			return fmt.Errorf("got message %v", msg)
		}
		return err
	})
	if err := gotptest.Recv(t, res); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("Receive returned after %v, before its deadline", d)
	}

	// A cancelled context; then the process still receives later messages.
	ctx, cancel := context.WithCancel(context.Background())
	between := make(chan struct{})
	pid, res2 := run(t, n, func(p *gotp.Process) error {
		if _, err := p.Receive(ctx); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("first Receive = %v, want Canceled", err)
		}
		close(between)
		msg, err := p.Receive(context.Background())
		if err != nil || msg != "after" {
			return fmt.Errorf("second Receive = %v, %v", msg, err)
		}
		return nil
	})
	gotptest.Eventually(t, "the process to wait", func() bool { return status(n, pid) == gotp.StatusWaiting })
	cancel()
	gotptest.Recv(t, between)
	n.Send(pid, "after")
	if err := gotptest.Recv(t, res2); err != nil {
		t.Fatal(err)
	}
}

func TestReceiveFuncSelective(t *testing.T) {
	n := gotptest.NewNode(t)
	start := make(chan struct{})
	pid, res := run(t, n, func(p *gotp.Process) []any {
		<-start
		var got []any
		ctx := context.Background()
		m, _ := p.ReceiveFunc(ctx, func(m any) bool { return m == 4 })
		got = append(got, m)
		// "go" is not there yet: the scan must wait for it.
		m, _ = p.ReceiveFunc(ctx, func(m any) bool { return m == "go" })
		got = append(got, m)
		for range 6 {
			m, _ := p.Receive(ctx)
			got = append(got, m)
		}
		return got
	})
	for i := 1; i <= 5; i++ {
		n.Send(pid, i)
	}
	close(start)
	gotptest.Eventually(t, "the scan for go to wait", func() bool {
		in, _ := n.ProcessInfo(pid)
		return in.Status == gotp.StatusWaiting && in.Handled == 1
	})
	n.Send(pid, 6)
	n.Send(pid, "go")
	n.Send(pid, 7)
	got := gotptest.Recv(t, res)
	want := []any{4, "go", 1, 2, 3, 5, 6, 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}

func TestReceiveFuncDeadlineKeepsMessages(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, res := run(t, n, func(p *gotp.Process) []any {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := p.ReceiveFunc(ctx, func(any) bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
			return []any{err}
		}
		var got []any
		for range 3 {
			m, _ := p.Receive(context.Background())
			got = append(got, m)
		}
		return got
	}, gotp.Named("selective"))
	for i := range 3 {
		n.Send(pid, i)
	}
	if got := gotptest.Recv(t, res); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("got %v, want [0 1 2]", got)
	}
}

func TestReceiveInHandlerModeIsNotAllowed(t *testing.T) {
	n := gotptest.NewNode(t)
	errs := make(chan error, 2)
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		_, err := p.Receive(context.Background())
		errs <- err
		_, err = p.ReceiveFunc(context.Background(), func(any) bool { return true })
		errs <- err
		return false, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Send(pid, "x")
	for range 2 {
		if err := gotptest.Recv(t, errs); !errors.Is(err, gotp.ErrNotProcess) {
			t.Fatalf("Receive in a handler = %v, want ErrNotProcess", err)
		}
	}
}

func TestReceiveAfterKillReturnsExitedError(t *testing.T) {
	n := gotptest.NewNode(t)
	pid, res := run(t, n, func(p *gotp.Process) error {
		_, err := p.Receive(context.Background())
		return err
	})
	gotptest.Eventually(t, "the process to wait", func() bool { return status(n, pid) == gotp.StatusWaiting })
	n.Exit(pid, errBoom)
	err := gotptest.Recv(t, res)
	var ee *gotp.ExitedError
	if !errors.As(err, &ee) || !errors.Is(err, errBoom) || ee.Reason != errBoom {
		t.Fatalf("Receive = %v, want *ExitedError wrapping boom", err)
	}
}

// A process that already moved messages out of its mailbox, then is
// killed, must learn of its death from its next Receive rather than be
// handed the rest of a mailbox that is gone.
func TestReceiveAfterKillWithBufferedMessages(t *testing.T) {
	n := gotptest.NewNode(t)
	first := make(chan struct{})
	release := make(chan struct{})
	pid, res := run(t, n, func(p *gotp.Process) error {
		if _, err := p.Receive(context.Background()); err != nil {
			return err
		}
		close(first)
		<-release
		msg, err := p.Receive(context.Background())
		if err == nil {
			return fmt.Errorf("dead process received %v", msg)
		}
		return err
	})
	for i := range 3 {
		n.Send(pid, i)
	}
	<-first
	n.Exit(pid, gotp.ErrKill)
	close(release)
	if err := gotptest.Recv(t, res); !errors.Is(err, gotp.ErrKilled) {
		t.Fatalf("Receive after kill = %v, want *ExitedError wrapping ErrKilled", err)
	}
}

// A process that keeps sending to one peer, which then dies: the sends
// after its death are dropped, and sends to others still arrive.
func TestProcessSendToPeerThatDies(t *testing.T) {
	n := gotptest.NewNode(t)
	a := waiter(t, n)
	bSink := gotptest.NewSink(t, n)
	b, got := bSink.PID(), bSink.C()
	cmd := make(chan string)
	_, res := run(t, n, func(p *gotp.Process) error {
		for c := range cmd {
			switch c {
			case "a":
				p.Send(a, "x")
			case "b":
				p.Send(b, "to b")
			}
		}
		return nil
	})
	cmd <- "b"
	if m := gotptest.Recv(t, got); m != "to b" {
		t.Fatal(m)
	}
	n.Exit(a, gotp.ErrKill)
	for range 3 {
		cmd <- "a" // dead: dropped
	}
	cmd <- "b"
	close(cmd)
	gotptest.Recv(t, res)
	if m := gotptest.Recv(t, got); m != "to b" {
		t.Fatal(m)
	}
	// A process that sends, then is sent to after its death, is not revived.
	c := waiter(t, n)
	_, res2 := run(t, n, func(p *gotp.Process) error {
		p.Send(c, "first") // c ends with nil on its first message
		return nil
	})
	gotptest.Recv(t, res2)
	gotptest.Eventually(t, "c to exit", func() bool { return !n.IsAlive(c) })
}

type bulky struct{ _ [1 << 16]byte } // big enough that keeping one alive shows in the heap

// Messages a process never took are not kept alive by a *Process that is
// still reachable after its death.
func TestDeadProcessLetsGoOfItsMessages(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, handler := range []bool{false, true} {
		first := make(chan *gotp.Process, 1)
		release := make(chan struct{})
		var pid gotp.PID
		var err error
		if handler {
			pid, err = n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
				first <- p
				<-release
				return true, nil // stop, with the second message unhandled
			}), nil)
		} else {
			pid, err = n.Spawn(func(p *gotp.Process) error {
				if _, err := p.Receive(context.Background()); err != nil {
					return err
				}
				first <- p
				<-release
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		m1, m2 := &bulky{}, &bulky{}
		w2 := weak.Make(m2)
		n.Send(pid, m1)
		n.Send(pid, m2)
		m1, m2 = nil, nil
		p := gotptest.Recv(t, first) // kept reachable below
		close(release)
		gotptest.Recv(t, p.Done())
		gotptest.Eventually(t, "the process's goroutine to let go of its buffer", func() bool {
			runtime.GC()
			return w2.Value() == nil
		})
		runtime.KeepAlive(p)
	}
}

// Receives whose deadlines keep expiring while messages arrive: no message
// is lost or reordered when a deadline and a delivery meet.
func TestReceiveDeadlinesRacingDeliveries(t *testing.T) {
	n := gotptest.NewNode(t)
	const count = 10000
	for _, selective := range []bool{false, true} {
		pid, res := run(t, n, func(p *gotp.Process) []int {
			var got []int
			timeouts := 0
			for len(got) < count {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(got)%7)*time.Microsecond)
				var m any
				var err error
				if selective {
					m, err = p.ReceiveFunc(ctx, func(m any) bool { _, ok := m.(int); return ok })
				} else {
					m, err = p.Receive(ctx)
				}
				cancel()
				if err != nil {
					timeouts++
					continue
				}
				got = append(got, m.(int))
			}
			return got
		})
		go func() {
			for i := range count {
				n.Send(pid, i)
				if i%64 == 0 {
					time.Sleep(time.Microsecond)
				}
			}
		}()
		got := gotptest.Recv(t, res)
		for i, m := range got {
			if m != i {
				t.Fatalf("selective=%v: message %d is %d", selective, i, m)
			}
		}
	}
}
