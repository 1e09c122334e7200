package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/registry"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// Local names of the tree's processes.
const (
	rootName        = "chat.root"
	onlineName      = "chat.online"
	historyName     = "chat.history"
	connectionsName = "chat.connections"
)

// Root supervisor intensity: tight, so that a failure
// that repeats escalates instead of looping.
const (
	DefaultIntensity = 3
	DefaultPeriod    = 5 * time.Second
)

// Config configures a chat Service. The zero value serves nothing over the
// network and keeps its history in ./data.
type Config struct {
	// DataDir holds the durable data (history.db). Created if missing.
	// Defaults to "data".
	DataDir string
	// HistorySync says when a commit of the history reaches the disk, and
	// so what SENT promises: SyncFull (the zero value) flushes every
	// transaction, SyncNormal flushes at checkpoints (see Sync).
	HistorySync Sync
	// TCPAddr is where the line protocol listens ("127.0.0.1:4000"); empty: no TCP.
	TCPAddr string
	// HTTPAddr is where the web page and the WebSocket listen ("127.0.0.1:8080");
	// empty: no HTTP.
	HTTPAddr string
	// Mount, if set, adds handlers to the HTTP mux (the observer, say).
	// It runs during Start, with the service being started.
	Mount func(mux *http.ServeMux, s *Service)
	// Cluster, if set, makes the chat span the cluster: the chat scope is
	// replicated on it (rooms and users of every node), so users on other
	// nodes can be sent to, rooms reach every node, WHO lists everyone,
	// and a name is held by one user in the whole cluster. Register the
	// chat's message types on its codec with RegisterTypes before Join.
	Cluster *cluster.Cluster
	// Intensity and Period of the root supervisor; zero means the
	// defaults above.
	Intensity int
	Period    time.Duration

	// MaxConnections bounds the clients connected at once, over TCP and
	// the WebSocket together. One more is answered ERROR unavailable (a
	// WebSocket upgrade gets 503 Service Unavailable) and closed. Defaults
	// to DefaultMaxConnections; the process's open-file limit bounds it
	// too (see cmd/chat).
	MaxConnections int
	// MaxOutput bounds, in bytes, what a connection holds for a client
	// that reads slowly. Messages pushed to the client (MSG, ROOM) that
	// would take it over MaxOutput disconnect it with a last ERROR
	// slow_consumer line (a WebSocket closes with that reason): its user
	// goes offline as after QUIT, and nobody else waits for it. Replies to
	// the client's own commands never disconnect it: a command runs only
	// while less than 32 KiB (or MaxOutput/2 if that is less) of replies
	// wait, so a client that reads its replies slowly is slowed down (its
	// connection stops reading) instead. Defaults to DefaultMaxOutput.
	MaxOutput int
	// ReadTimeout bounds how long a partly received line (TCP) or message
	// (WebSocket) may take to arrive in full, from its first byte; then
	// the client is told ERROR read_timeout and the connection closes.
	// Defaults to DefaultReadTimeout; negative means none.
	ReadTimeout time.Duration
	// IdleTimeout, if positive, closes a connection that receives nothing
	// from its client for that long, with ERROR idle_timeout. Zero (the
	// default) means connections may stay silent for ever.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client: a client that reads
	// nothing for that long is disconnected. Defaults to
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// SendBuffer sets each connection's socket send buffer, in bytes
	// (SO_SNDBUF; Linux doubles it for its bookkeeping), so that the
	// outbox's bound, not the kernel's autotuning of the buffer (to 4 MB
	// on Linux), limits how far the replies to a client that pipelines
	// commands and reads slowly run ahead of its reading: each reply the
	// kernel accepts early is work done for nothing the other clients
	// wait behind. Defaults to DefaultSendBuffer; negative leaves the
	// kernel's default (autotuned).
	SendBuffer int

	// CommandRate is each connection's flood control, in units a second
	// (see CostBytes): a command costs one unit for each CostBytes bytes
	// of its text, of its replies and of the events it makes others
	// receive, and at least one, so WHO, HISTORY and JOIN cost by the size
	// of what they return, SAY by its room's members, and a short SEND one.
	// A connection may spend CommandBurst units at once and
	// CommandRate a second; beyond that its commands wait: its connection
	// stops reading until the budget is positive again (TCP then holds
	// the client back), nothing is refused or dropped, the client is not
	// disconnected, and every command that waited counts in
	// ThrottledCommands. Zero means DefaultCommandRate; negative turns
	// flood control off (then only MaxPending commands read ahead and the
	// replies' room hold a client back).
	CommandRate float64
	// CommandBurst is the units a connection may spend at once before
	// CommandRate holds it back. Defaults to DefaultCommandBurst.
	CommandBurst int

	onConn   func(gotp.PID, *conn) // tests: told of every connection process as it starts
	onSlow   func(name string)     // tests: told of every slow consumer as it is cut off, before its last words are queued
	onCommit func(n int)           // tests: called by the history owner before each transaction of n appends (may block it)
	onClaim  func(r *appendReq)    // tests: called by the history owner when it answers r itself, after the MSG and before the SENT (may block it)
	noDirect bool                  // tests: the history owner answers every SEND through the sender's process, as for a large batch
	onOpen   func(*Store)          // tests: told of the history owner's store each time the owner opens it
}

