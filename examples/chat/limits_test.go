//go:build unix

package chat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

// startServiceConfig is startService with cfg (its DataDir and addresses
// are filled in).
func startServiceConfig(t *testing.T, cfg Config) *testService {
	t.Helper()
	n := quietNode("chat")
	cfg.DataDir = t.TempDir()
	cfg.TCPAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	svc, err := Start(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testService{Service: svc, n: n, dir: cfg.DataDir}
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// smallReceiveBuffer makes a dialled socket's receive buffer small, so
// that a client that does not read stops the server's writes soon (the
// kernel would otherwise buffer megabytes for it on loopback).
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var err error
	c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	})
	return err
}

// dialSlow connects a TCP client with a small receive buffer.
func dialSlow(t *testing.T, ts *testService) *client {
	t.Helper()
	d := net.Dialer{Control: smallReceiveBuffer}
	c, err := d.Dial("tcp", ts.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, rd: bufio.NewReader(c)}
}

// connTracker remembers the connection processes of a service (through
// Config.onConn), for tests that look inside them.
type connTracker struct {
	mu    sync.Mutex
	conns map[gotp.PID]*conn
}

func (ct *connTracker) add(pid gotp.PID, c *conn) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.conns == nil {
		ct.conns = map[gotp.PID]*conn{}
	}
	ct.conns[pid] = c
}

