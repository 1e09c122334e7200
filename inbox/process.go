package inbox

import (
	"context"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/supervisor"
)

// ChildSpec returns a supervisor child that runs a subscription of h on q as a worker
// process. Every start (and restart) makes a fresh Subscription and checks the table
// first: a *StatementError is a start failure. The process traps exits: told to shut
// down (gotp.ErrShutdown from its supervisor, or any abnormal exit signal), it stops
// the subscription gracefully, releasing within Shutdown what did not finish, and
// exits with that reason; killed (gotp.ErrKill), it abandons its jobs as a crashed
// instance would, and they are claimed again after their lease.
func ChildSpec[T any](id string, q *Queue[T], h Handler[T], o SubscribeOptions) supervisor.ChildSpec {
	return supervisor.ChildSpec{
		ID:       id,
		Shutdown: supervisor.DefaultShutdown,
		Start: func(ctx context.Context, sup *gotp.Process) (gotp.PID, error) {
			return Spawn(ctx, sup.Node(), q, h, o, supervisor.DefaultShutdown*4/5, gotp.LinkTo(sup.Self()))
		},
	}
}

// Spawn runs a subscription of h on q as a gotp process on node n, checking the table
// first (ctx bounds the check). The process behaves as under ChildSpec; stop it with
// n.Exit(pid, gotp.ErrShutdown) (graceful, releasing after stopTimeout what did not
// finish) or by stopping the node.
func Spawn[T any](ctx context.Context, n *gotp.Node, q *Queue[T], h Handler[T], o SubscribeOptions, stopTimeout time.Duration, opts ...gotp.SpawnOption) (gotp.PID, error) {
	s, err := q.Subscribe(h, o)
	if err != nil {
		return gotp.PID{}, err
	}
	if err := s.begin(); err != nil {
		return gotp.PID{}, err
	}
	if err := s.check(ctx); err != nil {
		s.fail()
		return gotp.PID{}, err
	}
	opts = append([]gotp.SpawnOption{gotp.Behaviour("inbox")}, opts...)
	pid, err := n.Spawn(func(p *gotp.Process) error { return s.runProcess(p, stopTimeout) }, opts...)
	if err != nil {
		s.fail()
	}
	return pid, err
}

// runProcess is the body of a subscription's process: the subscription lives as long
// as the process.
func (s *Subscription[T]) runProcess(p *gotp.Process, stopTimeout time.Duration) error {
	p.TrapExit(true)
	if !s.launch(p.Context()) {
		return nil
	}
	for {
		msg, err := p.Receive(p.Context())
		if err != nil {
			<-s.done // killed: the subscription was abandoned with the process context
			return err
		}
		var reason error
		switch m := msg.(type) {
		case gotp.Exit:
			reason = m.Reason
		case *gotp.Exit:
			reason = m.Reason
		default:
			continue
		}
		if reason == nil {
			continue // a linked process ended normally
		}
		ctx, cancel := context.WithTimeout(p.Context(), stopTimeout)
		_ = s.Stop(ctx)
		cancel()
		return reason
	}
}
