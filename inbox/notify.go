package inbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener LISTENs on the queue's channel through one pooled connection and wakes
// the queue's subscriptions on every notification. It runs while at least one
// subscription of a ListenNotify queue runs.
type listener struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// listen registers a running subscription with the listener, starting it if needed.
func (q *Queue[T]) listen(_ *waker) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.listening++
	if q.listener != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cancel: cancel, done: make(chan struct{})}
	q.listener = l
	go func() {
		defer close(l.done)
		q.listenLoop(ctx)
	}()
}

// unlisten deregisters a subscription; the last one stops the listener and waits for
// its goroutine.
func (q *Queue[T]) unlisten(_ *waker) {
	q.mu.Lock()
	q.listening--
	var l *listener
	if q.listening == 0 {
		l, q.listener = q.listener, nil
	}
	q.mu.Unlock()
	if l != nil {
		l.cancel()
		<-l.done
	}
}

// listenLoop holds a LISTEN connection, reconnecting after failures; after every
// (re)connect it wakes the subscriptions, since notifications may have been missed.
func (q *Queue[T]) listenLoop(ctx context.Context) {
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := q.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		q.log.Error("inbox: listen connection lost; reconnecting", "table", q.name, "err", err)
		if !pause(ctx, wait) {
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (q *Queue[T]) listenOnce(ctx context.Context) error {
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is LISTENing: it never goes back to the pool.
	defer func() {
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{q.channel}.Sanitize()); err != nil {
		return err
	}
	q.Wake()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == q.channel {
			// Payload is a group; this inbox has one group per table, so any payload
			// (the empty one included) wakes every subscription of the table.
			q.Wake()
		}
	}
}
