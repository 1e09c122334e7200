// Command chat runs gotp's reference chat service: a supervision tree with
// an online registry, a history owner (SQLite under -data) and one process
// per connected user, serving a line protocol over TCP and a web page with
// a WebSocket, and the gotp observer under /observer/.
//
//	go run ./cmd/chat                      # TCP :4000, web :8080, data in ./data
//	nc localhost 4000                      # CONNECT ana, SEND bob hi, HISTORY bob, WHO, QUIT
//
// It exits cleanly on SIGINT or SIGTERM, and with status 1 when its tree
// gives up (a failure repeated beyond the root's restart intensity).
//
// Several nodes form one chat with the -cluster flags: each embeds a NATS
// server whose routes listen on -cluster-route, and names the others'
// routes in -cluster-peers (or all join an existing NATS with
// -cluster-nats). Node names (-node) must differ:
//
//	go run ./cmd/chat -node a -tcp :4000 -http :8080 -data data/a -cluster-route 127.0.0.1:6222
//	go run ./cmd/chat -node b -tcp :4001 -http :8081 -data data/b -cluster-route 127.0.0.1:6223 -cluster-peers nats-route://127.0.0.1:6222
package main

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/examples/chat"
	"github.com/gotp/gotp/observer"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run is the program with its command-line arguments (without the program
// name); it returns the exit status: 0 after a clean stop, 1 when the tree
// gave up or could not start, 2 for bad flags.
func run(args []string) int {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	var (
		data         = fs.String("data", "./data", "directory of the durable data (history.db)")
		tcpAddr      = fs.String("tcp", ":4000", "address of the line protocol (empty: none)")
		httpAddr     = fs.String("http", ":8080", "address of the web page, WebSocket and observer (empty: none)")
		nodeName     = fs.String("node", "chat", "name of this node (unique in a cluster)")
		obsToken     = fs.String("observer-token", "", "token the observer requires (empty: none)")
		obsKill      = fs.Bool("observer-kill", false, "let the observer page kill processes")
		shutdownWait = fs.Duration("shutdown", 10*time.Second, "how long a clean stop may take")
		clRoute      = fs.String("cluster-route", "", "cluster: host:port of this node's embedded NATS routes (enables clustering)")
		clPeers      = fs.String("cluster-peers", "", "cluster: comma-separated route URLs of other nodes (nats-route://host:port)")
		clNATS       = fs.String("cluster-nats", "", "cluster: comma-separated URLs of an existing NATS deployment to join instead of embedding a server")
		clName       = fs.String("cluster-name", cluster.DefaultClusterName, "cluster: name of the cluster")
		clToken      = fs.String("cluster-token", "", "cluster: token every node must present")
		maxConns     = fs.Int("max-conns", chat.DefaultMaxConnections, "clients connected at once, TCP and WebSocket together; one more is refused (ERROR unavailable, or HTTP 503)")
		maxOutput    = fs.Int("max-output", chat.DefaultMaxOutput, "bytes a connection may hold for a client that reads slowly; messages pushed beyond it disconnect the client with ERROR slow_consumer")
		readTimeout  = fs.Duration("read-timeout", chat.DefaultReadTimeout, "how long a partly received line or WebSocket message may take to complete (then ERROR read_timeout); negative: no limit")
		idleTimeout  = fs.Duration("idle-timeout", 0, "close a connection that sends nothing for this long, with ERROR idle_timeout (0, the default: never)")
		writeTimeout = fs.Duration("write-timeout", chat.DefaultWriteTimeout, "disconnect a client that reads nothing for this long")
	)
	if err := fs.Parse(args); err == flag.ErrHelp {
		return 0
	} else if err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// One file per connection, and a margin for the history, the
	// listeners and the cluster.
	if limit, err := raiseOpenFiles(uint64(max(*maxConns, 0)) + 256); err != nil {
		log.Error("chat: open files", "err", err, "limit", limit)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	n := gotp.NewNode(gotp.Options{Name: *nodeName, Logger: log})
	var cl *cluster.Cluster
	if *clRoute != "" || *clPeers != "" || *clNATS != "" {
		codec := cluster.NewCodec()
		if err := chat.RegisterTypes(codec); err != nil {
			log.Error("chat: cluster codec", "err", err)
			return 1
		}
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		cl, err = cluster.Join(jctx, n, cluster.Options{
			Cluster:     *clName,
			RouteListen: *clRoute,
			Peers:       splitList(*clPeers),
			URLs:        splitList(*clNATS),
			Token:       *clToken,
			Codec:       codec,
		})
		if err != nil {
			log.Error("chat: cannot join the cluster", "err", err)
			n.Stop(context.Background())
			return 1
		}
		if u := cl.RouteURL(); u != "" {
			log.Info("chat: cluster routes listening", "node", *nodeName, "route", u)
		}
	}
	sources := func(s *chat.Service) []observer.Source {
		src := []observer.Source{
			observer.RegistrySource("chat.users", s.Users()),
			observer.ScopeSource(n, chat.ScopeID),
		}
		if cl != nil {
			src = append(src, observer.ClusterSource(cl))
		}
		return src
	}
	svc, err := chat.Start(ctx, n, chat.Config{
		Cluster:  cl,
		DataDir:  *data,
		TCPAddr:  *tcpAddr,
		HTTPAddr: *httpAddr,

		MaxConnections: *maxConns,
		MaxOutput:      *maxOutput,
		ReadTimeout:    *readTimeout,
		IdleTimeout:    *idleTimeout,
		WriteTimeout:   *writeTimeout,
		Mount: func(mux *http.ServeMux, s *chat.Service) {
			observer.Mount(mux, n, observer.Options{
				Token:     *obsToken,
				AllowKill: *obsKill,
				Sources:   sources(s),
			})
		},
	})
	if err != nil {
		log.Error("chat: cannot start", "err", err)
		n.Stop(context.Background())
		return 1
	}
	if a := svc.TCPAddr(); a != nil {
		log.Info("chat: line protocol listening", "tcp", a.String())
	}
	if a := svc.HTTPAddr(); a != nil {
		log.Info("chat: web page listening", "http", "http://"+a.String()+"/", "observer", "http://"+a.String()+observer.Prefix)
	}

	code := 0
	select {
	case <-ctx.Done():
		log.Info("chat: stopping")
	case <-svc.Done():
		log.Error("chat: giving up", "err", svc.Err())
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownWait)
	defer cancel()
	if err := svc.Stop(sctx); err != nil {
		log.Error("chat: stop", "err", err)
		code = 1
	}
	if err := n.Stop(sctx); err != nil {
		log.Error("chat: node stop", "err", err)
		code = 1
	}
	if code == 0 {
		log.Info("chat: stopped")
	}
	return code
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