// of returns the connection process of the user name.
func (ct *connTracker) of(t *testing.T, ts *testService, name string) (gotp.PID, *conn) {
	t.Helper()
	e, ok := ts.Users().Find(name)
	if !ok {
		t.Fatalf("%s is not online", name)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	c, ok := ct.conns[e.PID]
	if !ok {
		t.Fatalf("no connection state for %s", name)
	}
	return e.PID, c
}

// A client that reads nothing while another user sends it messages is
// disconnected with a last ERROR slow_consumer line and goes offline; the
// sender and everyone else carry on, and the sender's messages end in
// SENT until the recipient is gone, then in ERROR unknown_recipient.
//
// The client reads nothing until it is cut off, then reads what it was
// sent: it starts when the service says it has cut it off, not when the
// test has seen the end of its loop, because the service gives a client
// that reads nothing only lingerTimeout to take its last line.
func TestSlowConsumerIsDisconnected(t *testing.T) {
	const limit = 16 << 10
	cut, onSlow := cutSignal(t)
	// Flood control off: it would hold the sender of 4 KB messages to
	// six a second, and the test to seconds.
	ts := startServiceConfig(t, Config{MaxOutput: limit, CommandRate: -1, onSlow: onSlow})
	slow := dialSlow(t, ts)
	slow.expect("CONNECT slow", "OK")
	got := afterCut(cut, func() received {
		slow.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		data, err := io.ReadAll(slow.rd)
		return received{data, err}
	})
	bob := connect(t, ts, "bob")
	carol := connect(t, ts, "carol")
	dave := connect(t, ts, "dave")

	text := strings.Repeat("x", 4000)
	sent := 0
	for {
		if sent == 5000 {
			t.Fatal("5000 messages to a client that reads nothing did not disconnect it")
		}
		r := bob.do("SEND slow " + text)
		if r == "ERROR unknown_recipient" {
			break
		}
		if r != "SENT slow" {
			t.Fatalf("SEND to the slow client → %q", r)
		}
		sent++
		if sent%100 == 0 { // others keep working meanwhile
			carol.expect("SEND dave hi", "SENT dave")
			if got := dave.line(); got != "MSG carol hi" {
				t.Fatalf("dave got %q", got)
			}
		}
	}
	if _, ok := ts.Users().Find("slow"); ok {
		t.Fatal("the slow consumer is still online")
	}
	if n := ts.slowConsumers.Load(); n != 1 {
		t.Fatalf("%d slow consumers counted, want 1", n)
	}
	// The client finds whole lines, then its last line, then the end.
	r := <-got
	data, err := r.data, r.err
	if err != nil {
		t.Fatalf("reading what the slow client was sent: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "ERROR slow_consumer" {
		t.Fatalf("last line %.60q, want ERROR slow_consumer", last)
	}
	for _, l := range lines[:len(lines)-1] {
		if l != "MSG bob "+text {
			t.Fatalf("a line before the last is %.60q, not a whole MSG", l)
		}
	}
	if len(lines)-1 >= sent {
		t.Fatalf("all %d messages reached the slow client: it was not slow", sent)
	}
	carol.expect("SEND bob still here", "SENT bob")
	if got := bob.line(); got != "MSG carol still here" {
		t.Fatalf("bob got %q", got)
	}
}

// cutSignal returns a channel closed when the service cuts off a slow
// consumer, and the Config.onSlow that closes it; the test's end closes
// it too, so that nothing waits on it for ever.
func cutSignal(t *testing.T) (<-chan struct{}, func(string)) {
	cut := make(chan struct{})
	var once sync.Once
	onSlow := func(string) { once.Do(func() { close(cut) }) }
	t.Cleanup(func() { onSlow("") })
	return cut, onSlow
}

// afterCut runs read on a goroutine of its own once cut is closed, and
// returns the channel its result comes on.
func afterCut[T any](cut <-chan struct{}, read func() T) <-chan T {
	out := make(chan T, 1)
	go func() {
		<-cut
		out <- read()
	}()
	return out
}

// received is what a client read once it was cut off, and how its reading
// ended.
type received struct {
	data []byte
	err  error
}

// The same over the WebSocket: the last message is the error, and the
// close frame carries the reason.
func TestSlowConsumerIsDisconnectedWebSocket(t *testing.T) {
	const limit = 16 << 10
	cut, onSlow := cutSignal(t)
	// Flood control off: it would hold the sender of 4 KB messages to
	// six a second, and the test to seconds.
	ts := startServiceConfig(t, Config{MaxOutput: limit, CommandRate: -1, onSlow: onSlow})
	tr := &http.Transport{DialContext: (&net.Dialer{Control: smallReceiveBuffer}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+ts.HTTPAddr().String()+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	slow := &wsClient{t: t, c: ws}
	slow.expectType(map[string]string{"cmd": "connect", "name": "slow"}, "ok")
	type wsReceived struct {
		last wsReply
		n    int // messages read
		err  error
	}
	got := afterCut(cut, func() (r wsReceived) {
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				r.err = err
				return r
			}
			if typ != websocket.MessageText {
				r.err = fmt.Errorf("a %v message", typ)
				return r
			}
			r.last = wsReply{}
			if err := json.Unmarshal(data, &r.last); err != nil {
				r.err = fmt.Errorf("message %.60q: %v", data, err)
				return r
			}
			r.n++
		}
	})
	bob := connect(t, ts, "bob")
	text := strings.Repeat("y", 4000)
	sent := 0
	for {
		if sent == 5000 {
			t.Fatal("5000 messages to a client that reads nothing did not disconnect it")
		}
		r := bob.do("SEND slow " + text)
		if r == "ERROR unknown_recipient" {
			break
		}
		if r != "SENT slow" {
			t.Fatalf("SEND → %q", r)
		}
		sent++
	}
	r := <-got
	var ce websocket.CloseError
	if !errors.As(r.err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "slow_consumer" {
		t.Fatalf("the WebSocket ended with %v, want a close with reason slow_consumer", r.err)
	}
	last := r.last
	if last.Type != "error" || last.Reason != SlowConsumer {
		t.Fatalf("last message %+v, want the error slow_consumer", last)
	}
	if r.n-1 >= sent {
		t.Fatalf("all %d messages reached the slow client", sent)
	}
}

// A client that pipelines commands and reads nothing is held back: the
// server's connection holds at most MaxPending commands and about half its
// output limit of replies (plus the one reply that crossed it), however
// many commands the client writes, and once the client reads, every
// command has its reply. The replies are HISTORY replies of about 240 KB,
// so that the kernel's buffers cannot take them all.
func TestPipeliningClientIsHeldBack(t *testing.T) {
	const limit = 64 << 10
	var conns connTracker
	// Flood control off (it would hold this client to 25.6 KB/s of
	// replies): the bound under test is the one that holds without it.
	ts := startServiceConfig(t, Config{MaxOutput: limit, CommandRate: -1, onConn: conns.add})
	cl := dialSlow(t, ts)
	cl.expect("CONNECT pipe", "OK")
	other := connect(t, ts, "other")
	big := strings.Repeat("h", 60<<10)
	for range 4 {
		cl.expect("SEND other "+big, "SENT other")
		other.line()
	}
	reply := len("HISTORY 4\n") + 4*len("pipe "+big+"\n")
	pid, c := conns.of(t, ts, "pipe")

	const commands = 100 // 24 MB of replies
	wrote := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(cl.c)
		for range commands {
			w.WriteString("HISTORY other\n")
		}
		wrote <- w.Flush()
	}()
	check := func() (held bool) {
		pending := len(c.slots)
		replies, events := c.out.queued()
		mbox, _ := ts.n.MailboxLen(pid)
		if pending > MaxPending || replies > limit/2+reply || events != 0 || mbox > MaxPending+2 {
			t.Fatalf("connection holds %d commands, %d bytes of replies, %d of events, mailbox %d; want ≤ %d, ≤ %d, 0, ≤ %d",
				pending, replies, events, mbox, MaxPending, limit/2+reply, MaxPending+2)
		}
		return pending == MaxPending && replies >= limit/2
	}
	eventually(t, "the connection to hold back a client that does not read", check)
	for range 200 { // and it stays bounded while the client keeps pushing
		check()
	}
	// Now read everything: one whole HISTORY per command.
	cl.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for i := range commands {
		if l, err := cl.rd.ReadString('\n'); err != nil || l != "HISTORY 4\n" {
			t.Fatalf("reply %d: %.40q, %v", i, l, err)
		}
		for range 4 {
			if l, err := cl.rd.ReadString('\n'); err != nil || l != "pipe "+big+"\n" {
				t.Fatalf("reply %d: a history line %.40q, %v", i, l, err)
			}
		}
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the client's writes: %v", err)
	}
}

// A line that starts and does not end within the read timeout is cut off
// with ERROR read_timeout, even if its bytes trickle in; a connection
// with no partial line is not.
func TestPartialLineHitsReadDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ts := startServiceConfig(t, Config{ReadTimeout: timeout})
	idle := connect(t, ts, "idle")
	c := connect(t, ts, "drip")
	c.c.Write([]byte("SEND idle "))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // a byte every timeout/4: the deadline runs from the first
		tk := time.NewTicker(timeout / 4)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := c.c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	})
	if got := c.line(); got != "ERROR read_timeout" {
		t.Fatalf("a trickled partial line → %q, want ERROR read_timeout", got)
	}
	close(stop)
	wg.Wait()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(c.rd); err != nil || len(rest) != 0 {
		t.Fatalf("after the error: %q, %v; want the end of the connection", rest, err)
	}
	// Time is the subject here: an idle connection outlives the read
	// timeout several times over.
	time.Sleep(3 * timeout)
	idle.expect("WHO", "ONLINE 1 idle")
}

