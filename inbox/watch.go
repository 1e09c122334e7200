package inbox

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Heartbeat of a held connection: how often a watcher that has heard nothing pings
// the connection of a lock form's job, and how long the ping may take.
const (
	heartbeatEvery   = time.Second
	heartbeatTimeout = 5 * time.Second
)

// watchAfter is how long a lock form's handler runs before its connection is
// watched. Most handlers of a busy queue return sooner, and a watch costs a
// goroutine and three changes of the socket's read deadline; a loss during the first
// watchAfter is seen when the watch starts, the moment its first read finds the
// server's closing message or the socket's error already there.
const watchAfter = 10 * time.Millisecond

// connWatch watches the connection that holds a lock form's job while its handler
// runs, so that the loss of the connection (and with it of the lock) cancels the
// handler at once instead of when the settlement finds the connection dead.
//
// The connection is idle while the handler runs, so a goroutine can read from it:
// it blocks in WaitForNotification, which returns as soon as the server closes the
// session (pg_terminate_backend sends a FATAL error first) or the socket fails. A
// silent loss (a cut network) sends nothing; for it the watcher pings the connection
// after every heartbeatEvery of silence and counts a ping that fails or outlasts
// heartbeatTimeout as a loss. On a table with a CancelledAt column the ping is a
// statement that also asks whether the job was cancelled (Queue.Cancel). stop interrupts the read with a read deadline, never
// a ping (an interrupted query would close the connection).
type connWatch struct {
	pc   *pgconn.PgConn
	nc   net.Conn
	lost func(error) // called once, from the watcher's goroutine, on a loss
	// check, if set, is the heartbeat instead of a ping: a statement on the held
	// connection that reports the job cancelled; cancelled is then called once.
	check     func(ctx context.Context) (bool, error)
	cancelled func()
	done      chan struct{}
	t         *time.Timer // starts run after watchAfter

	mu       sync.Mutex // guards stopping, pinging and the read deadline of nc
	stopping bool
	pinging  bool
}

// watchConn watches pc from watchAfter on; lost is called on a loss. Call stop
// before using pc again.
func watchConn(pc *pgconn.PgConn, lost func(error), check func(context.Context) (bool, error), cancelled func()) *connWatch {
	w := &connWatch{pc: pc, nc: pc.Conn(), lost: lost, check: check, cancelled: cancelled, done: make(chan struct{})}
	w.t = time.AfterFunc(watchAfter, w.run)
	return w
}

func (w *connWatch) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		if w.stopping {
			w.mu.Unlock()
			return
		}
		_ = w.nc.SetReadDeadline(time.Now().Add(heartbeatEvery))
		w.mu.Unlock()
		// Background: the deadline above, not a context, interrupts the wait, so the
		// pool's context watcher (which might send a cancel request) is not involved.
		err := w.pc.WaitForNotification(context.Background())
		w.mu.Lock()
		if w.stopping {
			w.mu.Unlock()
			return
		}
		var ne net.Error
		silent := err == nil || (errors.As(err, &ne) && ne.Timeout() && !w.pc.IsClosed())
		if !silent {
			w.mu.Unlock()
			w.lost(err)
			return
		}
		// Nothing heard for a heartbeat (or a stray notification): ping.
		w.pinging = true
		_ = w.nc.SetReadDeadline(time.Time{})
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatTimeout)
		if w.check != nil {
			var yes bool
			yes, err = w.check(ctx)
			if err == nil && yes {
				w.check = nil
				w.cancelled()
			}
		} else {
			err = w.pc.Ping(ctx)
		}
		cancel()
		w.mu.Lock()
		w.pinging = false
		stopping := w.stopping
		w.mu.Unlock()
		if err != nil {
			if !stopping {
				// When stopping, the handler has returned: the settlement will find
				// the connection closed and report it.
				w.lost(err)
			}
			return
		}
	}
}

// stop ends the watch and waits for its goroutine; the connection is then free for
// its owner (or closed, if the watch saw it lost).
func (w *connWatch) stop() {
	if w.t.Stop() {
		return // the watch never started
	}
	w.mu.Lock()
	w.stopping = true
	if !w.pinging {
		_ = w.nc.SetReadDeadline(time.Now())
	}
	w.mu.Unlock()
	<-w.done
	_ = w.nc.SetReadDeadline(time.Time{})
}
