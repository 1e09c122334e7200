package chat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/internal/migrate"
	"github.com/gotp/gotp/server"
)

// HistoryLimit is how many messages a History reply carries at most: the
// most recent ones, oldest first.
const HistoryLimit = 1000

// RoomHistoryLimit is how many of a room's latest messages a Join shows.
const RoomHistoryLimit = 50

// HistoryMaxBytes bounds the text of the messages a History reply (or a
// Join's earlier messages) carries: the most recent that fit, and always
// the last one, so that one reply is never much more than 256 KiB
// whatever the messages' length.
const HistoryMaxBytes = 256 << 10

// Group commit: the history owner appends the messages that arrived while
// a transaction was in flight in the next one, at most maxBatch of them
// or about maxBatchBytes of text.
const (
	maxBatch      = 512
	maxBatchBytes = 4 << 20
)

// Store is the durable history of direct and room messages: one SQLite
// file in WAL mode. It is safe for concurrent use, but the chat lets one
// process own it (the history owner), as an OTP design gives a DETS table
// one owning process.
//
// Its writes never wait for a checkpoint (the copy of the write-ahead log
// into the database file, with its fsyncs): a goroutine of the Store's
// own checkpoints, on a connection of its own, at most every
// checkpointEvery while there are writes, without blocking them. Only a
// log grown past walLimit pages (a steady stream of writes, which never
// leaves the log wholly copied) makes it wait for the writer once, to
// copy the rest and start the log again from its beginning. The log's
// file is then reused, not truncated: truncating tens of MB (and the
// discards a file system may issue for them) stalled the writer for 40 to
// 80 ms in the H1 load at 2,000 messages/s, where rewinding takes a few.
// The file left after a rewind is cut to walLimit pages at most
// (journal_size_limit), so the log holds about 64 MB of disk at most
// between checkpoints.
type Store struct {
	db   *sql.DB // the writer's connection (and the readers')
	ckpt *sql.DB // the checkpointer's connection

	mu      sync.Mutex        // guards inserts
	inserts map[int]*sql.Stmt // INSERT statements of n rows, prepared on first use

	args sync.Pool // of *[]any: AppendBatch's arguments, each taken by one call and put back empty

	wrote chan struct{} // a token when a commit has added to the log
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the checkpointer has returned
	once  sync.Once
}

// Checkpointing: how often at most, and the size of the log (in pages of
// 4 KiB) beyond which a checkpoint also truncates it.
const (
	checkpointEvery = 100 * time.Millisecond
	walLimit        = 16384
)

// Sync says when a commit of the history reaches the disk, and so what
// SENT promises.
type Sync int

const (
	// SyncFull flushes each transaction to the disk (fsync of SQLite's
	// write-ahead log, synchronous=FULL; on macOS F_FULLFSYNC, which also
	// flushes the drive's cache) before its messages get SENT: neither a
	// crash of the process nor a power cut or a crash of the operating
	// system loses an acknowledged message, on a disk that honours the
	// flush. The default. It costs a flush per transaction, which the
	// history owner's group commit shares among the messages that arrive
	// together.
	SyncFull Sync = iota
	// SyncNormal writes each transaction to the operating system before its
	// messages get SENT and flushes the log to the disk at checkpoints
	// (synchronous=NORMAL), which start at least checkpointEvery (100 ms)
	// apart and flush what was committed when they started: a crash of the
	// process loses nothing acknowledged, but a power cut or a crash of the
	// operating system may lose the messages acknowledged since the last
	// checkpoint, the last 100 ms or more (more under load, whose
	// checkpoints take longer). For a disk whose flushes are slow.
	SyncNormal
)

// String returns "full" or "normal", as ParseSync reads them.
func (s Sync) String() string {
	switch s {
	case SyncFull:
		return "full"
	case SyncNormal:
		return "normal"
	}
	return fmt.Sprintf("Sync(%d)", int(s))
}

// valid reports whether s is one of the Syncs above.
func (s Sync) valid() bool { return s == SyncFull || s == SyncNormal }

// ParseSync reads "full" or "normal", in any case (as cmd/chat's
// -history-sync).
func ParseSync(s string) (Sync, error) {
	switch strings.ToLower(s) {
	case "full":
		return SyncFull, nil
	case "normal":
		return SyncNormal, nil
	}
	return 0, fmt.Errorf("chat: history sync %q: want full or normal", s)
}