// Defaults of the connection limits in Config.
const (
	DefaultMaxConnections = 10000
	DefaultMaxOutput      = 256 << 10
	DefaultReadTimeout    = 30 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultSendBuffer     = 64 << 10
	// Flood control: 200 short commands a second per connection, or
	// 25.6 KB/s of replies, after a burst of 400 units (51 KB of replies).
	DefaultCommandRate  = 200
	DefaultCommandBurst = 400
)

// withDefaults returns c with the defaults of its zero fields.
func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = DefaultSendBuffer
	}
	if c.CommandRate == 0 {
		c.CommandRate = DefaultCommandRate
	}
	if c.CommandBurst <= 0 {
		c.CommandBurst = DefaultCommandBurst
	}
	return c
}

// Service is a running chat: its supervision tree and its
// listeners.
type Service struct {
	n     *gotp.Node
	cfg   Config
	log   *slog.Logger
	root  gotp.PID
	users *registry.Registry[string, struct{}] // online users of this node

	// origin names this node's incarnation in the room messages it sends;
	// seq numbers them.
	origin string
	seq    atomic.Uint64

	tcp  net.Listener
	http *http.Server
	hln  net.Listener

	goroutines sync.WaitGroup // readers, connections until closed, accept loop, HTTP server

	whoMu sync.Mutex // guards who
	who   whoCache

	local         sync.Map      // gotp.PID → *conn: this node's connection processes, for the history owner's direct deliveries
	conns         atomic.Int64  // connections open (a process, or being started)
	slowConsumers atomic.Uint64 // connections ended with slow_consumer
	throttled     atomic.Uint64 // commands that waited for their connection's flood control (Config.CommandRate)
	commits       atomic.Uint64 // history transactions committed
	committed     atomic.Uint64 // messages in them
	directs       atomic.Uint64 // committed messages the history owner queued in their recipient's outbox itself
	mails         atomic.Uint64 // and those it sent to their recipient's mailbox as a Delivery
	sentDirects   atomic.Uint64 // SENDs the history owner answered itself (SENT queued in the sender's outbox)
	sentWakes     atomic.Uint64 // of those, the ones it woke the sender's process for (commands waited behind them)

	mu       sync.Mutex // guards stopping and err
	stopping bool
	err      error
	done     chan struct{} // closed when the root supervisor has exited
}