// With an idle timeout, a silent connection is closed with ERROR
// idle_timeout; one that keeps talking is not.
func TestIdleTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	ts := startServiceConfig(t, Config{IdleTimeout: idle})
	quiet := connect(t, ts, "quiet")
	busy := connect(t, ts, "busy")
	deadline := time.Now().Add(3 * idle)
	for time.Now().Before(deadline) {
		if got := busy.do("WHO"); !strings.HasPrefix(got, "ONLINE ") {
			t.Fatalf("WHO → %q", got)
		}
		time.Sleep(idle / 4)
	}
	if got := quiet.line(); got != "ERROR idle_timeout" {
		t.Fatalf("a silent connection → %q, want ERROR idle_timeout", got)
	}
	busy.expect("WHO", "ONLINE 1 busy")
}

// wsHandshake opens a raw TCP connection to /ws and upgrades it, for
// tests that write WebSocket frames by hand.
func wsHandshake(t *testing.T, ts *testService) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", ts.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	key := make([]byte, 16)
	rand.Read(key)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		ts.HTTPAddr(), base64.StdEncoding.EncodeToString(key))
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return c, rd
}

// wsFrame is a masked client frame with the given opcode and payload.
func wsFrame(op byte, payload []byte) []byte {
	b := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	default:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	}
	mask := []byte{1, 2, 3, 4}
	b = append(b, mask...)
	for i, x := range payload {
		b = append(b, x^mask[i%4])
	}
	return b
}

