package chat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// A wire is the transport of one connection: lines over TCP (lineWire) or
// JSON messages over a WebSocket (webSocketWire). The connection's reader
// goroutine calls read; its outbox's writer goroutine calls write and
// finish; stopRead and interruptWrite may be called from any goroutine.
type wire interface {
	// read reads commands until the client goes away, the input is
	// fatally bad or too slow, or stopRead; it hands each command (or
	// protocol error) to deliver in order, and stops when deliver returns
	// false. It returns what to tell the client before closing (an empty
	// Reason: nothing, the client left or the connection is being closed).
	read(deliver func(inbound) bool) Reason
	// format encodes one reply or event.
	format(r Reply) []byte
	// formatSent and formatMsg are format(Sent{To: to}) and format(m),
	// the reply and the event of every message, without boxing them in a
	// Reply.
	formatSent(to string) []byte
	formatMsg(m Msg) []byte
	// write writes chunks (each one encoded reply) by the deadline, and
	// returns how many bytes it wrote.
	write(chunks [][]byte, deadline time.Time) (int64, error)
	// finish writes last (if not nil), then closes the connection, telling
	// a WebSocket client why, all by the deadline.
	finish(last []byte, why Reason, deadline time.Time)
	// stopRead makes read return soon, with an empty Reason.
	stopRead()
	// interruptWrite makes a write in progress give up by the deadline.
	interruptWrite(deadline time.Time)
}

// Reasons a connection closes with that are not protocol errors; a
// WebSocket client reads them in the close frame.
const (
	closeBye      Reason = "bye"      // the client quit (or closed its side)
	closeShutdown Reason = "shutdown" // the service is stopping, or the connection's process ended
)

// readDeadlines is the read side's timing: a partly received line or
// message must complete within timeout of its first byte; with idle > 0,
// a connection that receives nothing for idle is closed.
type readDeadlines struct {
	timeout time.Duration // ≤ 0: none
	idle    time.Duration // ≤ 0: none
}

// stopper lets another goroutine stop a reader blocked in a read, through
// the connection's read deadline, without racing the deadlines the reader
// sets itself.
type stopper struct {
	mu      sync.Mutex
	stopped bool
	c       net.Conn
}

// setReadDeadline sets the read deadline unless the reader was stopped.
func (s *stopper) setReadDeadline(t time.Time) {
	s.mu.Lock()
	if !s.stopped {
		s.c.SetReadDeadline(t)
	}
	s.mu.Unlock()
}

func (s *stopper) stop() {
	s.mu.Lock()
	s.stopped = true
	s.c.SetReadDeadline(time.Unix(1, 0))
	s.mu.Unlock()
}

func (s *stopper) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// timeoutReason says which deadline a read that timed out ran into.
func timeoutReason(partial bool) Reason {
	if partial {
		return ReadTimeout
	}
	return IdleTimeout
}

// lineWire is the TCP protocol: one UTF-8 line per command and reply.
type lineWire struct {
	c   net.Conn
	raw syscall.RawConn // for tryWrite, where the connection has one
	dl  readDeadlines
	st  stopper
	wd  writeDeadline
	try tryState // tryWrite's (on unix)
}

// tryState is what a tryWrite writes and how far it got, and the function
// it hands the RawConn, kept by the wire so that a write allocates none
// of them. Only the goroutine in tryWrite uses it (see lineWire.tryWrite).
type tryState struct {
	b  []byte
	n  int
	fn func(uintptr) bool
}

// writeDeadline sets the write deadlines of the writer's writes, and lets
// another goroutine interrupt a write in progress (or about to start)
// without the writer's own deadline undoing it: the writer sets its
// deadline for a write after it has taken its batch, and an interrupt
// that came in between must still hold.
type writeDeadline struct {
	mu      sync.Mutex
	c       net.Conn
	limitAt time.Time // set by interrupt: no write may wait beyond it
}

