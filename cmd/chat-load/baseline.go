package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"

	"github.com/gotp/gotp/examples/chat"
)

// bareServer is the baseline H1 is compared with in the same run: the same
// line protocol (CONNECT and SEND, parsed by chat.ParseLine) served by plain
// Go, one goroutine per connection and a map of users under a mutex, with
// no processes, no supervision and no registry. With a store it appends
// every message to the same SQLite history (chat.Store) before answering,
// as the chat's history owner does, one append at a time.
type bareServer struct {
	ln    net.Listener
	store *chat.Store // nil: no history

	storeMu sync.Mutex // serialises appends, as the one history owner does

	mu    sync.Mutex // guards users and conns
	users map[string]*bareConn
	conns map[*bareConn]struct{}

	wg sync.WaitGroup // the accept loop and one goroutine per connection
}

type bareConn struct {
	c  net.Conn
	mu sync.Mutex // serialises writes
}

func (c *bareConn) write(b []byte) {
	c.mu.Lock()
	c.c.Write(b)
	c.mu.Unlock()
}

// startBare serves on a loopback port; withStore opens dir/history.db, whose
// commits reach the disk as mode says (as the gotp server's history).
func startBare(ctx context.Context, dir string, withStore bool, mode chat.Sync) (*bareServer, error) {
	s := &bareServer{users: map[string]*bareConn{}, conns: map[*bareConn]struct{}{}}
	if withStore {
		st, err := chat.OpenStore(ctx, filepath.Join(dir, "history.db"), mode)
		if err != nil {
			return nil, err
		}
		s.store = st
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.wg.Go(s.accept)
	return s, nil
}

func (s *bareServer) addr() string { return s.ln.Addr().String() }

func (s *bareServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		bc := &bareConn{c: c}
		s.mu.Lock()
		s.conns[bc] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(bc) })
	}
}

func (s *bareServer) serve(c *bareConn) {
	var name string
	defer func() {
		s.mu.Lock()
		if name != "" && s.users[name] == c {
			delete(s.users, name)
		}
		delete(s.conns, c)
		s.mu.Unlock()
		c.c.Close()
	}()
	sc := bufio.NewScanner(c.c)
	sc.Buffer(make([]byte, 0, 4096), chat.MaxLine+2)
	for sc.Scan() {
		cmd, err := chat.ParseLine(sc.Bytes())
		if err != nil {
			c.write(chat.FormatReply(chat.Error{Reason: chat.ReasonOf(err)}))
			continue
		}
		switch cmd := cmd.(type) {
		case chat.Connect:
			s.mu.Lock()
			_, taken := s.users[cmd.Name]
			if !taken && name == "" {
				s.users[cmd.Name] = c
				name = cmd.Name
			}
			s.mu.Unlock()
			if taken {
				c.write(chat.FormatReply(chat.Error{Reason: chat.NameTaken}))
			} else {
				c.write(chat.FormatReply(chat.OK{}))
			}
		case chat.Send:
			s.mu.Lock()
			to := s.users[cmd.To]
			s.mu.Unlock()
			if name == "" {
				c.write(chat.FormatReply(chat.Error{Reason: chat.NotConnected}))
				continue
			}
			if to == nil {
				c.write(chat.FormatReply(chat.Error{Reason: chat.UnknownRecipient}))
				continue
			}
			if s.store != nil {
				s.storeMu.Lock()
				err := s.store.Append(context.Background(), chat.Message{From: name, To: cmd.To, Text: cmd.Text})
				s.storeMu.Unlock()
				if err != nil {
					c.write(chat.FormatReply(chat.Error{Reason: chat.Unavailable}))
					continue
				}
			}
			to.write(chat.FormatReply(chat.Msg{From: name, Text: cmd.Text}))
			c.write(chat.FormatReply(chat.Sent{To: cmd.To}))
		default:
			c.write(chat.FormatReply(chat.Error{Reason: chat.BadCommand}))
		}
	}
}

// stop closes the listener and every connection and waits for their
// goroutines.
func (s *bareServer) stop() error {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.store != nil {
		return s.store.Close()
	}
	return nil
}

var errBadServer = errors.New(`-server must be "gotp", "bare" or "bare-sqlite"`)
