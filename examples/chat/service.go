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
	// TCPAddr is where the line protocol listens (":4000"); empty: no TCP.
	TCPAddr string
	// HTTPAddr is where the web page and the WebSocket listen (":8080");
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

	goroutines sync.WaitGroup // readers, accept loop, HTTP server, event forwarders

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
func Start(ctx context.Context, n *gotp.Node, cfg Config) (*Service, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "data"
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
	conns := supervisor.DynamicSpec[session]{
		Restart:  supervisor.Temporary,
		Shutdown: 2 * time.Second,
		Start: func(ctx context.Context, sup *gotp.Process, sess session) (gotp.PID, error) {
			return server.StartLink(ctx, sup, &conn{svc: s, sess: sess})
		},
	}
	return []supervisor.ChildSpec{
		supervisor.Server("online", func() server.Behaviour { return &online{svc: s} }, server.Named(onlineName)),
		supervisor.Server("history", func() server.Behaviour { return &historyOwner{path: path} }, server.Named(historyName)),
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
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.goroutines.Go(func() {
			if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("chat: http server", "err", err)
			}
		})
	}
	return nil
}

func (s *Service) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("chat: accept", "err", err)
			}
			return
		}
		s.startSession(newLineSession(c))
	}
}

// startSession starts a connection process for sess under the connection
// supervisor; if that fails the client is told and the connection closed.
func (s *Service) startSession(sess session) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := supervisor.StartDynamicChild(ctx, s.n, gotp.Name(connectionsName), sess); err != nil {
		s.log.Warn("chat: cannot start a connection", "err", err)
		sess.write(Error{Reason: Unavailable})
		sess.close()
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
// registry, on another node from the user's pg group.
func (s *Service) find(inst *pg.Instance, name string) (gotp.PID, bool) {
	if e, ok := s.users.Find(name); ok {
		return e.PID, true
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

// appendHistory stores one message through the history owner.
func (s *Service) appendHistory(ctx context.Context, m Message) error {
	_, err := server.Call[bool](ctx, s.n, gotp.Name(historyName), appendMsg{m: m})
	return err
}

// RegisterTypes registers the messages the chat sends between nodes on a
// cluster codec; call it on every node before cluster.Join.
func RegisterTypes(c *cluster.Codec) error {
	return errors.Join(
		cluster.Register[Delivery](c, "chat.Delivery"),
		cluster.Register[RoomMsg](c, "chat.RoomMsg"),
	)
}
