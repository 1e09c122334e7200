package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// crash cuts a node off abruptly, as the death of its process would: its
// direct links close and its embedded server stops (routes and its own
// connection drop) without any goodbye, and it makes no new connection.
// Peers connected over a direct link see it go at once; over NATS only
// by the heartbeat timeout.
func crash(m member) {
	c := m.c
	c.mu.Lock()
	c.closing = true
	var links []*link
	for l := range c.links {
		links = append(links, l)
	}
	c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
	}
	for _, l := range links {
		l.close()
	}
	c.srv.Shutdown()
	c.srv.WaitForShutdown()
}

func waitEvent(t testing.TB, sub *Subscription, kind EventKind, node string, d time.Duration) NodeEvent {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				t.Fatal("subscription closed")
			}
			if ev.Kind == kind && ev.Node == node {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v of %s within %v", kind, node, d)
		}
	}
}

func TestNodeDownFiresMonitorsAndLinks(t *testing.T) {
	for _, how := range []string{"stop", "crash"} {
		t.Run(how, func(t *testing.T) {
			ms := startCluster(t, "a", "b", "c")
			a, c := ms[0], ms[2]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// On c: a plain process, and a server that never answers.
			target, err := c.n.Spawn(func(p *gotp.Process) error { _, err := p.Receive(context.Background()); return err })
			gotptest.Must(t, err)
			held := make(chan struct{}, 1)
			srv, err := server.Start(ctx, c.n, &echo{casts: make(chan any, 1), held: held})
			gotptest.Must(t, err)

			watcherSink := gotptest.NewSink(t, a.n, gotp.TrapExit(true))

			wch := watcherSink.C()
			ref := monitorFrom(t, watcherSink, target)
			linkFrom(t, watcherSink, target)
			syncPair(t, a, c)

			sub, _ := a.c.Subscribe()
			defer sub.Close()
			callErr := make(chan error, 1)
			go func() {
				_, err := server.Call[string](ctx, a.n, srv, "hold")
				callErr <- err
			}()
			// Let the call reach c before c goes.
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("the call did not reach the server")
			}

			start := time.Now()
			if how == "stop" {
				stopNode(t, c.n)
			} else {
				crash(c)
			}
			limit := 2 * time.Second
			if how == "crash" {
				limit = 2*a.c.opts.HeartbeatTimeout + 2*time.Second
			}
			waitEvent(t, sub, NodeDown, "c", limit)
			t.Logf("%s: node down seen after %v", how, time.Since(start))

			// A node that stops ends its processes first (their reason
			// reaches a: shutdown); one that crashes is only seen gone.
			want := gotp.ErrNoConnection
			if how == "stop" {
				want = gotp.ErrShutdown
			}
			got := map[string]bool{}
			for range 2 {
				switch m := gotptest.RecvWithin(t, 5*time.Second, wch).(type) {
				case gotp.Down:
					if m.Ref != ref || m.PID != target || m.Reason != want {
						t.Errorf("down %+v", m)
					}
					got["down"] = true
				case gotp.Exit:
					if m.From != target || m.Reason != want {
						t.Errorf("exit %+v", m)
					}
					got["exit"] = true
				default:
					t.Errorf("unexpected %#v", m)
				}
			}
			if !got["down"] || !got["exit"] {
				t.Fatalf("got %v", got)
			}
			select {
			case err := <-callErr:
				if !errors.Is(err, want) {
					t.Fatalf("call to a lost node: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("call did not return")
			}
			for _, ni := range a.c.Nodes() {
				if ni.Name == "c" {
					t.Fatalf("c still listed: %v", a.c.Nodes())
				}
			}
			// Signals to the lost node: monitor answers noconnection.
			monitorFrom(t, watcherSink, target)
			d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down)
			if d.Reason != gotp.ErrNoConnection {
				t.Fatalf("monitor of a lost node's pid: %v", d.Reason)
			}
		})
	}
}

