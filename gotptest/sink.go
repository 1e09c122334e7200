package gotptest

import (
	"time"

	"github.com/gotp/gotp"
)

// sinkBuffer is how many messages a Sink holds for the test before its
// process stops receiving (and its mailbox, which is unbounded, holds the
// rest): nothing is dropped.
const sinkBuffer = 1 << 14

// A Sink is a process that hands the test every message it receives, in
// the order it received them (it holds up to 16,384 for the test; past
// that it stops receiving, and the rest wait in its mailbox), and runs functions as itself ([Sink.Do]), so
// that a test can play a process: be linked, monitor, join a group, own a
// registry key. Create it with [NewSink]; it lives until it is killed or
// its node stops.
//
// A Sink that traps exits (gotp.TrapExit(true)) hands the test its Exit
// messages too, and ends after handing over the one that Node.Stop sends
// (From the zero PID, reason gotp.ErrShutdown), so that Stop need not wait
// for it.
//
// A Sink's methods are safe to call from any goroutine.
type Sink struct {
	pid  gotp.PID
	p    *gotp.Process
	msgs chan any
}

// sinkStop asks a Sink to end normally.
type sinkStop struct{}

// sinkDo is a function a Sink runs as itself.
type sinkDo struct {
	f    func(p *gotp.Process)
	done chan struct{}
}

// NewSink spawns a Sink on n with opts.
func NewSink(t TB, n *gotp.Node, opts ...gotp.SpawnOption) *Sink {
	t.Helper()
	s := &Sink{msgs: make(chan any, sinkBuffer)}
	procs := make(chan *gotp.Process, 1)
	opts = append([]gotp.SpawnOption{gotp.Behaviour("gotptest.Sink")}, opts...)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		procs <- p
		for {
			msg, err := p.Receive(p.Context())
			if err != nil {
				return nil // killed: its exit reason says why
			}
			if _, ok := msg.(sinkStop); ok {
				return nil
			}
			if do, ok := msg.(sinkDo); ok {
				do.f(p)
				close(do.done)
				continue
			}
			s.msgs <- msg
			if msg == (gotp.Exit{Reason: gotp.ErrShutdown}) {
				return gotp.ErrShutdown
			}
		}
	}, opts...)
	if err != nil {
		t.Fatalf("gotptest: NewSink: %v", err)
	}
	s.pid, s.p = pid, <-procs
	return s
}

// PID returns the Sink's PID.
func (s *Sink) PID() gotp.PID { return s.pid }

// Process returns the Sink's process, for the calls a library lets any
// goroutine make on a process's behalf (pg's Scope.Open, for example).
// Calls that only the process itself may make belong in [Sink.Do].
func (s *Sink) Process() *gotp.Process { return s.p }

// C returns the channel the Sink's messages arrive on, for a select.
func (s *Sink) C() <-chan any { return s.msgs }

// Done returns a channel closed once the Sink's exit is complete (its
// links signalled, its monitors told).
func (s *Sink) Done() <-chan struct{} { return s.p.Done() }

// Next returns the next message the Sink received, failing t if none
// comes within [Timeout].
func (s *Sink) Next(t TB) any {
	t.Helper()
	return RecvWithin(t, Timeout, s.msgs)
}

// NextWithin is Next with its own bound d.
func (s *Sink) NextWithin(t TB, d time.Duration) any {
	t.Helper()
	return RecvWithin(t, d, s.msgs)
}

// None fails t if the Sink has received a message the test has not taken.
// It does not wait.
func (s *Sink) None(t TB) {
	t.Helper()
	NoRecv(t, s.msgs)
}

// Do runs f as the Sink's process, between two messages, and returns once
// f has returned: inside f, p is the Sink's process, so p.Link, p.Monitor,
// p.TrapExit and every library call that acts for the calling process
// work. It fails t if the Sink has exited or f does not return within
// [Timeout]. Messages that arrive meanwhile wait in the mailbox.
func (s *Sink) Do(t TB, f func(p *gotp.Process)) {
	t.Helper()
	do := sinkDo{f: f, done: make(chan struct{})}
	s.p.Node().Send(s.pid, do)
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case <-do.done:
	case <-s.p.Done():
		reason, _ := s.p.ExitReason()
		t.Fatalf("gotptest: Sink %v exited (%v) before the function returned", s.pid, reason)
	case <-timer.C:
		t.Fatalf("gotptest: Sink %v did not run the function within %v", s.pid, Timeout)
	}
}

// Stop makes the Sink end normally (reason nil), after the messages
// already in its mailbox, and waits until its exit is complete, failing t
// if that takes longer than [Timeout].
func (s *Sink) Stop(t TB) {
	t.Helper()
	s.p.Node().Send(s.pid, sinkStop{})
	s.wait(t)
}

// Exit sends the Sink an exit signal with reason from outside any process
// (as gotp.Node.Exit does) and waits until its exit is complete, failing t
// if that takes longer than [Timeout]. A Sink that traps exits hands the
// signal to the test as an Exit message instead, and does not end; nor
// does any Sink for a nil reason: use [Sink.Stop].
func (s *Sink) Exit(t TB, reason error) {
	t.Helper()
	s.p.Node().Exit(s.pid, reason)
	s.wait(t)
}

// Kill is Exit with gotp.ErrKill, which ends even a Sink that traps exits
// (its exit reason is then gotp.ErrKilled).
func (s *Sink) Kill(t TB) {
	t.Helper()
	s.Exit(t, gotp.ErrKill)
}

func (s *Sink) wait(t TB) {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case <-s.p.Done():
	case <-timer.C:
		t.Fatalf("gotptest: Sink %v did not exit within %v", s.pid, Timeout)
	}
}
