package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestMain(m *testing.M) {
	if os.Getenv(nodeProcEnv) != "" {
		os.Exit(nodeProcMain())
	}
	if os.Getenv(tcpEchoEnv) != "" {
		os.Exit(tcpEchoMain())
	}
	gotptest.VerifyTestMain(m)
}

// Test message types, registered on every test node.
type Ping struct {
	From gotp.PID
	N    int
	Note string
}

type Box struct {
	Any any
}

type unregistered struct{ X int }

func testCodec(t testing.TB) *Codec {
	c := NewCodec()
	gotptest.Must(t, Register[Ping](c, "test.Ping"))
	gotptest.Must(t, Register[Box](c, "test.Box"))
	gotptest.Must(t, Register[countTo](c, "test.countTo"))
	gotptest.Must(t, Register[counted](c, "test.counted"))
	gotptest.Must(t, c.RegisterError("test.errBoom", errBoom))
	return c
}

var errBoom = errors.New("boom")

type member struct {
	n *gotp.Node
	c *Cluster
}

func fastOpts(t testing.TB) Options {
	return Options{
		Cluster:           "test",
		HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTimeout:  4 * time.Second, // generous: the shared machine is often loaded
		Codec:             testCodec(t),
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startNode joins a new node named name with opts; it is stopped at the
// end of the test.
func startNode(t testing.TB, name string, opts Options) member {
	t.Helper()
	n := gotptest.NewNode(t, gotptest.Name(name))
	c, err := Join(gotptest.Context(t), n, opts)
	if err != nil {
		t.Fatalf("join %s: %v", name, err)
	}
	return member{n: n, c: c}
}

func stopNode(t testing.TB, n *gotp.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		t.Errorf("stop %s: %v", n.Name(), err)
	}
}

// startCluster starts len(names) nodes, each with its own embedded NATS
// server, routed to all the earlier ones, and waits until every node sees
// every other.
func startCluster(t testing.TB, names ...string) []member {
	t.Helper()
	return startClusterWith(t, nil, names...)
}

// startClusterWith is startCluster with options changed by edit.
func startClusterWith(t testing.TB, edit func(*Options), names ...string) []member {
	t.Helper()
	var ms []member
	var routes []string
	for _, name := range names {
		o := fastOpts(t)
		if edit != nil {
			edit(&o)
		}
		o.Peers = append([]string(nil), routes...)
		m := startNode(t, name, o)
		routes = append(routes, m.c.RouteURL())
		ms = append(ms, m)
	}
	waitMesh(t, ms)
	return ms
}

func waitMesh(t testing.TB, ms []member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range ms {
		var others []string
		for _, o := range ms {
			if o.n != m.n {
				others = append(others, o.n.Name())
			}
		}
		if err := m.c.WaitFor(ctx, others...); err != nil {
			t.Fatalf("%s does not see %v: %v (sees %v)", m.n.Name(), others, err, m.c.Nodes())
		}
	}
}

// proxy is a TCP forwarder that can cut every connection through it and
// refuse new ones, to partition a node's routes.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	gotptest.Must(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "nats-route://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *proxy) pipe(a, b net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(a, b)
	a.Close()
	b.Close()
}

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}