// OpenStore opens (creating if needed) the history database at path, whose
// commits reach the disk as mode says.
func OpenStore(ctx context.Context, path string, mode Sync) (*Store, error) {
	// The project's SQLite set-up (WAL, busy timeout, immediate writes) is
	// the inbox's: one way to open SQLite in gotp.
	if !mode.valid() {
		return nil, fmt.Errorf("chat: open history %s: unknown %v", path, mode)
	}
	open := inbox.OpenSQLiteFull
	if mode == SyncNormal {
		open = inbox.OpenSQLite
	}
	db, err := open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("chat: open history %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	fail := func(what string, err error) (*Store, error) {
		db.Close()
		return nil, fmt.Errorf("chat: %s history %s: %w", what, path, err)
	}
	// The writer's connection keeps its statement journals (a multi-row
	// INSERT has one) in memory rather than in a temporary file, and leaves
	// checkpoints to the checkpointer. Should database/sql ever replace the
	// connection, the new one checkpoints by itself, as SQLite does by
	// default: slower, never wrong.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = %d`, walLimit*4096)); err != nil {
		return fail("set up", err)
	}
	if _, err := migrate.SQLite(ctx, db, historySchema); err != nil {
		return fail("migrate", err)
	}
	ckpt, err := open(ctx, path)
	if err != nil {
		return fail("open the checkpointer of", err)
	}
	ckpt.SetMaxOpenConns(1)
	s := &Store{
		db: db, ckpt: ckpt, inserts: map[int]*sql.Stmt{},
		wrote: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go s.checkpoints()
	return s, nil
}

// wroteLog tells the checkpointer that the log has grown.
func (s *Store) wroteLog() {
	select {
	case s.wrote <- struct{}{}:
	default:
	}
}

// checkpoints is the checkpointer: after writes, at most every
// checkpointEvery, it copies the log into the database without blocking
// the writer (PASSIVE); a log past walLimit is rewound (RESTART, which
// waits for the writer between two transactions). It ends with Close.
func (s *Store) checkpoints() {
	defer close(s.done)
	ctx := context.Background()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wrote:
		}
		var busy, log, done int
		if err := s.ckpt.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err == nil && log > walLimit {
			s.ckpt.ExecContext(ctx, `PRAGMA wal_checkpoint(RESTART)`)
		}
		t := time.NewTimer(checkpointEvery)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// HistoryVersion is the version of the history's schema that OpenStore and
// MigrateHistory bring a file to.
const HistoryVersion = 1

// MigrateHistory brings the history database db (opened with
// inbox.OpenSQLite, or inbox.OpenSQLiteFull as OpenStore does by default) to
// HistoryVersion in one transaction, creating it if empty, and reports the
// versions before and after: 0 for a file made before versions were recorded.
// OpenStore does it too.
func MigrateHistory(ctx context.Context, db *sql.DB) (from, to int, err error) {
	r, err := migrate.SQLite(ctx, db, historySchema)
	if err != nil {
		return 0, 0, fmt.Errorf("chat: migrate history: %w", err)
	}
	return r.From, r.To, nil
}

// historyDDL is the history's schema. at is the time a message was accepted,
// in Unix milliseconds; rows of a file made before times were kept get 0.
// Rows are never deleted, so a plain INTEGER PRIMARY KEY numbers them in
// insertion order, as AUTOINCREMENT would, for less work per insert (a file
// made before keeps AUTOINCREMENT, which works the same).
const historyDDL = `CREATE TABLE IF NOT EXISTS messages (
		id     INTEGER PRIMARY KEY,
		sender TEXT NOT NULL,
		recipient TEXT NOT NULL,
		body   TEXT NOT NULL,
		pair   TEXT NOT NULL,
		at     INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX IF NOT EXISTS messages_pair ON messages (pair, id);
	CREATE TABLE IF NOT EXISTS room_messages (
		id     INTEGER PRIMARY KEY,
		origin TEXT NOT NULL,
		seq    INTEGER NOT NULL,
		room   TEXT NOT NULL,
		sender TEXT NOT NULL,
		body   TEXT NOT NULL,
		at     INTEGER NOT NULL,
		UNIQUE (origin, seq)
	);
	CREATE INDEX IF NOT EXISTS room_messages_room ON room_messages (room, id);`

