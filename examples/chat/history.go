package chat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/server"
)

// HistoryLimit is how many messages a History reply carries at most: the
// most recent ones, oldest first.
const HistoryLimit = 1000

// RoomHistoryLimit is how many of a room's latest messages a Join shows.
const RoomHistoryLimit = 50

// Store is the durable history of direct and room messages: one SQLite file in WAL
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
	// at is the time a message was accepted, in Unix milliseconds; rows of
	// a file made before times were kept get 0.
	const schema = `CREATE TABLE IF NOT EXISTS messages (
		id     INTEGER PRIMARY KEY AUTOINCREMENT,
		sender TEXT NOT NULL,
		recipient TEXT NOT NULL,
		body   TEXT NOT NULL,
		pair   TEXT NOT NULL,
		at     INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX IF NOT EXISTS messages_pair ON messages (pair, id);
	CREATE TABLE IF NOT EXISTS room_messages (
		id     INTEGER PRIMARY KEY AUTOINCREMENT,
		origin TEXT NOT NULL,
		seq    INTEGER NOT NULL,
		room   TEXT NOT NULL,
		sender TEXT NOT NULL,
		body   TEXT NOT NULL,
		at     INTEGER NOT NULL,
		UNIQUE (origin, seq)
	);
	CREATE INDEX IF NOT EXISTS room_messages_room ON room_messages (room, id);`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("chat: create history schema in %s: %w", path, err)
	}
	if err := addTimes(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("chat: add message times to %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// addTimes adds the at column to a messages table made before it existed.
func addTimes(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('messages') WHERE name = 'at'`).Scan(&n); err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	_, err := db.ExecContext(ctx, `ALTER TABLE messages ADD COLUMN at INTEGER NOT NULL DEFAULT 0`)
	return err
}

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
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
		`INSERT INTO messages (sender, recipient, body, pair, at) VALUES (?, ?, ?, ?, ?)`,
		m.From, m.To, m.Text, pairKey(m.From, m.To), millis(m.Time))
	return err
}

// AppendRoom stores one room message durably, once: a message already
// stored (the same Origin and Seq) is left as it is.
func (s *Store) AppendRoom(ctx context.Context, m RoomMsg) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO room_messages (origin, seq, room, sender, body, at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (origin, seq) DO NOTHING`,
		m.Origin, m.Seq, m.Room, m.From, m.Text, millis(m.Time))
	return err
}

// Room returns the last limit messages of room, oldest first, each with
// the room as its To.
func (s *Store) Room(ctx context.Context, room string, limit int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sender, body, at FROM (
			SELECT id, sender, body, at FROM room_messages WHERE room = ? ORDER BY id DESC LIMIT ?
		) ORDER BY id`, room, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		m := Message{To: room}
		var at int64
		if err := rows.Scan(&m.From, &m.Text, &at); err != nil {
			return nil, err
		}
		m.Time = fromMillis(at)
		out = append(out, m)
	}
	return out, rows.Err()
}

// Between returns the last limit messages between a and b, oldest first.
func (s *Store) Between(ctx context.Context, a, b string, limit int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sender, recipient, body, at FROM (
			SELECT id, sender, recipient, body, at FROM messages WHERE pair = ? ORDER BY id DESC LIMIT ?
		) ORDER BY id`, pairKey(a, b), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		var at int64
		if err := rows.Scan(&m.From, &m.To, &m.Text, &at); err != nil {
			return nil, err
		}
		m.Time = fromMillis(at)
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
type appendRoomMsg struct{ m RoomMsg }
type roomReq struct{ room string }

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
	case appendRoomMsg:
		if err := h.store.AppendRoom(ctx, r.m); err != nil {
			return nil, err
		}
		return true, nil
	case roomReq:
		ms, err := h.store.Room(ctx, r.room, RoomHistoryLimit)
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