func TestNewIncarnation(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	oldPIDSink := gotptest.NewSink(t, b.n)
	oldPID := oldPIDSink.PID()
	sub, _ := a.c.Subscribe()
	defer sub.Close()
	stopNode(t, b.n)
	waitEvent(t, sub, NodeDown, "b", 5*time.Second)

	o := fastOpts(t)
	o.Peers = []string{a.c.RouteURL()}
	b2 := startNode(t, "b", o)
	if b2.n.Creation() == b.n.Creation() {
		t.Skip("same random creation twice")
	}
	waitMesh(t, []member{a, b2})
	if got := a.c.Nodes(); len(got) != 1 || got[0].Creation != b2.n.Creation() {
		t.Fatalf("nodes %v", got)
	}
	newPIDSink := gotptest.NewSink(t, b2.n)
	newPID, ch := newPIDSink.PID(), newPIDSink.C()
	watcherSink := gotptest.NewSink(t, a.n, gotp.TrapExit(true))
	wch := watcherSink.C()

	// The old incarnation's PID stays dead.
	if err := a.c.Send(oldPID, "x"); !errors.Is(err, gotp.ErrNoConnection) {
		t.Fatalf("send to an old pid: %v", err)
	}
	monitorFrom(t, watcherSink, oldPID)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoProc {
		t.Fatalf("monitor of an old pid: %v", d.Reason)
	}
	linkFrom(t, watcherSink, oldPID)
	if e := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Exit); e.Reason != gotp.ErrNoProc || e.From != oldPID {
		t.Fatalf("link to an old pid: %+v", e)
	}
	// An old pid with the new creation's id space is not confused either:
	// b2 is asked directly about an old PID (as a third node would).
	newPIDSink.Do(t, func(p *gotp.Process) {})
	a.n.Send(newPID, "to the new one")
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "to the new one" {
		t.Fatalf("got %#v", got)
	}
}

func TestDuplicateNameRefused(t *testing.T) {
	ms := startCluster(t, "a", "b")
	o := fastOpts(t)
	// Name checks see nodes this server routes to directly: list them
	// all, as a seed list does.
	o.Peers = []string{ms[0].c.RouteURL(), ms[1].c.RouteURL()}
	n := gotp.NewNode(gotp.Options{Name: "b"})
	defer stopNode(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Join(ctx, n, o); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a second node named b: %v", err)
	}
	anon := gotp.NewNode(gotp.Options{})
	defer stopNode(t, anon)
	if _, err := Join(ctx, anon, fastOpts(t)); !errors.Is(err, ErrBadName) {
		t.Fatalf("a node without a name: %v", err)
	}
}

func TestWrongCredentialsRefused(t *testing.T) {
	t.Run("client", func(t *testing.T) {
		o := fastOpts(t)
		o.Token = "s3cret"
		o.ClientListen = "127.0.0.1:0"
		a := startNode(t, "a", o)
		url := a.c.srv.ClientURL()

		bad := fastOpts(t)
		bad.URLs = []string{url}
		bad.Token = "wrong"
		n := gotp.NewNode(gotp.Options{Name: "intruder"})
		defer stopNode(t, n)
		_, err := Join(context.Background(), n, bad)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") || !errors.Is(err, ErrAuth) {
			t.Fatalf("join with a wrong token: %v, want an *AuthError", err)
		}
		none := fastOpts(t)
		none.URLs = []string{url}
		if _, err := Join(context.Background(), n, none); err == nil {
			t.Fatal("join without credentials succeeded")
		}
		good := fastOpts(t)
		good.URLs = []string{url}
		good.Token = "s3cret"
		b := startNode(t, "b", good)
		waitMesh(t, []member{a, b})
	})
	t.Run("user-password", func(t *testing.T) {
		o := fastOpts(t)
		o.User, o.Password = "gotp", "pw"
		a := startNode(t, "a", o)
		bad := fastOpts(t)
		bad.User, bad.Password = "gotp", "nope"
		bad.Peers = []string{a.c.RouteURL()}
		refused := gotp.NewNode(gotp.Options{Name: "x"})
		defer stopNode(t, refused)
		if _, err := Join(context.Background(), refused, bad); !errors.Is(err, ErrAuth) {
			t.Fatalf("join with a wrong password: %v, want ErrAuth", err)
		}
		bad.StartAlone = true
		x := startNode(t, "x", bad) // its own server accepts it, but no route forms
		good := fastOpts(t)
		good.User, good.Password = "gotp", "pw"
		good.Peers = []string{a.c.RouteURL()}
		b := startNode(t, "b", good)
		waitMesh(t, []member{a, b})
		// Where absence is the subject, time is the only witness: give the
		// intruder several heartbeat timeouts' worth of chances.
		time.Sleep(3 * time.Second)
		for _, m := range []member{a, b} {
			for _, ni := range m.c.Nodes() {
				if ni.Name == "x" {
					t.Fatalf("%s sees the intruder", m.n.Name())
				}
			}
		}
		if got := x.c.Nodes(); len(got) != 0 {
			t.Fatalf("intruder sees %v", got)
		}
	})
	t.Run("nkey", func(t *testing.T) {
		seed := "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY"
		o := fastOpts(t)
		o.NKeySeed = seed
		o.ClientListen = "127.0.0.1:0"
		a := startNode(t, "a", o)
		good := fastOpts(t)
		good.NKeySeed = seed
		good.URLs = []string{a.c.srv.ClientURL()}
		b := startNode(t, "b", good)
		waitMesh(t, []member{a, b})
		bad := fastOpts(t)
		bad.Token = "guess"
		bad.URLs = []string{a.c.srv.ClientURL()}
		n := gotp.NewNode(gotp.Options{Name: "intruder"})
		defer stopNode(t, n)
		if _, err := Join(context.Background(), n, bad); err == nil {
			t.Fatal("join without the nkey succeeded")
		}
	})
}

