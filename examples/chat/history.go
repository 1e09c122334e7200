package chat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/server"
)

// HistoryLimit is how many messages a History reply carries at most: the
// most recent ones, oldest first.
const HistoryLimit = 1000

// Store is the durable history of direct messages: one SQLite file in WAL
// mode. It is safe for concurrent use, but the chat lets one process own
// it (the history owner), as an OTP design gives a DETS table one owning
// process.
type Store struct {
	db *sql.DB
}

// OpenStore opens (creating if needed) the history database at path.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	// The project's SQLite set-up (WAL, busy timeout, immediate writes) is
	// the inbox's: one way to open SQLite in gotp.
	db, err := inbox.OpenSQLite(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("chat: open history %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	const schema = `CREATE TABLE IF NOT EXISTS messages (
		id     INTEGER PRIMARY KEY AUTOINCREMENT,
		sender TEXT NOT NULL,
		recipient TEXT NOT NULL,
		body   TEXT NOT NULL,
		pair   TEXT NOT NULL
	);
	CREATE INDEX IF NOT EXISTS messages_pair ON messages (pair, id);`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("chat: create history schema in %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// pairKey names a conversation independently of who speaks.
func pairKey(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return a + "\x00" + b
}

// Append stores one message durably.
func (s *Store) Append(ctx context.Context, m Message) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO messages (sender, recipient, body, pair) VALUES (?, ?, ?, ?)`,
		m.From, m.To, m.Text, pairKey(m.From, m.To))
	return err
}

// Between returns the last limit messages between a and b, oldest first.
func (s *Store) Between(ctx context.Context, a, b string, limit int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sender, recipient, body FROM (
			SELECT id, sender, recipient, body FROM messages WHERE pair = ? ORDER BY id DESC LIMIT ?
		) ORDER BY id`, pairKey(a, b), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		if err := rows.Scan(&m.From, &m.To, &m.Text); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// historyOwner is the gen_server that owns the Store: it opens it in Init
// and closes it in Terminate, so a crash and restart reopens the file.
type historyOwner struct {
	server.Defaults
	path  string
	store *Store
}

type appendMsg struct{ m Message }
type betweenReq struct{ a, b string }

func (h *historyOwner) Init(ctx context.Context, p *gotp.Process) error {
	p.TrapExit(true) // so that Terminate closes the store on shutdown
	s, err := OpenStore(ctx, h.path)
	if err != nil {
		return err
	}
	h.store = s
	context.AfterFunc(p.Context(), func() { s.Close() }) // closed however the owner ends: a kill runs no Terminate
	return nil
}

func (h *historyOwner) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	ctx := p.Context()
	switch r := req.(type) {
	case appendMsg:
		if err := h.store.Append(ctx, r.m); err != nil {
			return nil, err // a store that cannot write is a crash: restart and reopen
		}
		return true, nil
	case betweenReq:
		ms, err := h.store.Between(ctx, r.a, r.b, HistoryLimit)
		if err != nil {
			return nil, err
		}
		return ms, nil
	case crashNow:
		return nil, errors.New("history owner: crash requested")
	}
	return h.Defaults.HandleCall(p, from, req)
}

func (h *historyOwner) Terminate(p *gotp.Process, reason error) {
	if h.store != nil {
		h.store.Close()
	}
}

// crashNow makes a chat server crash on purpose; the failure-table tests
// use it.
type crashNow struct{}