// set sets the deadline of the next write: d, or the interrupt's if that
// is earlier.
func (wd *writeDeadline) set(d time.Time) {
	wd.mu.Lock()
	if !wd.limitAt.IsZero() && wd.limitAt.Before(d) {
		d = wd.limitAt
	}
	wd.c.SetWriteDeadline(d)
	wd.mu.Unlock()
}

// interrupt makes the write in progress, and every later one through
// set, give up by d.
func (wd *writeDeadline) interrupt(d time.Time) {
	wd.mu.Lock()
	wd.limitAt = d
	wd.c.SetWriteDeadline(d)
	wd.mu.Unlock()
}

func newLineWire(c net.Conn, dl readDeadlines) *lineWire {
	w := &lineWire{c: c, dl: dl, st: stopper{c: c}, wd: writeDeadline{c: c}}
	if sc, ok := c.(syscall.Conn); ok {
		w.raw, _ = sc.SyscallConn()
	}
	return w
}

// read reads lines into a buffer that starts small (an idle connection
// should hold little) and grows up to the longest line allowed. A read
// deadline is set only when it changes: when a partial line starts (its
// first byte plus the read timeout), when the buffer is empty again
// (none, or the idle timeout from now).
func (w *lineWire) read(deliver func(inbound) bool) Reason {
	const maxBuf = MaxLine + 2 // the line, "\r\n"
	buf := make([]byte, 0, 256)
	var partialSince, deadline time.Time
	for {
		// Hand on every complete line.
		start := 0
		for {
			i := bytes.IndexByte(buf[start:], '\n')
			if i < 0 {
				break
			}
			cmd, err := ParseLine(buf[start : start+i])
			start += i + 1
			if !deliver(inbound{cmd: cmd, err: err}) {
				return ""
			}
		}
		if start > 0 {
			buf = buf[:copy(buf, buf[start:])]
			// The partial line left waited while its predecessors were
			// handed on (backpressure, flood control): its clock starts
			// when the reader takes it up.
			partialSince = time.Now()
		}
		if len(buf) == maxBuf {
			return LineTooLong
		}
		if len(buf) == 0 && cap(buf) > 4096 {
			buf = make([]byte, 0, 256) // let a long line's buffer go
		}
		var want time.Time
		switch {
		case len(buf) > 0 && w.dl.timeout > 0:
			want = partialSince.Add(w.dl.timeout)
		case len(buf) == 0 && w.dl.idle > 0:
			want = time.Now().Add(w.dl.idle)
		}
		if want != deadline {
			w.st.setReadDeadline(want)
			deadline = want
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(cap(buf), maxBuf-len(buf)))...)[:len(buf)]
		}
		n, err := w.c.Read(buf[len(buf):cap(buf)])
		if n > 0 && len(buf) == 0 {
			partialSince = time.Now()
		}
		buf = buf[:len(buf)+n]
		if err != nil {
			if n > 0 && bytes.IndexByte(buf[len(buf)-n:], '\n') >= 0 {
				// Hand on what came with the error first; the next read
				// returns it again (or EOF).
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && !w.st.isStopped() {
				return timeoutReason(len(buf) > 0)
			}
			return ""
		}
	}
}

func (w *lineWire) format(r Reply) []byte { return FormatReply(r) }

func (w *lineWire) formatSent(to string) []byte { return formatSent(to) }

func (w *lineWire) formatMsg(m Msg) []byte { return formatMsg(m.From, m.Text) }

func (w *lineWire) write(chunks [][]byte, deadline time.Time) (int64, error) {
	w.wd.set(deadline)
	bufs := net.Buffers(chunks)
	return bufs.WriteTo(w.c)
}