// ErrNotHistory is matched by the error of MigrateHistory (and OpenStore) on a
// file with no history version recorded whose messages table (or room_messages
// table, if it has one) lacks a column every release's history had: a table of
// the same name that gotp did not make. The file is left as it is.
var ErrNotHistory = migrate.ErrForeign

// historyColumns are the columns each history table has had since its first
// release; a file with no version recorded must have them to be migrated.
var historyColumns = []struct {
	table string
	cols  []string
}{
	{"messages", []string{"id", "sender", "recipient", "body", "pair"}},
	{"room_messages", []string{"id", "origin", "seq", "room", "sender", "body", "at"}},
}

// historySchema is the history's migrations. Version 0 is a file of any
// release before versions were recorded: step 1 brings each of them (one
// without rooms, or without message times) to today's schema.
var historySchema = migrate.Set{
	Key: "chat:history",
	Exists: func(ctx context.Context, x migrate.Exec) (bool, error) {
		return x.Exists(ctx, `SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'`)
	},
	Base: func(ctx context.Context, x migrate.Exec) error { return x.Exec(ctx, historyDDL) },
	// Check refuses a messages table, or a room_messages table, that lacks a
	// column of the history's: the steps would ALTER someone else's table.
	Check: func(ctx context.Context, x migrate.Exec) error {
		var missing []string
		for _, h := range historyColumns {
			if h.table != "messages" {
				ok, err := x.Exists(ctx, `SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1`, h.table)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
			}
			for _, c := range h.cols {
				ok, err := x.Exists(ctx, `SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2`, h.table, c)
				if err != nil {
					return err
				}
				if !ok {
					missing = append(missing, h.table+"."+c)
				}
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("it lacks column(s) %s of the chat's history; give the history a file of its own", strings.Join(missing, ", "))
		}
		return nil
	},
	Steps: []migrate.Step{{Desc: "rooms and message times", Up: func(ctx context.Context, x migrate.Exec) error {
		if err := x.Exec(ctx, historyDDL); err != nil {
			return err
		}
		has, err := x.Exists(ctx, `SELECT 1 FROM pragma_table_info('messages') WHERE name = 'at'`)
		if err != nil || has {
			return err
		}
		return x.Exec(ctx, `ALTER TABLE messages ADD COLUMN at INTEGER NOT NULL DEFAULT 0`)
	}}},
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

const insertMessage = `INSERT INTO messages (sender, recipient, body, pair, at) VALUES (?, ?, ?, ?, ?)`

// Append stores one message durably: when it returns nil, the message is
// committed. It uses the prepared statement AppendBatch uses for one
// message, in a transaction of its own.
func (s *Store) Append(ctx context.Context, m Message) error {
	st, err := s.insert(ctx, 1)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, m.From, m.To, m.Text, pairKey(m.From, m.To), millis(m.Time))
	if err == nil {
		s.wroteLog()
	}
	return err
}

// rowsPerInsert is how many messages one INSERT of AppendBatch carries.
const rowsPerInsert = 64

// AppendBatch stores direct messages ms and room messages rooms in one
// transaction: when it returns nil they are all committed, in order
// (room messages already stored are left as they are, as by AppendRoom);
// otherwise none is. It inserts up to rowsPerInsert direct messages per
// statement.
func (s *Store) AppendBatch(ctx context.Context, ms []Message, rooms []RoomMsg) error {
	// The statements are prepared before the transaction takes the
	// store's one connection: full rows at a time, and the rest.
	full := min(len(ms), rowsPerInsert)
	var stFull, stRest *sql.Stmt
	var err error
	if full > 0 {
		if stFull, err = s.insert(ctx, full); err != nil {
			return err
		}
	}
	if r := len(ms) % rowsPerInsert; len(ms) > rowsPerInsert && r != 0 {
		if stRest, err = s.insert(ctx, r); err != nil {
			return err
		}
	}
	ap, _ := s.args.Get().(*[]any)
	if ap == nil {
		ap = new([]any)
	}
	args := (*ap)[:0]
	defer func() {
		clear(args[:cap(args)]) // let the messages go
		*ap = args[:0]
		s.args.Put(ap)
	}()
	if len(rooms) == 0 && len(ms) > 0 && len(ms) <= rowsPerInsert {
		// One statement is a transaction of its own: no BEGIN and COMMIT
		// to run, which a quiet chat (one message per commit) notices.
		for _, m := range ms {
			args = append(args, m.From, m.To, m.Text, pairKey(m.From, m.To), millis(m.Time))
		}
		if _, err := stFull.ExecContext(ctx, args...); err != nil {
			return err
		}
		s.wroteLog()
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for len(ms) > 0 {
		k, st := min(len(ms), rowsPerInsert), stFull
		if k < full {
			st = stRest
		}
		args = args[:0]
		for _, m := range ms[:k] {
			args = append(args, m.From, m.To, m.Text, pairKey(m.From, m.To), millis(m.Time))
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return err
		}
		ms = ms[k:]
	}
	for _, m := range rooms {
		if _, err := tx.ExecContext(ctx, insertRoomMessage, m.Origin, m.Seq, m.Room, m.From, m.Text, millis(m.Time)); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.wroteLog()
	return nil
}

// insert returns the prepared INSERT of n direct messages.
func (s *Store) insert(ctx context.Context, n int) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.inserts[n]; st != nil {
		return st, nil
	}
	var b strings.Builder
	b.WriteString(insertMessage)
	for range n - 1 {
		b.WriteString(`, (?, ?, ?, ?, ?)`)
	}
	st, err := s.db.PrepareContext(ctx, b.String())
	if err != nil {
		return nil, err
	}
	s.inserts[n] = st
	return st, nil
}

// AppendRoom stores one room message durably, once: a message already
// stored (the same Origin and Seq) is left as it is.
func (s *Store) AppendRoom(ctx context.Context, m RoomMsg) error {
	_, err := s.db.ExecContext(ctx, insertRoomMessage, m.Origin, m.Seq, m.Room, m.From, m.Text, millis(m.Time))
	if err == nil {
		s.wroteLog()
	}
	return err
}

const insertRoomMessage = `INSERT INTO room_messages (origin, seq, room, sender, body, at) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (origin, seq) DO NOTHING`

// Room returns the last messages of room, oldest first, each with the
// room as its To: at most limit of them, and no more than maxBytes of
// text (but always the most recent one); maxBytes ≤ 0 means no byte bound.
func (s *Store) Room(ctx context.Context, room string, limit, maxBytes int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sender, ?, body, at FROM room_messages WHERE room = ? ORDER BY id DESC LIMIT ?`, room, room, limit)
	if err != nil {
		return nil, err
	}
	return latest(rows, maxBytes)
}

// Between returns the last messages between a and b, oldest first: at
// most limit of them, and no more than maxBytes of text (but always the
// most recent one); maxBytes ≤ 0 means no byte bound.
func (s *Store) Between(ctx context.Context, a, b string, limit, maxBytes int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sender, recipient, body, at FROM messages WHERE pair = ? ORDER BY id DESC LIMIT ?`, pairKey(a, b), limit)
	if err != nil {
		return nil, err
	}
	return latest(rows, maxBytes)
}

// latest reads rows of (sender, recipient, body, at), newest first, while
// their text fits in maxBytes, and returns them oldest first.
func latest(rows *sql.Rows, maxBytes int) ([]Message, error) {
	defer rows.Close()
	var out []Message
	size := 0
	for rows.Next() {
		var m Message
		var at int64
		if err := rows.Scan(&m.From, &m.To, &m.Text, &at); err != nil {
			return nil, err
		}
		m.Time = fromMillis(at)
		size += len(m.Text)
		if maxBytes > 0 && len(out) > 0 && size > maxBytes {
			break
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// Close stops the checkpointer and closes the database (the log is
// checkpointed as the last connection closes). It is idempotent.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.mu.Lock()
		for _, st := range s.inserts {
			st.Close()
		}
		clear(s.inserts)
		s.mu.Unlock()
		err = errors.Join(s.ckpt.Close(), s.db.Close())
	})
	return err
}

// historyOwner is the gen_server that owns the Store: it opens it in Init
// and closes it when it ends, so a crash and restart reopens the file.
//
// It commits in groups. An append is answered only once its transaction
// has committed (SENT means on disk). The owner commits on its own
// goroutine; the appends that arrive while a transaction is in flight wait
// in its mailbox, and go together in the next transaction as soon as the
// first is done: a busy chat commits many messages at once, a quiet one
// commits each message at once, alone. (An earlier design ran the
// transactions on a writer process of the owner's, which cost two more
// hand-offs between goroutines per transaction and saved nothing: the
// Store has one connection, which the owner's reads wait for anyway.)
type historyOwner struct {
	server.Defaults
	svc      *Service
	path     string
	sync     Sync
	store    *Store
	pending  []pendingAppend // appends not yet committed, oldest first
	deferred int             // messages handled since the pending appends could have gone
	ms       []Message       // the direct messages of the batch being committed
	rooms    []RoomMsg       // and its room messages

	// What commit hands p.Batch: answer, made once, and the batch it
	// answers (set only while p.Batch runs it, on the owner's goroutine).
	commitCtx context.Context // the owner's context without its cancellation (see commit), made once
	answerFn  func(*gotp.Batch)
	answering []pendingAppend
	answerErr error
	origin    string
}

type appendMsg struct{ m Message }
type betweenReq struct{ a, b string }
type appendRoomMsg struct{ m RoomMsg }
type roomReq struct{ room string }

// appendReq asks the history owner to store m for the connection process
// pid, and to answer once it is committed; it is how a connection sends
// without waiting in a call (appendMsg is the call). Once m is committed,
// the owner also hands it to the recipient's connection to (when to is
// not zero), before the answer (see historyOwner.answer).
//
// Once m is committed the owner claims the answer (state: sendPending to
// sendClaimed), then answers in one of two ways:
//   - it sends the request itself back to pid (a pointer: the answer
//     allocates nothing), and the process queues SENT;
//   - or, for a small batch and a sender on this node (from), it answers
//     the SEND itself: it queues SENT in the sender's outbox and frees
//     its slot (conn.sentDirect), and wakes the process only if commands
//     wait behind the SEND (waits). The process is not woken at all for
//     a SEND in a quiet chat.
//
// A commit that failed is sent back with err set, unclaimed. The sender's
// process answers the SEND itself (ERROR unavailable) from sendPending
// only: on such an answer, or on the owner's Down, which may come while a
// killed owner's goroutine is still committing. Whoever moves the state
// from sendPending answers; an owner that finds it answered already
// neither answers nor delivers the message.
//
// A connection sends a new *appendReq for each SEND: an owner killed while
// it handles one may still read it after the process has gone on to its
// next SEND.
type appendReq struct {
	m    Message
	pid  gotp.PID
	from *conn // pid's connection, if on this node (nil in tests without a service)
	to   gotp.PID
	toc  *conn // to's connection, if on this node (nil in tests without a service)
	err  error // the answer's, set by the owner before it sends the request back

	state atomic.Uint32 // sendPending, then sendClaimed (by the owner) or sendAnswered
	waits atomic.Bool   // commands wait behind the SEND: the owner that answers it wakes the process
}

// The states of an appendReq's answer. The owner claims the answer
// (sendPending to sendClaimed) once the message is committed; SENT is
// queued, by the owner or by the process, and then the state is
// sendAnswered. The process answers an error itself (sendPending to
// sendAnswered). A SEND is in flight until sendAnswered: the commands
// after it wait, so that their replies follow its SENT.
const (
	sendPending uint32 = iota
	sendClaimed
	sendAnswered
)

// appended is the answer to an appendMsg or an appendRoomMsg: err is nil
// once the message is committed.
type appended struct {
	err error
}

// pendingAppend is an append waiting for its transaction: of a direct
// message m, or of a room message (room, when room is true); from a call
// (from), or from an appendReq (req).
type pendingAppend struct {
	m    Message
	rm   RoomMsg
	room bool
	from server.From
	req  *appendReq
}

// size is the length of the append's text.
func (a *pendingAppend) size() int { return len(a.m.Text) + len(a.rm.Text) }

func (h *historyOwner) Init(ctx context.Context, p *gotp.Process) error {
	p.TrapExit(true) // so that Terminate closes the store on shutdown
	s, err := OpenStore(ctx, h.path, h.sync)
	if err != nil {
		return err
	}
	h.store = s
	if h.svc != nil && h.svc.cfg.onOpen != nil {
		h.svc.cfg.onOpen(s)
	}
	h.commitCtx = context.WithoutCancel(p.Context())
	context.AfterFunc(p.Context(), func() { s.Close() }) // closed however the owner ends: a kill runs no Terminate
	return nil
}

// HandleCall handles a call, then commits the pending appends if it is
// time (see commitNext).
func (h *historyOwner) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	reply, err := h.handleCall(p, from, req)
	if err == nil {
		err = h.commitNext(p)
	}
	return reply, err
}