func TestPartitionHeals(t *testing.T) {
	// a and b route to each other directly; c reaches them only through
	// proxies that the test can cut. c advertises an unreachable route
	// address so that a and b never dial it around the proxies.
	oa := fastOpts(t)
	a := startNode(t, "a", oa)
	ob := fastOpts(t)
	ob.Peers = []string{a.c.RouteURL()}
	b := startNode(t, "b", ob)
	pa := newProxy(t, strings.TrimPrefix(a.c.RouteURL(), "nats-route://"))
	pb := newProxy(t, strings.TrimPrefix(b.c.RouteURL(), "nats-route://"))
	oc := fastOpts(t)
	oc.Peers = []string{pa.url(), pb.url()}
	oc.RouteAdvertise = unusedAddr(t)
	// a and b dial c's direct links (the smaller name dials) through a
	// proxy too.
	oc.DirectListen = unusedAddr(t)
	pd := newProxy(t, oc.DirectListen)
	oc.DirectAdvertise = strings.TrimPrefix(pd.url(), "nats-route://")
	c := startNode(t, "c", oc)
	ms := []member{a, b, c}
	waitMesh(t, ms)

	scopes := replicatedScopes(t, ms, "chat")
	joinAs(t, scopes[2], "room", 2)
	joinAs(t, scopes[0], "room", 1)
	waitConverged(t, scopes, "room", 3)

	targetSink := gotptest.NewSink(t, c.n)

	target := targetSink.PID()
	watcherSink := gotptest.NewSink(t, a.n)
	wch := watcherSink.C()
	monitorFrom(t, watcherSink, target)
	syncPair(t, a, c)

	sub, _ := a.c.Subscribe()
	defer sub.Close()
	pa.setCut(true)
	pb.setCut(true)
	pd.setCut(true)
	waitEvent(t, sub, NodeDown, "c", 2*oa.HeartbeatTimeout+3*time.Second)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoConnection {
		t.Fatalf("monitor of the cut node: %v", d.Reason)
	}
	// a and b drop c's members; c drops theirs.
	gotptest.EventuallyWithin(t, 10*time.Second, "members of c dropped on a and b", func() bool {
		return countMembers(scopes[0].scope, "room") == 1 && countMembers(scopes[1].scope, "room") == 1
	})
	gotptest.EventuallyWithin(t, 10*time.Second, "members of a dropped on c", func() bool {
		return countMembers(scopes[2].scope, "room") == 2
	})
	// While cut, each side changes its membership.
	joinAs(t, scopes[1], "room", 1)
	joinAs(t, scopes[2], "lobby", 1)

	pa.setCut(false)
	pb.setCut(false)
	pd.setCut(false)
	waitEvent(t, sub, NodeUp, "c", 20*time.Second)
	waitConverged(t, scopes, "room", 4)
	waitConverged(t, scopes, "lobby", 1)
}

func unusedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	gotptest.Must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A false timeout on one side (b stops hearing a while a hears b) acts as
// a torn-down connection: a is told, its monitors of b's processes fire,
// both come back up, and pg views converge again.
func TestOneSidedTimeoutIsSymmetric(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	scopes := replicatedScopes(t, ms, "s")
	joinAs(t, scopes[0], "g", 2)
	joinAs(t, scopes[1], "g", 1)
	waitConverged(t, scopes, "g", 3)

	targetSink := gotptest.NewSink(t, b.n)

	target := targetSink.PID()
	watcherSink := gotptest.NewSink(t, a.n)
	wch := watcherSink.C()
	monitorFrom(t, watcherSink, target)
	syncPair(t, a, b)
	subA, _ := a.c.Subscribe()
	defer subA.Close()

	pa := b.c.peers()["a"]
	b.c.timeOut(pa) // what b's checker does on a timeout

	waitEvent(t, subA, NodeDown, "b", 5*time.Second)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoConnection {
		t.Fatalf("a's monitor of b's process: %v", d.Reason)
	}
	waitEvent(t, subA, NodeUp, "b", 5*time.Second)
	waitMesh(t, ms)
	joinAs(t, scopes[1], "g", 1)
	waitConverged(t, scopes, "g", 4)
}

func TestLeave(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	targetSink := gotptest.NewSink(t, a.n)
	target := targetSink.PID()
	watcherSink := gotptest.NewSink(t, b.n)
	wch := watcherSink.C()
	monitorFrom(t, watcherSink, target)
	subA, _ := a.c.Subscribe()
	defer subA.Close()
	subB, _ := b.c.Subscribe()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gotptest.Must(t, b.c.Leave(ctx))
	gotptest.Must(t, b.c.Leave(ctx)) // idempotent
	waitEvent(t, subA, NodeDown, "b", 5*time.Second)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoConnection {
		t.Fatalf("b's monitor after Leave: %v", d.Reason)
	}
	for range subB.C() { // closed by Leave
	}
	if len(b.c.Nodes()) != 0 || len(a.c.Nodes()) != 0 {
		t.Fatalf("nodes after Leave: %v / %v", a.c.Nodes(), b.c.Nodes())
	}
	// b runs on alone; a monitor of a's process answers noconnection.
	monitorFrom(t, watcherSink, target)
	if d := gotptest.RecvWithin(t, 5*time.Second, wch).(gotp.Down); d.Reason != gotp.ErrNoConnection {
		t.Fatalf("monitor after Leave: %v", d.Reason)
	}
	if err := b.c.Send(target, "x"); !errors.Is(err, gotp.ErrNoConnection) {
		t.Fatalf("send after Leave: %v", err)
	}
	if err := b.c.Replicate(nil); err != ErrClosed {
		t.Fatalf("Replicate after Leave: %v", err)
	}
}

// Nodes as clients of an existing NATS deployment (here a standalone
// server the test starts) instead of embedding servers.
func TestClientsOfExistingDeployment(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
	gotptest.Must(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() }) // runs after the nodes stop
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	var ms []member
	for _, name := range []string{"a", "b", "c"} {
		o := fastOpts(t)
		o.URLs = []string{srv.ClientURL()}
		ms = append(ms, startNode(t, name, o))
	}
	waitMesh(t, ms)
	if ms[0].c.RouteURL() != "" {
		t.Fatal("a client node reports a route URL")
	}
	pidSink := gotptest.NewSink(t, ms[2].n)
	pid, ch := pidSink.PID(), pidSink.C()
	gotptest.Must(t, ms[0].c.Send(pid, Ping{N: 1}))
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != (Ping{N: 1}) {
		t.Fatalf("got %#v", got)
	}
}