// readServerFrames reads unmasked frames until the connection ends and
// returns the text payloads and the close frame's reason.
func readServerFrames(t *testing.T, rd *bufio.Reader) (texts []string, closeReason string) {
	t.Helper()
	for {
		var h [2]byte
		if _, err := io.ReadFull(rd, h[:]); err != nil {
			return texts, closeReason
		}
		n := int(h[1] & 0x7f)
		switch n {
		case 126:
			var l [2]byte
			io.ReadFull(rd, l[:])
			n = int(binary.BigEndian.Uint16(l[:]))
		case 127:
			var l [8]byte
			io.ReadFull(rd, l[:])
			n = int(binary.BigEndian.Uint64(l[:]))
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(rd, p); err != nil {
			return texts, closeReason
		}
		switch h[0] & 0x0f {
		case 1:
			texts = append(texts, string(p))
		case 8:
			if len(p) >= 2 {
				closeReason = string(p[2:])
			}
		}
	}
}

// A WebSocket frame that declares 8 GB and never delivers them, and a
// frame header cut short, both hit the read deadline: the client is told
// read_timeout and the connection is closed with that reason. A connection
// that only pings stays.
func TestPartialFrameHitsReadDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ts := startServiceConfig(t, Config{ReadTimeout: timeout})
	for i, tc := range []struct {
		name  string
		frame []byte
	}{
		{"8 GB declared", append([]byte{0x81, 0x80 | 127, 0, 0, 0, 2, 0, 0, 0, 0}, 1, 2, 3, 4)},
		{"header cut short", []byte{0x81}},
		{"half a message", wsFrame(1, []byte(`{"cmd":"who"}`))[:9]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rd := wsHandshake(t, ts)
			c.Write(wsFrame(1, fmt.Appendf(nil, `{"cmd":"connect","name":"x%d"}`, i)))
			c.Write(wsFrame(9, []byte("ping"))) // control frames are not a message
			c.Write(tc.frame)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			texts, reason := readServerFrames(t, rd)
			if len(texts) != 2 || !strings.Contains(texts[0], `"ok"`) || !strings.Contains(texts[1], `"read_timeout"`) {
				t.Fatalf("server sent %q, want ok then the error read_timeout", texts)
			}
			if reason != "read_timeout" {
				t.Fatalf("close reason %q, want read_timeout", reason)
			}
		})
	}
	// Pings and pongs alone are no message: no read timeout.
	c, rd := wsHandshake(t, ts)
	c.Write(wsFrame(1, []byte(`{"cmd":"connect","name":"pinger"}`)))
	for range 4 {
		c.Write(wsFrame(9, []byte("p")))
		time.Sleep(timeout / 2) // time is the subject
	}
	c.Write(wsFrame(1, []byte(`{"cmd":"who"}`)))
	c.Write(wsFrame(1, []byte(`{"cmd":"quit"}`)))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	texts, reason := readServerFrames(t, rd)
	if len(texts) != 3 || !strings.Contains(texts[1], `"online"`) || reason != "bye" {
		t.Fatalf("a pinging connection got %q and close %q, want ok, online, bye", texts, reason)
	}
}

