// Command chat runs gotp's reference chat service: a supervision tree with
// an online registry, a history owner (SQLite under -data) and one process
// per connected user, serving a line protocol over TCP and a web page with
// a WebSocket, the gotp observer under /observer/ and Prometheus metrics
// under /metrics.
//
//	go run ./cmd/chat                      # TCP 127.0.0.1:4000, web 127.0.0.1:8080, data in ./data
//	nc localhost 4000                      # CONNECT ana, SEND bob hi, HISTORY bob, WHO, QUIT
//
// It listens on the loopback interface unless given addresses
// (-tcp :4000 listens on every interface). It exits cleanly on SIGINT or
// SIGTERM, with status 1 when its tree gives up (a failure repeated beyond
// the root's restart intensity) or when the cluster's peers refuse its
// credentials, and with status 2 for bad or unsafe flags: -observer-kill
// needs an observer token.
//
// Secrets are read from the environment as well as from flags (a flag is
// visible to anyone who can list processes): GOTP_OBSERVER_TOKEN for
// -observer-token, GOTP_CLUSTER_TOKEN for -cluster-token; a flag given on
// the command line wins.
//
// Several nodes form one chat with the -cluster flags: each embeds a NATS
// server whose routes listen on -cluster-route, and names the others'
// routes in -cluster-peers (or all join an existing NATS with
// -cluster-nats). Node names (-node) must differ:
//
//	export GOTP_CLUSTER_TOKEN=s3cret
//	go run ./cmd/chat -node a -tcp :4000 -http :8080 -data data/a -cluster-route 127.0.0.1:6222
//	go run ./cmd/chat -node b -tcp :4001 -http :8081 -data data/b -cluster-route 127.0.0.1:6223 -cluster-peers nats-route://127.0.0.1:6222
//
// A node whose peers refuse its token logs an ERROR naming the peer and
// exits with status 1 rather than serve a chat of its own; -cluster-alone
// lets it start alone anyway.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/examples/chat"
	"github.com/gotp/gotp/internal/fdlimit"
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
		histSync     = fs.String("history-sync", "full", `when a commit of the history reaches the disk: "full" flushes each before SENT (a power cut loses no acknowledged message); "normal" flushes at checkpoints, at least 100 ms apart (a power cut may lose what was acknowledged since the last), for a disk whose flushes are slow`)
		tcpAddr      = fs.String("tcp", "127.0.0.1:4000", "address of the line protocol (empty: none; \":4000\": every interface)")
		httpAddr     = fs.String("http", "127.0.0.1:8080", "address of the web page, WebSocket, observer and /metrics (empty: none)")
		nodeName     = fs.String("node", "chat", "name of this node (unique in a cluster)")
		obsToken     = fs.String("observer-token", "", "token the observer and /metrics require (empty: none); also $"+envObserverToken)
		obsKill      = fs.Bool("observer-kill", false, "let the observer page kill processes (needs -observer-token)")
		obsSample    = fs.Duration("observer-sample", observer.DefaultSampleEvery, "how often the observer samples its system history")
		shutdownWait = fs.Duration("shutdown", 10*time.Second, "how long a clean stop may take")
		clRoute      = fs.String("cluster-route", "", "cluster: host:port of this node's embedded NATS routes (enables clustering)")
		clPeers      = fs.String("cluster-peers", "", "cluster: comma-separated route URLs of other nodes (nats-route://host:port)")
		clNATS       = fs.String("cluster-nats", "", "cluster: comma-separated URLs of an existing NATS deployment to join instead of embedding a server")
		clDirect     = fs.String("cluster-direct", "", "cluster: host:port where other nodes make direct links to this one (default: the route's host, a free port)")
		clName       = fs.String("cluster-name", cluster.DefaultClusterName, "cluster: name of the cluster")
		clToken      = fs.String("cluster-token", "", "cluster: token every node must present; also $"+envClusterToken)
		clAlone      = fs.Bool("cluster-alone", false, "cluster: start even if the peers refuse this node's credentials (it then serves a chat of its own)")
		maxConns     = fs.Int("max-conns", chat.DefaultMaxConnections, "clients connected at once, TCP and WebSocket together; one more is refused (ERROR unavailable, or HTTP 503)")
		maxOutput    = fs.Int("max-output", chat.DefaultMaxOutput, "bytes a connection may hold for a client that reads slowly; messages pushed beyond it disconnect the client with ERROR slow_consumer")
		readTimeout  = fs.Duration("read-timeout", chat.DefaultReadTimeout, "how long a partly received line or WebSocket message may take to complete (then ERROR read_timeout); negative: no limit")
		idleTimeout  = fs.Duration("idle-timeout", 0, "close a connection that sends nothing for this long, with ERROR idle_timeout (0, the default: never)")
		writeTimeout = fs.Duration("write-timeout", chat.DefaultWriteTimeout, "disconnect a client that reads nothing for this long")
		cmdRate      = fs.Float64("command-rate", chat.DefaultCommandRate, "flood control: units a second each connection may spend beyond -command-burst; a command costs 1 per 128 bytes of its text, its replies and the lines it makes others receive, at least 1 (a short SEND 1, a WHO of 1,000 users about 71, a short SAY to a room of 1,000 about 200); a faster client waits (its connection stops reading), nothing is refused; negative: off")
		cmdBurst     = fs.Int("command-burst", chat.DefaultCommandBurst, "flood control: units a connection may spend at once before -command-rate holds it back")
		sendBuffer   = fs.Int("send-buffer", chat.DefaultSendBuffer, "socket send buffer of each connection, bytes (SO_SNDBUF): how far replies may run ahead of a client that reads slowly, beyond -max-output; negative: the kernel's autotuned default")
	)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, "Usage: chat [flags]")
		fs.PrintDefaults()
		fmt.Fprintf(out, "\nSecrets may come from the environment instead of flags (flags show in ps):\n"+
			"  %s\tfor -observer-token\n  %s\tfor -cluster-token\n"+
			"A flag given on the command line wins.\n", envObserverToken, envClusterToken)
	}
	if err := fs.Parse(args); err == flag.ErrHelp {
		return 0
	} else if err != nil {
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, env := range map[string]string{"observer-token": envObserverToken, "cluster-token": envClusterToken} {
		if v := os.Getenv(env); v != "" && !set[name] {
			_ = fs.Set(name, v)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	histMode, err := chat.ParseSync(*histSync)
	if err != nil {
		log.Error("chat: -history-sync", "err", err)
		return 2
	}
	if *obsKill && *obsToken == "" {
		log.Error("chat: -observer-kill needs an observer token (-observer-token or $" + envObserverToken +
			"): without one, anyone who can reach the port could kill processes")
		return 2
	}
	// One file per connection, and a margin for the history, the
	// listeners and the cluster.
	if limit, err := fdlimit.Raise(uint64(max(*maxConns, 0)) + 256); err != nil {
		log.Error("chat: open files", "err", fmt.Errorf("-max-conns %d: %w; connections beyond it are refused", *maxConns, err), "limit", limit)
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
			Cluster:      *clName,
			RouteListen:  *clRoute,
			DirectListen: *clDirect,
			Peers:        splitList(*clPeers),
			URLs:         splitList(*clNATS),
			Token:        *clToken,
			Codec:        codec,
			StartAlone:   *clAlone,
		})
		if errors.Is(err, cluster.ErrAuth) {
			for _, e := range authErrors(err) {
				log.Error("chat: the cluster refused this node's credentials; not starting (-cluster-alone to start alone)",
					"peer", e.Peer, "err", e.Err)
			}
			n.Stop(context.Background())
			return 1
		}
		if err != nil {
			log.Error("chat: cannot join the cluster", "err", err)
			n.Stop(context.Background())
			return 1
		}
		for _, e := range cl.AuthFailures() {
			if !e.Inbound {
				log.Error("chat: starting alone: a peer refused this node's credentials", "peer", e.Peer, "err", e.Err)
			}
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
		Cluster:     cl,
		DataDir:     *data,
		HistorySync: histMode,
		TCPAddr:     *tcpAddr,
		HTTPAddr:    *httpAddr,

		MaxConnections: *maxConns,
		MaxOutput:      *maxOutput,
		ReadTimeout:    *readTimeout,
		IdleTimeout:    *idleTimeout,
		WriteTimeout:   *writeTimeout,
		SendBuffer:     *sendBuffer,
		CommandRate:    *cmdRate,
		CommandBurst:   *cmdBurst,
		Mount: func(mux *http.ServeMux, s *chat.Service) {
			obs := observer.Mount(mux, n, observer.Options{
				Token:       *obsToken,
				AllowKill:   *obsKill,
				Sources:     sources(s),
				SampleEvery: *obsSample,
			})
			mux.Handle("/metrics", metrics(obs, s))
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

// Environment variables that hold secrets.
const (
	envObserverToken = "GOTP_OBSERVER_TOKEN"
	envClusterToken  = "GOTP_CLUSTER_TOKEN"
)

// metrics serves gotp's families (the observer's collector) with the Go
// runtime's, the OS process's and the chat's own counters (its limits at
// work), behind the observer's token.
func metrics(obs *observer.Observer, s *chat.Service) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chat_throttled_commands_total",
			Help: "Commands that waited for their connection's flood control (-command-rate, -command-burst).",
		}, func() float64 { return float64(s.ThrottledCommands()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chat_slow_consumers_total",
			Help: "Connections ended with ERROR slow_consumer (-max-output).",
		}, func() float64 { return float64(s.SlowConsumers()) }),
	)
	if err := obs.Register(reg); err != nil {
		panic(err) // a fresh registry: cannot happen
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !obs.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gotp observer"`)
			http.Error(w, "metrics: token required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authErrors returns the *cluster.AuthError values in err (one, or several
// joined).
func authErrors(err error) []*cluster.AuthError {
	if e, ok := err.(*cluster.AuthError); ok {
		return []*cluster.AuthError{e}
	}
	var out []*cluster.AuthError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, authErrors(e)...)
		}
	} else if e, ok := errors.AsType[*cluster.AuthError](err); ok {
		out = append(out, e)
	}
	return out
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
