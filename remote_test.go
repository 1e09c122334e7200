package gotp_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// memNet joins nodes in one program through the Transport and Gateway
// seam: each signal goes straight to the Gateway of the target's node, on
// the sender's goroutine. It is synchronous, which also checks that the
// runtime calls its Transport without holding a lock of its own.
type memNet struct {
	mu    sync.Mutex
	gates map[string]*gotp.Gateway
	down  map[string]bool // nodes cut off: signals to and from them are dropped
}

type memTransport struct {
	net  *memNet
	self string
}

func (m *memNet) gate(from, to string) *gotp.Gateway {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down[from] || m.down[to] {
		return nil
	}
	return m.gates[to]
}

func (t memTransport) Send(from, to gotp.PID, msg any) {
	if g := t.net.gate(t.self, to.Node()); g != nil {
		g.Send(from, to, msg)
	}
}

func (t memTransport) Exit(from, to gotp.PID, reason error, viaLink bool) {
	if g := t.net.gate(t.self, to.Node()); g != nil {
		g.Exit(from, to, reason, viaLink)
	}
}

func (t memTransport) Link(from, to gotp.PID) {
	if g := t.net.gate(t.self, to.Node()); g != nil {
		g.Link(from, to)
	}
}

func (t memTransport) Unlink(from, to gotp.PID) {
	if g := t.net.gate(t.self, to.Node()); g != nil {
		g.Unlink(from, to)
	}
}

func (t memTransport) Monitor(ref gotp.Ref, watcher, target gotp.PID) {
	if g := t.net.gate(t.self, target.Node()); g != nil {
		g.Monitor(ref, watcher, target)
	}
}

func (t memTransport) Demonitor(ref gotp.Ref, target gotp.PID) {
	if g := t.net.gate(t.self, target.Node()); g != nil {
		g.Demonitor(ref, target)
	}
}

func (t memTransport) Down(ref gotp.Ref, watcher, target gotp.PID, reason error) {
	if g := t.net.gate(t.self, ref.Node()); g != nil {
		g.Down(ref, target, reason)
	}
}

func (t memTransport) Close() {}

// cut takes node off the network and tells every other node it is down.
func (m *memNet) cut(node string) {
	m.mu.Lock()
	m.down[node] = true
	var others []*gotp.Gateway
	for name, g := range m.gates {
		if name != node {
			others = append(others, g)
		}
	}
	m.mu.Unlock()
	for _, g := range others {
		g.NodeDown(node)
	}
}