func (h *historyOwner) handleCall(p *gotp.Process, from server.From, req any) (any, error) {
	ctx := p.Context()
	switch r := req.(type) {
	case appendMsg:
		h.pending = append(h.pending, pendingAppend{m: r.m, from: from})
		return server.NoReply, nil
	case appendRoomMsg:
		h.pending = append(h.pending, pendingAppend{rm: r.m, room: true, from: from})
		return server.NoReply, nil
	case betweenReq:
		ms, err := h.store.Between(ctx, r.a, r.b, HistoryLimit, HistoryMaxBytes)
		if err != nil {
			return nil, err
		}
		return ms, nil
	case roomReq:
		ms, err := h.store.Room(ctx, r.room, RoomHistoryLimit, HistoryMaxBytes)
		if err != nil {
			return nil, err
		}
		return ms, nil
	case crashNow:
		return nil, errors.New("history owner: crash requested")
	}
	return h.Defaults.HandleCall(p, from, req)
}

// commitNext commits the next batch of pending appends, unless more
// messages wait in the owner's mailbox (appends, most likely, that will
// join the batch): it is called after every message, so the batch goes
// once the mailbox is empty, and at the latest after maxBatch messages or
// with maxBatch appends. Waiting for the mailbox adds no delay (those
// messages are already there) and makes the batches of a busy chat
// larger: fewer commits, each one's cost shared by more messages.
//
// A commit that fails is the owner's crash (a store that cannot write is
// restarted and reopened); the appends of the batch are answered with the
// error first, and those still pending get one from their calls, or the
// owner's Down.
func (h *historyOwner) commitNext(p *gotp.Process) error {
	for len(h.pending) > 0 {
		if h.deferred++; len(h.pending) < maxBatch && h.deferred < maxBatch && p.MailboxLen() > 0 {
			return nil
		}
		h.deferred = 0
		n, size := 0, 0
		for n < len(h.pending) && n < maxBatch && (n == 0 || size+h.pending[n].size() <= maxBatchBytes) {
			size += h.pending[n].size()
			n++
		}
		err := h.commit(p, h.pending[:n])
		rest := copy(h.pending, h.pending[n:])
		clear(h.pending[rest:])
		h.pending = h.pending[:rest]
		if err != nil {
			return fmt.Errorf("history: commit: %w", err)
		}
		// More than one batch was pending: the rest goes now, unless
		// messages wait (the next one commits it then).
	}
	return nil
}