// finish writes last, then closes the connection the way that lets the
// client read it: it closes its sending side first and reads (and drops)
// what the client still sends, for a moment, so that the close does not
// reset the connection (which can destroy the last line unread).
func (w *lineWire) finish(last []byte, _ Reason, deadline time.Time) {
	w.st.stop()
	if last != nil {
		w.c.SetWriteDeadline(deadline)
		w.c.Write(last)
	}
	if cw, ok := w.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		drain := time.Now().Add(lingerTimeout / 4)
		if deadline.Before(drain) {
			drain = deadline
		}
		w.c.SetReadDeadline(drain)
		io.Copy(io.Discard, io.LimitReader(w.c, 1<<20))
	}
	w.c.Close()
}

func (w *lineWire) stopRead() { w.st.stop() }

func (w *lineWire) interruptWrite(deadline time.Time) { w.wd.interrupt(deadline) }

// webSocketWire is the same protocol as JSON messages over a WebSocket. It reads
// through the websocket library, which reads through nc, the connection
// the HTTP server accepted, whose deadlines it sets.
type webSocketWire struct {
	c         *websocket.Conn
	nc        *deadlineConn
	dl        readDeadlines
	inMessage atomic.Bool // the reader is reading a message's body
}

func newWebSocketWire(c *websocket.Conn, nc *deadlineConn, dl readDeadlines) *webSocketWire {
	c.SetReadLimit(MaxLine + 1024)
	return &webSocketWire{c: c, nc: nc, dl: dl}
}

// read reads one message at a time. Between messages the connection is
// idle: its read deadline is the idle timeout (or none), and the first
// byte that arrives (nc sees it) starts the read timeout of the frame it
// begins; a header already buffered starts it once the library returns
// the message's reader. Control frames (ping, pong) make it idle again.
func (w *webSocketWire) read(deliver func(inbound) bool) Reason {
	ctx := context.Background() // never cancelled: a cancelled read closes the WebSocket at once, without a last word
	for {
		w.idle()
		typ, r, err := w.c.Reader(ctx)
		if err != nil {
			return w.readFailed(err, false)
		}
		w.nc.busy()
		w.inMessage.Store(true)
		data, err := io.ReadAll(r)
		w.inMessage.Store(false)
		if err != nil {
			return w.readFailed(err, true)
		}
		if typ != websocket.MessageText {
			if !deliver(inbound{err: protoErr(BadEncoding)}) {
				return ""
			}
			continue
		}
		cmd, err := ParseJSON(data)
		if !deliver(inbound{cmd: cmd, err: err}) {
			return ""
		}
	}
}

// idle marks the connection as between messages.
func (w *webSocketWire) idle() {
	var d time.Time
	if w.dl.idle > 0 {
		d = time.Now().Add(w.dl.idle)
	}
	w.nc.idle(d, w.dl.timeout)
}

func (w *webSocketWire) readFailed(err error, inMessage bool) Reason {
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		return LineTooLong
	case errors.Is(err, os.ErrDeadlineExceeded) && !w.nc.st.isStopped():
		return timeoutReason(inMessage || w.nc.started())
	}
	return ""
}

func (w *webSocketWire) format(r Reply) []byte { return FormatJSON(r) }

func (w *webSocketWire) formatSent(to string) []byte { return FormatJSON(Sent{To: to}) }

func (w *webSocketWire) formatMsg(m Msg) []byte { return FormatJSON(m) }

func (w *webSocketWire) write(chunks [][]byte, deadline time.Time) (int64, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var n int64
	for _, b := range chunks {
		if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
			return n, err
		}
		n += int64(len(b))
	}
	return n, nil
}

// finish writes last, then the close frame with why as its reason, and
// closes. The reader is stopped first: the close handshake then does not
// wait for it, nor for the client's close frame.
func (w *webSocketWire) finish(last []byte, why Reason, deadline time.Time) {
	w.nc.st.stop()
	w.nc.SetWriteDeadline(deadline)
	if last != nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		w.c.Write(ctx, websocket.MessageText, last)
		cancel()
	}
	code := websocket.StatusPolicyViolation
	switch why {
	case closeBye, "":
		code = websocket.StatusNormalClosure
	case closeShutdown:
		code = websocket.StatusGoingAway
	case LineTooLong:
		code = websocket.StatusMessageTooBig
	}
	if why == "" {
		why = closeBye
	}
	w.c.Close(code, string(why))
	w.nc.Close()
}