// Garbage and unregistered types published straight to a node's subject
// are counted and dropped; the node goes on.
func TestHostileInputDropped(t *testing.T) {
	ms := startClusterWith(t, func(o *Options) { o.NoDirect = true }, "a", "b")
	a, b := ms[0], ms[1]
	raw, err := nats.Connect(a.c.srv.ClientURL())
	gotptest.Must(t, err)
	defer raw.Close()
	subj := a.c.nodeSubject("a")

	// A batch from "b" (its real incarnation) carrying a value whose type
	// a never registered, then one carrying a frame that is cut short.
	other := NewCodec()
	gotptest.Must(t, Register[unregistered](other, "test.unregistered"))
	// b's batches to a carry a's id of their connection.
	hdr := binary.AppendUvarint(append([]byte(nil), b.c.header...), a.c.peers()["b"].conn)
	pidSink := gotptest.NewSink(t, a.n)
	pid, ch := pidSink.PID(), pidSink.C()
	frame := appendShortPID(appendShortPID([]byte{kSend}, gotp.PID{}), pid)
	frame, err = other.AppendValue(frame, unregistered{X: 1})
	gotptest.Must(t, err)
	batch := binary.AppendUvarint(append([]byte(nil), hdr...), uint64(len(frame)))
	batch = append(batch, frame...)
	before := a.c.Stats().DecodeErrors
	gotptest.Must(t, raw.Publish(subj, batch))
	gotptest.Must(t, raw.Publish(subj, append(append([]byte(nil), hdr...), 50, kSend, 1)))
	gotptest.Must(t, raw.Publish(subj, []byte("not a batch at all")))
	gotptest.Must(t, raw.Flush())
	gotptest.EventuallyWithin(t, 5*time.Second, "decode errors counted", func() bool { return a.c.Stats().DecodeErrors >= before+3 })
	// A batch of another connection (a stale one) is dropped unread.
	stale := binary.AppendUvarint(append([]byte(nil), b.c.header...), a.c.peers()["b"].conn+100)
	staleBefore := a.c.Stats().Stale
	gotptest.Must(t, raw.Publish(subj, append(binary.AppendUvarint(stale, uint64(len(frame))), frame...)))
	gotptest.Must(t, raw.Flush())
	gotptest.EventuallyWithin(t, 5*time.Second, "stale batch counted", func() bool { return a.c.Stats().Stale > staleBefore })
	// The node still works, and nothing reached the process.
	b.n.Send(pid, "still fine")
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "still fine" {
		t.Fatalf("got %#v", got)
	}
}

// Garbage, a wrong credential and a misdirected hello on the direct-link
// port are refused and counted; the node goes on.
func TestHostileLinksRefused(t *testing.T) {
	ms := startClusterWith(t, func(o *Options) { o.Token = "s3cret" }, "a", "b")
	a, b := ms[0], ms[1]
	addr := b.c.DirectAddrs()[0]
	before := b.c.Stats().LinkFailures
	try := func(payload []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		gotptest.Must(t, err)
		defer conn.Close()
		_, _ = conn.Write(payload)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, conn) // until b closes it
	}
	try([]byte("GET / HTTP/1.1\r\n\r\n"))
	try([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}) // a huge length
	// A hello from a node that does not hold the token: b answers its
	// ack, the intruder cannot confirm (and b refuses it loudly).
	o := fastOpts(t)
	o.Token = "guess"
	intruder := &Cluster{opts: o, name: "x", cr: 1, start: 1, key: linkKey(&o)}
	conn, err := net.Dial("tcp", addr)
	gotptest.Must(t, err)
	l := &link{c: intruder, conn: conn, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	err = intruder.initiate(l, &shake{inc: incarnation{"b", b.n.Creation()}}, 5*time.Second)
	conn.Close()
	if !errors.Is(err, errAuth) {
		t.Fatalf("handshake with a wrong token: %v", err)
	}
	gotptest.EventuallyWithin(t, 5*time.Second, "refused links counted", func() bool { return b.c.Stats().LinkFailures >= before+2 })
	// The real connection is untouched.
	pidSink := gotptest.NewSink(t, b.n)
	a.n.Send(pidSink.PID(), "still fine")
	if got := pidSink.NextWithin(t, 5*time.Second); got != "still fine" {
		t.Fatalf("got %#v", got)
	}
	if ns := b.c.Nodes(); len(ns) != 1 || !ns[0].Direct {
		t.Fatalf("b's nodes: %+v", ns)
	}
}