// Start builds the tree on node n and starts listening. The tree:
//
//	chat.root          supervisor, one_for_one, intensity 3 in 5 s
//	├── online         gen_server, permanent: the registry of online users and the pg scope "chat"
//	├── history        gen_server, permanent: owns the SQLite history store
//	└── connections    dynamic supervisor: one temporary child per connected client
//
// It fails, starting nothing, on a Config.HistorySync it does not know; and
// with the error of the part that failed (the data directory, the history,
// a listener), having stopped what it had started.
func Start(ctx context.Context, n *gotp.Node, cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if !cfg.HistorySync.valid() {
		return nil, fmt.Errorf("chat: Config.HistorySync %v: want SyncFull or SyncNormal", cfg.HistorySync)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("chat: data directory: %w", err)
	}
	users, err := registry.New[string, struct{}](n, registry.Options{Kind: registry.Unique})
	if err != nil {
		return nil, err
	}
	s := &Service{n: n, cfg: cfg, log: n.Logger(), users: users, done: make(chan struct{}),
		origin: fmt.Sprintf("%s/%d", n.Name(), n.Creation())}
	spec := supervisor.Spec{
		Strategy:  supervisor.OneForOne,
		Intensity: cfg.Intensity,
		Period:    cfg.Period,
		Children:  s.children(),
	}
	if spec.Intensity == 0 {
		spec.Intensity = DefaultIntensity
	}
	if spec.Period == 0 {
		spec.Period = DefaultPeriod
	}
	root, err := supervisor.Start(ctx, n, spec, server.Named(rootName))
	if err != nil {
		return nil, fmt.Errorf("chat: start the tree: %w", err)
	}
	s.root = root
	n.MonitorFunc(root, s.rootDown)
	if err := s.listen(); err != nil {
		s.Stop(ctx)
		return nil, err
	}
	return s, nil
}

// children are the root's children, in start order.
func (s *Service) children() []supervisor.ChildSpec {
	path := filepath.Join(s.cfg.DataDir, "history.db")
	conns := supervisor.DynamicSpec[*conn]{
		Restart:  supervisor.Temporary,
		Shutdown: 2 * time.Second,
		Start: func(ctx context.Context, sup *gotp.Process, c *conn) (gotp.PID, error) {
			// A connection traps exits: the exit that tells it another
			// node's user kept its name (cluster.ErrNameConflict) becomes
			// an ERROR name_taken to its client.
			// InlineCalls lets its reader run its commands (see conn.Init).
			return server.StartLink(ctx, sup, c, server.TrapExit(true), server.InlineCalls())
		},
	}
	return []supervisor.ChildSpec{
		supervisor.Server("online", func() server.Behaviour { return &online{svc: s} }, server.Named(onlineName)),
		// The history owner handles a message for every SEND: a goroutine
		// of its own keeps its grown stack (see server.Dedicated).
		supervisor.Server("history", func() server.Behaviour { return &historyOwner{svc: s, path: path, sync: s.cfg.HistorySync} }, server.Named(historyName), server.Dedicated()),
		conns.ChildSpec("connections", server.Named(connectionsName)),
	}
}

// rootDown runs when the root supervisor exits. Unless Stop caused it, the
// tree gave up (a failure repeated beyond its intensity): the service is
// over, and Done says so.
func (s *Service) rootDown(d gotp.Down) {
	s.mu.Lock()
	if !s.stopping {
		s.err = fmt.Errorf("chat: the root supervisor exited (%v): a failure repeated beyond its restart intensity", d.Reason)
	}
	s.mu.Unlock()
	close(s.done)
}

// Done is closed when the tree has ended: after Stop, or when the root
// supervisor gave up. Err then says which.
func (s *Service) Done() <-chan struct{} { return s.done }

// Err returns nil while the service runs and after a clean Stop, and the
// reason the tree gave up otherwise.
func (s *Service) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Root returns the PID of the root supervisor.
func (s *Service) Root() gotp.PID { return s.root }

// Node returns the node the service runs on.
func (s *Service) Node() *gotp.Node { return s.n }

// TCPAddr returns the address the line protocol listens on, or nil.
func (s *Service) TCPAddr() net.Addr {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.Addr()
}

// HTTPAddr returns the address the web page listens on, or nil.
func (s *Service) HTTPAddr() net.Addr {
	if s.hln == nil {
		return nil
	}
	return s.hln.Addr()
}

// SlowConsumers returns how many connections the service has ended with
// ERROR slow_consumer since it started.
func (s *Service) SlowConsumers() uint64 { return s.slowConsumers.Load() }

