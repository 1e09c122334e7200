package chat

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// writeTimeout bounds one write to a client: a client that does not read
// loses its connection rather than stalling its process forever.
const writeTimeout = 10 * time.Second

// A session is the wire side of one connection: lines over TCP, or JSON
// messages over a WebSocket.
type session interface {
	// read reads commands until the client goes away, ctx ends or the
	// input is fatally bad, handing each to deliver in order.
	read(ctx context.Context, deliver func(inbound))
	// write writes one reply or event.
	write(r Reply) error
	// close closes the connection; it is idempotent.
	close()
}

// lineSession is the TCP protocol: one UTF-8 line per command and reply.
type lineSession struct {
	c    net.Conn
	once sync.Once
}

func newLineSession(c net.Conn) *lineSession { return &lineSession{c: c} }

func (s *lineSession) read(ctx context.Context, deliver func(inbound)) {
	sc := bufio.NewScanner(s.c)
	// Start small: an idle connection should not hold 4 KiB of buffer; the
	// scanner grows it up to the limit when a long line comes.
	sc.Buffer(make([]byte, 0, 256), MaxLine+2) // the line, "\r\n"
	for sc.Scan() {
		cmd, err := ParseLine(sc.Bytes())
		deliver(inbound{cmd: cmd, err: err})
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		deliver(inbound{err: &ProtocolError{Reason: LineTooLong}})
	}
}

func (s *lineSession) write(r Reply) error {
	s.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := s.c.Write(FormatReply(r))
	return err
}

func (s *lineSession) close() { s.once.Do(func() { s.c.Close() }) }

// wsSession is the same protocol as JSON over a WebSocket.
type wsSession struct {
	c    *websocket.Conn
	once sync.Once
}

func newWSSession(c *websocket.Conn) *wsSession {
	c.SetReadLimit(MaxLine + 1024)
	return &wsSession{c: c}
}

func (s *wsSession) read(ctx context.Context, deliver func(inbound)) {
	for {
		typ, data, err := s.c.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				deliver(inbound{err: &ProtocolError{Reason: LineTooLong}})
			}
			return
		}
		if typ != websocket.MessageText {
			deliver(inbound{err: &ProtocolError{Reason: BadEncoding}})
			continue
		}
		cmd, err := ParseJSON(data)
		deliver(inbound{cmd: cmd, err: err})
	}
}

func (s *wsSession) write(r Reply) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return s.c.Write(ctx, websocket.MessageText, FormatJSON(r))
}

func (s *wsSession) close() {
	s.once.Do(func() {
		s.c.Close(websocket.StatusNormalClosure, "bye")
	})
}