// Beyond MaxConnections a TCP client is told ERROR unavailable, and a
// WebSocket upgrade gets 503; once a client leaves, there is room again.
func TestMaxConnections(t *testing.T) {
	ts := startServiceConfig(t, Config{MaxConnections: 2})
	a := connect(t, ts, "a")
	b := connect(t, ts, "b")
	c := dial(t, ts)
	if got := c.line(); got != "ERROR unavailable" {
		t.Fatalf("a third connection → %q, want ERROR unavailable", got)
	}
	resp, err := http.Get("http://" + ts.HTTPAddr().String() + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a WebSocket beyond the limit: status %d, want 503", resp.StatusCode)
	}
	a.expect("QUIT", "BYE")
	eventually(t, "the count to drop", func() bool { return ts.conns.Load() == 1 })
	connect(t, ts, "d").expect("WHO", "ONLINE 2 b d")
	_ = b
}

// Messages sent while a commit is in flight are committed together in the
// next transaction, every send ends in SENT, and the history written this
// way is all there after a restart of the whole service.
//
// The first transaction is held (Config.onCommit) until it carries two
// appends or at least two wait in the owner's mailbox behind it (those
// must then go in one transaction), so the group commit does not hang on
// the scheduler.
func TestGroupCommitHistorySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	var first sync.Once
	var firstBatch atomic.Int64
	n := quietNode("chat")
	svc, err := Start(context.Background(), n, Config{DataDir: dir, TCPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		onCommit: func(k int) { first.Do(func() { firstBatch.Store(int64(k)); <-release }) }})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testService{Service: svc, n: n, dir: dir}
	t.Cleanup(func() { ts.stop(t) })
	released := false
	t.Cleanup(func() { // runs first: a held commit would keep Stop waiting
		if !released {
			close(release)
		}
	})
	const users, each = 12, 25
	clients := make([]*client, users)
	for i := range clients {
		clients[i] = connect(t, ts, fmt.Sprintf("u%d", i))
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		to := fmt.Sprintf("u%d", (i+1)%users)
		wg.Go(func() {
			// Pipelined: MaxPending commands in flight per user.
			var b bytes.Buffer
			for k := range each {
				fmt.Fprintf(&b, "SEND %s m%d\n", to, k)
			}
			c.c.Write(b.Bytes())
		})
	}
	wg.Wait()
	owner, ok := n.Whereis(historyName)
	if !ok {
		t.Fatal("no history owner")
	}
	gotptest.Eventually(t, "two appends waiting behind the held commit", func() bool {
		l, _ := n.MailboxLen(owner)
		return l >= 2 || firstBatch.Load() >= 2
	})
	close(release)
	released = true
	for i, c := range clients {
		sent, msgs := 0, 0
		for sent < each || msgs < each {
			switch l := c.line(); {
			case l == fmt.Sprintf("SENT u%d", (i+1)%users):
				sent++
			case strings.HasPrefix(l, "MSG "):
				msgs++
			default:
				t.Fatalf("u%d got %q", i, l)
			}
		}
	}
	commits, committed := ts.commits.Load(), ts.committed.Load()
	if committed != users*each {
		t.Fatalf("%d messages committed, want %d", committed, users*each)
	}
	if commits >= committed {
		t.Fatalf("%d transactions for %d messages: no group commit", commits, committed)
	}
	ts.stop(t)

	ts2 := startService(t, dir)
	c := connect(t, ts2, "u0")
	c.send("HISTORY u1")
	if got := c.line(); got != fmt.Sprintf("HISTORY %d", each) {
		t.Fatalf("history header %q", got)
	}
	for k := range each {
		if got := c.line(); got != fmt.Sprintf("u0 m%d", k) {
			t.Fatalf("history line %d: %q", k, got)
		}
	}
}

