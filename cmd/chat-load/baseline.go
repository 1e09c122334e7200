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
// one append at a time under a mutex, or, with group commit, through one
// committer goroutine that appends the messages waiting together in one
// transaction (chat.Store.AppendBatch), as the chat's history owner does.
type bareServer struct {
	ln    net.Listener
	store *chat.Store // nil: no history

	storeMu sync.Mutex // serialises appends, without group commit

	appends   chan bareAppend // to the committer; nil: no group commit
	committed chan struct{}   // closed when the committer has returned

	mu    sync.Mutex // guards users and conns
	users map[string]*bareConn
	conns map[*bareConn]struct{}

	wg sync.WaitGroup // the accept loop and one goroutine per connection
}

type bareConn struct {
	c    net.Conn
	mu   sync.Mutex // serialises writes
	done chan error // the committer's answer to this connection's append (one at a time)
}

// bareAppend is a message for the committer, and where its connection
// waits for the outcome.
type bareAppend struct {
	m    chat.Message
	done chan error
}

// maxGroup bounds a group commit, as the history owner's maxBatch.
const maxGroup = 512

func (c *bareConn) write(b []byte) {
	c.mu.Lock()
	c.c.Write(b)
	c.mu.Unlock()
}

// startBare serves on a loopback port; withStore opens dir/history.db, whose
// commits reach the disk as mode says (as the gotp server's history), and
// group (with withStore) commits through one committer goroutine.
func startBare(ctx context.Context, dir string, withStore bool, mode chat.Sync, group bool) (*bareServer, error) {
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
		if s.store != nil {
			s.store.Close()
		}
		return nil, err
	}
	s.ln = ln
	if withStore && group {
		s.appends, s.committed = make(chan bareAppend, maxGroup), make(chan struct{})
		go s.commit()
	}
	s.wg.Go(s.accept)
	return s, nil
}

// commit is the committer: it takes the messages waiting in appends (at
// most maxGroup) and appends them in one transaction, answers each, and
// goes on until appends is closed.
func (s *bareServer) commit() {
	defer close(s.committed)
	var batch []bareAppend
	var ms []chat.Message
	for a := range s.appends {
		batch = append(batch[:0], a)
	more:
		for len(batch) < maxGroup {
			select {
			case a, ok := <-s.appends:
				if !ok {
					break more
				}
				batch = append(batch, a)
			default:
				break more
			}
		}
		ms = ms[:0]
		for _, a := range batch {
			ms = append(ms, a.m)
		}
		err := s.store.AppendBatch(context.Background(), ms, nil)
		for _, a := range batch {
			a.done <- err
		}
	}
}

// append stores m in the history: through the committer with group
// commit, else at once under storeMu.
func (s *bareServer) append(c *bareConn, m chat.Message) error {
	if s.appends == nil {
		s.storeMu.Lock()
		defer s.storeMu.Unlock()
		return s.store.Append(context.Background(), m)
	}
	s.appends <- bareAppend{m: m, done: c.done}
	return <-c.done
}

func (s *bareServer) addr() string { return s.ln.Addr().String() }

func (s *bareServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		bc := &bareConn{c: c, done: make(chan error, 1)}
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
				if err := s.append(c, chat.Message{From: name, To: cmd.To, Text: cmd.Text}); err != nil {
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
	s.wg.Wait() // no connection appends any more
	if s.appends != nil {
		close(s.appends)
		<-s.committed
	}
	if s.store != nil {
		return s.store.Close()
	}
	return nil
}

var errBadServer = errors.New(`-server must be "gotp", "bare", "bare-sqlite" or "bare-sqlite-group"`)
