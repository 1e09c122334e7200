// Command cluster is two (or more) of your own programs in one gotp
// cluster: each run is a node with an embedded NATS server, and the nodes
// find each other's greeter through a process group that spans them.
//
//	go run ./examples/cluster -name a -route 127.0.0.1:6222
//	go run ./examples/cluster -name b -route 127.0.0.1:6223 -peers nats-route://127.0.0.1:6222
//
// Each node starts a greeter gen_server that joins the group "greeters" of
// a replicated pg scope, then calls every greeter of the other nodes once,
// with a message type registered on every node's codec. It reports nodes
// that come up and go down: stop one with Ctrl-C and the other hears at
// once; kill it with kill -9 and the other hears after the heartbeat
// timeout. Set -token (or CLUSTER_TOKEN) to the same secret on every node
// to keep others out.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/cluster"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// Hello is the message that crosses nodes. Every node registers it on its
// codec under the same name.
type Hello struct{ From string }

// greeter answers a Hello.
type greeter struct {
	server.Defaults
	scope *pg.Scope
}

func (g *greeter) Init(ctx context.Context, p *gotp.Process) error {
	group, err := g.scope.Open(p)
	if err != nil {
		return err
	}
	return group.Join("greeters")
}

func (g *greeter) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	if h, ok := req.(Hello); ok {
		return fmt.Sprintf("hello %s, this is %s", h.From, p.Node().Name()), nil
	}
	return g.Defaults.HandleCall(p, from, req)
}

type config struct {
	name      string
	route     string
	peers     []string
	token     string
	heartbeat time.Duration
}

func main() {
	var c config
	var peers string
	flag.StringVar(&c.name, "name", "", "this node's name, unique in the cluster (required)")
	flag.StringVar(&c.route, "route", "127.0.0.1:6222", "host:port where this node's NATS server takes routes from others")
	flag.StringVar(&peers, "peers", "", "comma-separated route URLs of other nodes (nats-route://host:port)")
	flag.StringVar(&c.token, "token", os.Getenv("CLUSTER_TOKEN"), "the cluster's shared secret (default $CLUSTER_TOKEN)")
	flag.DurationVar(&c.heartbeat, "heartbeat-timeout", cluster.DefaultHeartbeatTimeout, "how long a silent node is waited for before it is declared down")
	flag.Parse()
	if peers != "" {
		c.peers = strings.Split(peers, ",")
	}
	if c.name == "" {
		fmt.Fprintln(os.Stderr, "cluster: -name is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// run is one node, until ctx ends. Every line it writes to out starts
// with the node's name.
func run(ctx context.Context, c config, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, c.name+": "+format+"\n", args...) }
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n := gotp.NewNode(gotp.Options{Name: c.name, Logger: logger})
	defer n.Stop(context.Background())

	codec := cluster.NewCodec()
	if err := cluster.Register[Hello](codec, "example.Hello"); err != nil {
		return err
	}
	joinCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := cluster.Join(joinCtx, n, cluster.Options{
		Cluster:          "example",
		RouteListen:      c.route,
		Peers:            c.peers,
		Token:            c.token,
		Codec:            codec,
		HeartbeatTimeout: c.heartbeat,
	})
	if err != nil {
		return err
	}
	events, _ := cl.Subscribe()
	defer events.Close()

	scope, err := pg.Start(ctx, n, "greeters", pg.Options{})
	if err != nil {
		return err
	}
	if err := cl.Replicate(scope); err != nil {
		return err
	}
	if _, err := server.Start(ctx, n, &greeter{scope: scope}); err != nil {
		return err
	}
	// The program looks at the group through an instance bound to a
	// process of its own that does nothing else.
	owner := make(chan *gotp.Process)
	n.Spawn(func(p *gotp.Process) error {
		owner <- p
		_, err := p.Receive(p.Context())
		return err
	})
	view, err := scope.Open(<-owner)
	if err != nil {
		return err
	}
	say("up, routes at %s", cl.RouteURL())

	greeted := map[gotp.PID]bool{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := n.Stop(context.Background()); err != nil { // peers hear of it at once
				return err
			}
			say("stopped")
			return nil
		case ev := <-events.C():
			switch ev.Kind {
			case cluster.NodeUp:
				say("%s is up", ev.Node)
			case cluster.NodeDown:
				say("%s is down", ev.Node)
			}
		case <-tick.C:
			// Greet every greeter of another node once. Group membership
			// reaches this node shortly after the other node comes up.
			members, _ := view.Members("greeters")
			for _, pid := range members {
				if pid.Node() == c.name || greeted[pid] {
					continue
				}
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				reply, err := server.Call[string](callCtx, n, pid, Hello{From: c.name})
				cancel()
				if err != nil {
					say("calling %s's greeter: %v", pid.Node(), err)
					continue
				}
				greeted[pid] = true
				say("%s says: %s", pid.Node(), reply)
			}
		}
	}
}