// ThrottledCommands returns how many commands have waited for their
// connection's flood control (Config.CommandRate, on by default) since the
// service started. It is safe from any goroutine.
func (s *Service) ThrottledCommands() uint64 { return s.throttled.Load() }

// Users returns the registry of the users connected to this node.
func (s *Service) Users() *registry.Registry[string, struct{}] { return s.users }

func (s *Service) listen() error {
	if s.cfg.TCPAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.TCPAddr)
		if err != nil {
			return fmt.Errorf("chat: listen tcp: %w", err)
		}
		s.tcp = ln
		s.goroutines.Go(func() { s.acceptLoop(ln) })
	}
	if s.cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("chat: listen http: %w", err)
		}
		mux := http.NewServeMux()
		s.routes(mux)
		if s.cfg.Mount != nil {
			s.cfg.Mount(mux, s)
		}
		s.hln = ln
		s.http = &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, netConnKey{}, c) // for the WebSocket's deadlines
			},
		}
		s.goroutines.Go(func() {
			if err := s.http.Serve(deadlineListener{Listener: ln, sendBuffer: s.cfg.SendBuffer}); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("chat: http server", "err", err)
			}
		})
	}
	return nil
}

func (s *Service) acceptLoop(ln net.Listener) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors (EMFILE, ENFILE) or another passing
			// failure: wait, and try again, as net/http does; say so once
			// per episode.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
				s.log.Error("chat: accept failed; retrying (too many open files? raise the open-file limit, or lower -max-conns)", "err", err)
			} else {
				backoff = min(2*backoff, time.Second)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		setSendBuffer(c, s.cfg.SendBuffer)
		if !s.admit() {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(FormatReply(Error{Reason: Unavailable}))
			c.Close()
			continue
		}
		s.startSession(newLineWire(c, s.deadlines()))
	}
}

// setSendBuffer sets c's socket send buffer to n bytes, if n is positive
// and c is a TCP connection.
func setSendBuffer(c net.Conn, n int) {
	if tc, ok := c.(*net.TCPConn); ok && n > 0 {
		tc.SetWriteBuffer(n)
	}
}

// admit counts a new connection, unless MaxConnections are open.
func (s *Service) admit() bool {
	if s.conns.Add(1) > int64(s.cfg.MaxConnections) {
		s.conns.Add(-1)
		s.log.Warn("chat: connection refused: too many connections", "max", s.cfg.MaxConnections)
		return false
	}
	return true
}

func (s *Service) deadlines() readDeadlines {
	return readDeadlines{timeout: s.cfg.ReadTimeout, idle: s.cfg.IdleTimeout}
}