// twoNodes returns nodes "a" and "b" joined by a memNet.
func twoNodes(t *testing.T) (a, b *gotp.Node, net *memNet) {
	t.Helper()
	net = &memNet{gates: make(map[string]*gotp.Gateway), down: make(map[string]bool)}
	var nodes []*gotp.Node
	for _, name := range []string{"a", "b"} {
		n := gotp.NewNode(gotp.Options{Name: name})
		t.Cleanup(func() {
			if err := n.Stop(stopCtx(t)); err != nil {
				t.Errorf("Stop %s: %v", name, err)
			}
		})
		g, err := n.Attach(memTransport{net: net, self: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Attach(memTransport{net: net, self: name}); !errors.Is(err, gotp.ErrAttached) {
			t.Fatalf("second Attach = %v, want ErrAttached", err)
		}
		net.gates[name] = g
		nodes = append(nodes, n)
	}
	return nodes[0], nodes[1], net
}

func TestRemoteSend(t *testing.T) {
	a, b, _ := twoNodes(t)
	toSink := gotptest.NewSink(t, b)
	to, got := toSink.PID(), toSink.C()
	a.Send(to, "from a's node")
	_, res := run(t, a, func(p *gotp.Process) bool {
		for i := range 100 {
			p.Send(to, i)
		}
		return true
	})
	gotptest.Recv(t, res)
	if m := gotptest.Recv(t, got); m != "from a's node" {
		t.Fatal(m)
	}
	for i := range 100 {
		if m := gotptest.Recv(t, got); m != i {
			t.Fatalf("message %d = %v", i, m)
		}
	}
	// A PID of an unknown node, or of a dead process there, is a no-op.
	a.Send(gotp.NewPID("c", 1, 1), "x")
	a.Send(gotp.NewPID("b", b.Creation(), 1<<40), "x")
}

func TestRemoteMonitor(t *testing.T) {
	a, b, _ := twoNodes(t)
	target := waiter(t, b)
	w, ref, got := monitorer(t, a, target)
	fnDowns := make(chan gotp.Down, 1)
	a.MonitorFunc(target, func(d gotp.Down) { fnDowns <- d })
	if in, _ := b.ProcessInfo(target); len(in.MonitoredBy) != 2 {
		t.Fatalf("target's MonitoredBy = %v, want the remote watcher and a zero PID", in.MonitoredBy)
	}
	b.Send(target, errBoom)
	if d := gotptest.Recv(t, got); d != (gotp.Down{Ref: ref, PID: target, Reason: errBoom}) {
		t.Fatalf("got %#v", d)
	}
	if d := gotptest.Recv(t, fnDowns); d.PID != target || d.Reason != errBoom {
		t.Fatalf("MonitorFunc got %#v", d)
	}
	if in, _ := a.ProcessInfo(w); len(in.Monitors) != 0 {
		t.Fatalf("fired remote monitor still listed: %v", in.Monitors)
	}
	// Monitoring a remote process that is gone: Down with ErrNoProc.
	_, ref2, got2 := monitorer(t, a, target)
	if d := gotptest.Recv(t, got2); d != (gotp.Down{Ref: ref2, PID: target, Reason: gotp.ErrNoProc}) {
		t.Fatalf("got %#v", d)
	}
}

func TestRemoteDemonitor(t *testing.T) {
	a, b, _ := twoNodes(t)
	target := waiter(t, b)
	cmd := make(chan func(p *gotp.Process) any)
	out := make(chan any)
	_, err := a.Spawn(func(p *gotp.Process) error {
		for f := range cmd {
			out <- f(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(cmd)
	do := func(f func(p *gotp.Process) any) any { cmd <- f; return gotptest.Recv(t, out) }
	ref := do(func(p *gotp.Process) any { return p.Monitor(target) }).(gotp.Ref)
	if got := do(func(p *gotp.Process) any { return p.Demonitor(ref, false) }); got != true {
		t.Fatalf("Demonitor = %v", got)
	}
	if in, _ := b.ProcessInfo(target); len(in.MonitoredBy) != 0 {
		t.Fatalf("remote monitor not dropped: %v", in.MonitoredBy)
	}
	fnRef := a.MonitorFunc(target, func(gotp.Down) { t.Error("a demonitored MonitorFunc fired") })
	if !a.Demonitor(fnRef, target) {
		t.Fatal("Node.Demonitor of a remote MonitorFunc = false")
	}
	b.Exit(target, errBoom)
	if got := do(func(p *gotp.Process) any { return p.Info().MailboxLen }); got != 0 {
		t.Fatalf("a Down arrived after Demonitor: mailbox %v", got)
	}
}

func TestRemoteLinks(t *testing.T) {
	a, b, _ := twoNodes(t)

	// An abnormal exit crosses the link both ways.
	ra := waiter(t, a)
	rb := waiter(t, b, gotp.LinkTo(ra))
	if in, _ := a.ProcessInfo(ra); len(in.Links) != 1 || in.Links[0] != rb {
		t.Fatalf("a's side of the link: %v", in.Links)
	}
	d := gotptest.Watch(t, b, rb)
	a.Send(ra, errBoom)
	if r := gotptest.Recv(t, d); r != errBoom {
		t.Fatalf("remote linked process died of %v", r)
	}

	// A trapping process gets an Exit message from the remote process.
	trapperSink := gotptest.NewSink(t, a, gotp.TrapExit(true))
	trapper, got := trapperSink.PID(), trapperSink.C()
	child := waiter(t, b, gotp.LinkTo(trapper))
	b.Send(child, errBoom)
	if m := gotptest.Recv(t, got); m != (gotp.Exit{From: child, Reason: errBoom}) {
		t.Fatalf("got %#v", m)
	}

	// Unlink stops the signal.
	x := waiter(t, b)
	unlinked := make(chan struct{})
	y, _ := run(t, a, func(p *gotp.Process) error {
		if err := p.Link(x); err != nil {
			return err
		}
		p.Unlink(x)
		close(unlinked)
		_, err := p.Receive(context.Background())
		return err
	})
	gotptest.Recv(t, unlinked)
	if in, _ := b.ProcessInfo(x); len(in.Links) != 0 {
		t.Fatalf("remote Unlink left %v", in.Links)
	}
	b.Exit(x, errBoom)
	if !a.IsAlive(y) {
		t.Fatal("an unlinked process died")
	}

	// Linking to a remote process that is gone: an exit signal with
	// ErrNoProc comes back, as in Erlang.
	dead := waiter(t, b)
	b.Exit(dead, gotp.ErrKill)
	gate := make(chan struct{})
	linker, _ := run(t, a, func(p *gotp.Process) error {
		<-gate
		_ = p.Link(dead)
		_, err := p.Receive(context.Background())
		return err
	})
	ld := gotptest.Watch(t, a, linker)
	close(gate)
	if r := gotptest.Recv(t, ld); r != gotp.ErrNoProc {
		t.Fatalf("linker died of %v, want ErrNoProc", r)
	}
}

func TestNodeDown(t *testing.T) {
	a, b, net := twoNodes(t)
	target := waiter(t, b)
	_, ref, got := monitorer(t, a, target)
	fnDowns := make(chan gotp.Down, 1)
	a.MonitorFunc(target, func(d gotp.Down) { fnDowns <- d })
	linked := waiter(t, a, gotp.LinkTo(target))
	trapperSink := gotptest.NewSink(t, a, gotp.TrapExit(true), gotp.LinkTo(target))
	trapper, trapGot := trapperSink.PID(), trapperSink.C()
	// b's processes also watch a's: those monitors go when b is lost.
	local := waiter(t, a)
	monitorer(t, b, local)
	if in, _ := a.ProcessInfo(local); len(in.MonitoredBy) != 1 {
		t.Fatalf("MonitoredBy %v", in.MonitoredBy)
	}

	d := gotptest.Watch(t, a, linked)
	net.cut("b")

	if m := gotptest.Recv(t, got); m != (gotp.Down{Ref: ref, PID: target, Reason: gotp.ErrNoConnection}) {
		t.Fatalf("got %#v", m)
	}
	if m := gotptest.Recv(t, fnDowns); m.Reason != gotp.ErrNoConnection {
		t.Fatalf("MonitorFunc got %#v", m)
	}
	if r := gotptest.Recv(t, d); r != gotp.ErrNoConnection {
		t.Fatalf("linked process died of %v", r)
	}
	if m := gotptest.Recv(t, trapGot); m != (gotp.Exit{From: target, Reason: gotp.ErrNoConnection}) {
		t.Fatalf("trapping process got %#v", m)
	}
	if !a.IsAlive(trapper) {
		t.Fatal("the trapping process died")
	}
	if in, _ := a.ProcessInfo(local); len(in.MonitoredBy) != 0 {
		t.Fatalf("monitors held by the lost node remain: %v", in.MonitoredBy)
	}
}

// TestGatewayRunInline: a transport's RunInline runs the handler of an
// idle handler-mode process spawned without AllowInline on the calling
// goroutine, and declines, delivering nothing, for a process busy with a
// message, a function process and an unknown PID.
func TestGatewayRunInline(t *testing.T) {
	_, b, net := twoNodes(t)
	g := net.gates["b"]
	var seen []any // written by the handler, read here: no lock (the race detector checks)
	release := make(chan struct{})
	busy := make(chan struct{}, 1)
	got := make(chan any, 4)
	pid, err := b.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		switch msg {
		case "block":
			busy <- struct{}{}
			<-release
		case "later":
			got <- msg
		default:
			seen = append(seen, msg)
		}
		return false, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.RunInline(pid, "x") {
		t.Fatal("Node.RunInline ran a process spawned without AllowInline")
	}
	for i := range 3 {
		if !g.RunInline(pid, i) {
			t.Fatalf("Gateway.RunInline(%d) on an idle process = false", i)
		}
		if len(seen) != i+1 || seen[i] != i {
			t.Fatalf("after RunInline(%d): seen %v", i, seen)
		}
	}
	b.Send(pid, "block")
	gotptest.Recv(t, busy)
	if g.RunInline(pid, "busy") {
		t.Fatal("Gateway.RunInline ran a process that is handling a message")
	}
	close(release)
	b.Send(pid, "later")
	if m := gotptest.Recv(t, got); m != "later" {
		t.Fatalf("got %v after the declined run, want later", m)
	}
	fn, _ := b.Spawn(func(p *gotp.Process) error { _, err := p.Receive(p.Context()); return err })
	if g.RunInline(fn, "x") {
		t.Fatal("Gateway.RunInline ran a function process")
	}
	b.Exit(fn, gotp.ErrKilled)
	if g.RunInline(gotp.NewPID("b", 1, 1<<40), "x") {
		t.Fatal("Gateway.RunInline ran an unknown PID")
	}
}