// HISTORY carries the most recent messages that fit in HistoryMaxBytes,
// oldest first.
func TestHistoryBoundedInBytes(t *testing.T) {
	// Flood control off: 360 KiB of messages would cost the sender 14 s.
	ts := startServiceConfig(t, Config{CommandRate: -1})
	a := connect(t, ts, "a")
	b := connect(t, ts, "b")
	big := strings.Repeat("z", 60<<10)
	const n = 6 // 360 KiB: more than HistoryMaxBytes
	for k := range n {
		a.expect(fmt.Sprintf("SEND b %d%s", k, big), "SENT b")
		b.line()
	}
	a.send("HISTORY b")
	want := HistoryMaxBytes / (len(big) + 1)
	if got := a.line(); got != fmt.Sprintf("HISTORY %d", want) {
		t.Fatalf("header %q, want HISTORY %d", got, want)
	}
	for k := n - want; k < n; k++ {
		if got := a.line(); got != fmt.Sprintf("a %d%s", k, big) {
			t.Fatalf("line for message %d: %.40q", k, got)
		}
	}
}

// Every SEND ends in SENT or ERROR unavailable when the history owner is
// killed (no Terminate) while groups of messages are waiting for their
// transaction, and SENT still means on disk: after the restart of the
// whole service every message that got its SENT is in the history, in
// order.
func TestEverySendEndsWhenHistoryOwnerKilled(t *testing.T) {
	dir := t.TempDir()
	ts := startService(t, dir)
	const users, each = 8, 200
	clients := make([]*client, users)
	for i := range clients {
		clients[i] = connect(t, ts, fmt.Sprintf("k%d", i))
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		to := fmt.Sprintf("k%d", (i+1)%users)
		wg.Go(func() {
			var b bytes.Buffer
			for k := range each {
				fmt.Fprintf(&b, "SEND %s m%d\n", to, k)
			}
			c.c.Write(b.Bytes())
		})
	}
	// replies reads client i's lines until it has n replies to its SENDs,
	// noting which of its messages were acknowledged.
	acked := make([][]int, users)
	got := make([]int, users)
	errs := 0
	replies := func(i, n int) {
		want := fmt.Sprintf("SENT k%d", (i+1)%users)
		for got[i] < n {
			switch l := clients[i].line(); {
			case l == want:
				acked[i] = append(acked[i], got[i])
				got[i]++
			case l == "ERROR unavailable":
				got[i]++
				errs++
			case strings.HasPrefix(l, "MSG "):
			default:
				t.Fatalf("k%d got %q", i, l)
			}
		}
	}
	replies(0, each/8) // then kill the owner while the others' sends wait
	old, _ := ts.n.Whereis(historyName)
	ts.n.Exit(old, gotp.ErrKill)
	for i := range clients {
		replies(i, each)
	}
	wg.Wait()
	if pid, ok := ts.n.Whereis(historyName); !ok || pid == old {
		t.Fatal("the history owner was not restarted")
	}
	t.Logf("%d SENT, %d ERROR unavailable", users*each-errs, errs)
	ts.stop(t)

	ts2 := startService(t, dir)
	for i := range clients {
		from := fmt.Sprintf("k%d", i)
		c := connect(t, ts2, from)
		c.send(fmt.Sprintf("HISTORY k%d", (i+1)%users))
		var n int
		if _, err := fmt.Sscanf(c.line(), "HISTORY %d", &n); err != nil {
			t.Fatal(err)
		}
		var kept []int
		for range n {
			var k int
			if _, err := fmt.Sscanf(c.line(), from+" m%d", &k); err != nil {
				t.Fatalf("a history line of %s: %v", from, err)
			}
			kept = append(kept, k)
		}
		if !slices.IsSorted(kept) {
			t.Fatalf("%s's history is out of order: %v", from, kept)
		}
		for _, k := range acked[i] {
			if _, found := slices.BinarySearch(kept, k); !found {
				t.Fatalf("%s's message m%d got SENT and is not in the history after the restart", from, k)
			}
		}
		c.expect("QUIT", "BYE")
	}
}