func (w *webSocketWire) stopRead() { w.nc.st.stop() }

func (w *webSocketWire) interruptWrite(deadline time.Time) { w.nc.SetWriteDeadline(deadline) }

// deadlineConn is a connection accepted by the chat's HTTP server. Once it
// carries a WebSocket, it starts the read timeout of a message at the
// message's first byte: armed while the connection is idle, the first read
// that returns data sets the read deadline.
type deadlineConn struct {
	net.Conn
	br      *bufio.Reader // the WebSocket's reader over the connection (set at the upgrade; read only by the reader goroutine)
	st      stopper
	armed   atomic.Bool  // idle: the next byte starts a message
	began   atomic.Bool  // a byte arrived since the connection went idle
	timeout atomic.Int64 // the read timeout, in nanoseconds (≤ 0: none)
}

func newDeadlineConn(c net.Conn) *deadlineConn {
	d := &deadlineConn{Conn: c}
	d.st.c = c
	return d
}

// Read reads, and starts the read timeout if this is the first byte since
// the connection went idle.
func (d *deadlineConn) Read(b []byte) (int, error) {
	n, err := d.Conn.Read(b)
	if n > 0 && d.armed.Load() && d.armed.CompareAndSwap(true, false) {
		d.began.Store(true)
		if t := d.timeout.Load(); t > 0 {
			d.st.setReadDeadline(time.Now().Add(time.Duration(t)))
		}
	}
	return n, err
}

// idle marks the connection as between messages, with read deadline d (or
// none), and arms the read timeout for the next byte.
func (d *deadlineConn) idle(deadline time.Time, timeout time.Duration) {
	d.timeout.Store(int64(timeout))
	d.began.Store(false)
	d.st.setReadDeadline(deadline)
	d.armed.Store(true)
	// The reader is the only goroutine that reads through br, but for the
	// close handshake, which follows stop: under the stopper's lock, not
	// stopped means not closing yet.
	d.st.mu.Lock()
	buffered := !d.st.stopped && d.br != nil && d.br.Buffered() > 0
	d.st.mu.Unlock()
	if buffered {
		d.busy() // the next frame has begun: its bytes came with the last read
	}
}

// busy is called once a message's header has been read: if its bytes had
// been buffered before the connection went idle, no read saw them, and
// the read timeout starts now.
func (d *deadlineConn) busy() {
	if d.armed.CompareAndSwap(true, false) {
		d.began.Store(true)
		if t := d.timeout.Load(); t > 0 {
			d.st.setReadDeadline(time.Now().Add(time.Duration(t)))
		}
	}
}

// started reports whether bytes of a message arrived since it went idle.
func (d *deadlineConn) started() bool { return d.began.Load() }

// hijackWriter is the ResponseWriter of a WebSocket upgrade: it lets the
// connection see the reader the websocket library reads through, to know
// whether bytes of a frame are already buffered.
type hijackWriter struct {
	http.ResponseWriter
	nc *deadlineConn
}

// Hijack hijacks the connection and keeps its reader.
func (h hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("chat: the response writer cannot be hijacked")
	}
	c, brw, err := hj.Hijack()
	if err == nil {
		h.nc.br = brw.Reader
	}
	return c, brw, err
}

// deadlineListener wraps every connection it accepts in a deadlineConn,
// after setting its send buffer (see Config.SendBuffer).
type deadlineListener struct {
	net.Listener
	sendBuffer int
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	setSendBuffer(c, l.sendBuffer)
	return newDeadlineConn(c), nil
}