// startSession starts a connection process for w, an admitted connection,
// under the connection supervisor; if that fails the client is told and
// the connection closed. From here on the connection's outbox closes it
// and releases its count.
func (s *Service) startSession(w wire) bool {
	s.goroutines.Add(1) // the connection, until its outbox has closed it
	c := &conn{svc: s, w: w, out: newOutbox(w, s.cfg.MaxOutput, s.cfg.WriteTimeout)}
	c.out.closed = func() {
		s.conns.Add(-1)
		s.goroutines.Done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := supervisor.StartDynamicChild(ctx, s.n, gotp.Name(connectionsName), c); err != nil {
		s.log.Warn("chat: cannot start a connection", "err", err)
		c.out.ready, c.out.failed = func() {}, func() {}
		c.out.end(w.format(Error{Reason: Unavailable}), Unavailable, false)
		return false
	}
	return true
}

// Stop closes the listeners, stops the tree (connections first, in reverse
// start order) and waits for every goroutine of the service, or until ctx
// ends.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	already := s.stopping
	s.stopping = true
	s.mu.Unlock()
	if !already {
		if s.tcp != nil {
			s.tcp.Close()
		}
		if s.http != nil {
			s.http.Shutdown(ctx)
		}
		if !s.root.IsZero() {
			if err := server.Stop(ctx, s.n, s.root, gotp.ErrShutdown); err != nil && !errors.Is(err, gotp.ErrNoProc) {
				return err
			}
		}
	}
	waited := make(chan struct{})
	go func() { s.goroutines.Wait(); close(waited) }()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// find returns the connection of the user name: on this node from the
// registry, on another node from the cluster-wide names (or, failing
// those, from the user's pg group).
func (s *Service) find(inst *pg.Instance, name string) (gotp.PID, bool) {
	if e, ok := s.users.Find(name); ok {
		return e.PID, true
	}
	return s.findElsewhere(inst, name)
}

// findElsewhere is find for a user not online on this node. (Apart from
// find, which runs on a reader's stack: see conn.handleInfo.)
//
//go:noinline
func (s *Service) findElsewhere(inst *pg.Instance, name string) (gotp.PID, bool) {
	if c := s.cfg.Cluster; c != nil {
		if pid, ok := c.Names(UsersSpace).Whereis(name); ok {
			return pid, true
		}
	}
	if inst == nil {
		return gotp.PID{}, false
	}
	members, err := inst.Members(userGroup(name))
	if err != nil || len(members) == 0 {
		return gotp.PID{}, false
	}
	return members[0], true
}

// whoCache is the last WHO reply, encoded for each wire (line, JSON),
// with the groups it was made from: while the groups with members stay
// the same, a WHO costs a comparison of two lists of group names (which
// share their strings) instead of a filtered list and a reply of every
// name encoded again. The flooding clients of the hostile mix, which
// pipeline WHO, took a third of the server's CPU before.
type whoCache struct {
	groups []string
	enc    [2][]byte
}

// whoReply returns the WHO reply of the groups with members (pg's
// WhichGroups), encoded for the line protocol (ws false) or the WebSocket.
// The bytes are shared by every connection that asks: nobody modifies
// them.
func (s *Service) whoReply(groups []string, ws bool, format func(Reply) []byte) []byte {
	k := 0
	if ws {
		k = 1
	}
	s.whoMu.Lock()
	defer s.whoMu.Unlock()
	if !slices.Equal(groups, s.who.groups) {
		s.who = whoCache{groups: groups}
	}
	if b := s.who.enc[k]; b != nil {
		return b
	}
	var names []string
	for _, g := range groups {
		// groups are sorted, and so are the names that follow one prefix.
		if name, ok := strings.CutPrefix(g, "user:"); ok {
			names = append(names, name)
		}
	}
	b := format(Online{Names: names})
	s.who.enc[k] = b
	return b
}

// Directory is what the chat shows a visitor who has not connected: the
// users online and the rooms that have members, on every node, sorted.
type Directory struct {
	Users []string   `json:"users"`
	Rooms []RoomInfo `json:"rooms"`
}

// RoomInfo is one room of a Directory.
type RoomInfo struct {
	Name    string `json:"name"`
	Members int    `json:"members"`
}

// Directory returns the users online and the rooms, asking the online
// registry. It fails while the registry is restarting.
func (s *Service) Directory(ctx context.Context) (Directory, error) {
	return server.Call[Directory](ctx, s.n, gotp.Name(onlineName), directoryReq{})
}

// appendHistory stores one message through the history owner; nil means
// it is committed.
func (s *Service) appendHistory(ctx context.Context, m Message) error {
	r, err := server.Call[appended](ctx, s.n, gotp.Name(historyName), appendMsg{m: m})
	if err != nil {
		return err
	}
	return r.err
}

// appendRoom stores one room message through the history owner; nil means
// it is committed.
func (s *Service) appendRoom(ctx context.Context, m RoomMsg) error {
	r, err := server.Call[appended](ctx, s.n, gotp.Name(historyName), appendRoomMsg{m: m})
	if err != nil {
		return err
	}
	return r.err
}

// RegisterTypes registers the messages the chat sends between nodes on a
// cluster codec; call it on every node before cluster.Join.
func RegisterTypes(c *cluster.Codec) error {
	return errors.Join(
		cluster.Register[Delivery](c, "chat.Delivery"),
		cluster.Register[RoomMsg](c, "chat.RoomMsg"),
	)
}