// commit commits batch in one transaction, then answers each append of
// it and hands each committed direct message to its recipient's
// connection (see answer and deliver: a small batch's SENTs and MSGs the
// owner queues in their clients' outboxes itself, and starts writing).
//
// The answers and deliveries of one batch go out as a gotp.Batch: the
// connections they wake (hundreds, flat out) are handled by a goroutine
// or two whose stacks have grown to fit once, instead of a new goroutine
// each, and a connection that is both a recipient and a sender of the
// batch finds its MSG and its SENT in its mailbox together, and writes
// them to its client in one system call.
func (h *historyOwner) commit(p *gotp.Process, batch []pendingAppend) error {
	h.ms, h.rooms = h.ms[:0], h.rooms[:0]
	for i := range batch {
		if a := &batch[i]; a.room {
			h.rooms = append(h.rooms, a.rm)
		} else {
			h.ms = append(h.ms, a.m)
		}
	}
	if h.svc != nil && h.svc.cfg.onCommit != nil {
		h.svc.cfg.onCommit(len(batch))
	}
	// A killed owner goes on with the handler it is in (its goroutine is
	// not stopped), but its senders have its Down already and answer
	// ERROR unavailable: it starts no transaction then, so that the error
	// means "not stored" unless the kill came during the transaction.
	//
	// The transaction itself runs without the process's cancellation:
	// with a context that can end, the SQLite driver starts a goroutine
	// for every statement, to interrupt it should the context end. A
	// transaction is bounded (maxBatch messages, maxBatchBytes) and the
	// file is this process's alone, so it is let finish.
	var err error
	if cause := context.Cause(p.Context()); cause != nil {
		err = fmt.Errorf("history owner gone before the commit: %w", cause)
	} else {
		err = h.store.AppendBatch(h.commitCtx, h.ms, h.rooms)
	}
	clear(h.ms)
	clear(h.rooms)
	if err == nil && h.svc != nil {
		h.svc.commits.Add(1)
		h.svc.committed.Add(uint64(len(batch)))
	}
	if h.answerFn == nil {
		h.answerFn, h.origin = h.answer, p.Node().Name()
	}
	h.answering, h.answerErr = batch, err
	p.Batch(h.answerFn)
	h.answering, h.answerErr = nil, nil
	return err
}

// answer is commit's function for p.Batch (made once, so that a commit
// does not allocate a closure): it answers the appends of h.answering,
// committed or not as h.answerErr says.
func (h *historyOwner) answer(b *gotp.Batch) {
	batch, err := h.answering, h.answerErr
	direct := len(batch) <= maxDirect && (h.svc == nil || !h.svc.cfg.noDirect)
	for i := range batch {
		a := &batch[i]
		r := a.req
		if r == nil {
			server.Reply(a.from, appended{err: err})
			continue
		}
		if err != nil {
			r.err = err
			b.Send(r.pid, r)
			continue
		}
		// Committed: the owner claims the answer before it hands the
		// message on. A sender's process that has answered it already
		// (it was told of the owner's death: this owner was killed
		// during the commit) said ERROR unavailable, and may have sent
		// its next message to the next owner; delivered now, this one
		// could reach the recipient after that one. It stays in the
		// history, and goes to nobody.
		if !r.state.CompareAndSwap(sendPending, sendClaimed) {
			continue
		}
		// The MSG first, then the SENT: the sender's next message
		// cannot overtake the MSG, and its latency is the one users
		// wait for (the bare server writes them in this order). A user
		// who sends to itself reads SENT, then the MSG, as the reply to
		// a command comes before the events it causes: its process
		// queues both when it gets the answer (conn.committed).
		if r.to == r.pid {
			b.Send(r.pid, r)
			continue
		}
		c := r.from
		itself := direct && c != nil // the owner writes this one's MSG and SENT
		if !r.to.IsZero() {
			h.deliver(b, r, h.origin, itself)
		}
		if itself {
			c.sentDirect(r)
		} else {
			b.Send(r.pid, r)
		}
	}
}

// maxDirect is the largest batch whose SENTs and MSGs the history owner
// may write to their clients itself (see conn.sentDirect and deliver). A
// small batch is a quiet chat, where the hops through the sender's and the
// recipient's processes are most of a message's time on the server; in a
// busy one's large batches the owner's time is the commits', and the
// processes write in parallel on the Batch's goroutines.
const maxDirect = 8

// deliver hands the committed message of r to its recipient. With direct
// set, a recipient on this node other than the sender, with no message of
// the owner's still in its mailbox, gets it queued in its outbox and
// written at once by the owner (conn.deliverDirect): one goroutine
// hand-off less. Otherwise it goes as a Delivery to the recipient's
// mailbox, counted in its mailed while it waits there. (A message to the
// sender itself does not come here: see answer.)
func (h *historyOwner) deliver(b *gotp.Batch, r *appendReq, origin string, direct bool) {
	if c := r.toc; c != nil {
		if direct && c.mailed.Load() == 0 {
			c.deliverDirect(Msg{From: r.m.From, Text: r.m.Text, Time: r.m.Time})
			c.svc.directs.Add(1)
			return
		}
		c.mailed.Add(1)
		c.svc.mails.Add(1)
		b.Send(r.to, Delivery{From: r.m.From, To: r.m.To, Text: r.m.Text, Origin: origin, Time: r.m.Time, mailed: true})
		return
	}
	b.Send(r.to, Delivery{From: r.m.From, To: r.m.To, Text: r.m.Text, Origin: origin, Time: r.m.Time})
}

// HandleInfo handles a message, then commits the pending appends if it
// is time (see commitNext).
func (h *historyOwner) HandleInfo(p *gotp.Process, msg any) error {
	err := h.handleInfo(p, msg)
	if err == nil {
		err = h.commitNext(p)
	}
	return err
}

func (h *historyOwner) handleInfo(p *gotp.Process, msg any) error {
	switch m := msg.(type) {
	case *appendReq:
		h.pending = append(h.pending, pendingAppend{m: m.m, req: m})
		return nil
	}
	return h.Defaults.HandleInfo(p, msg)
}

func (h *historyOwner) Terminate(p *gotp.Process, reason error) {
	if h.store != nil {
		h.store.Close()
	}
}

// crashNow makes a chat server crash on purpose; the failure-table tests
// use it.
type crashNow struct{}
