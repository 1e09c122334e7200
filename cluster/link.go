package cluster

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Direct links. A node listens for direct links (Options.DirectListen)
// and advertises where in its heartbeats; the initiator of a pair dials
// the other and both prove they hold the cluster's credentials:
//
//	initiator → hello  = magic(0x67) 1 version str(cluster) str(name) uvarint(creation) uvarint(start) str(target) uvarint(target creation) nonce(16)
//	responder → ack    = magic 2 str(name) uvarint(creation) uvarint(start) nonce(16) mac(32)
//	initiator → confirm = magic 3 mac(32)
//	responder → accept = magic 4
//
// each as uvarint(len) body, the macs being HMAC-SHA256 under a key
// derived from the credentials (Token, User/Password or NKeySeed) of the
// transcript so far. With Options.TLS the link is TLS first. Then frames
// flow both ways, each uvarint(len) body, as in a NATS batch. A link that
// closes is a lost connection: the peer is down at once.

const (
	lkHello   = 1
	lkAck     = 2
	lkConfirm = 3
	lkAccept  = 4
	nonceLen  = 16
	macLen    = sha256.Size
)

// errAuth is the reason of a direct link refused for its credentials.
var errAuth = errors.New("cluster: direct link: authentication failed")

// linkKey derives the key that authenticates direct links from the
// credentials all nodes share.
func linkKey(o *Options) []byte {
	h := sha256.New()
	h.Write([]byte("gotp direct link\x00"))
	h.Write([]byte(o.Cluster))
	h.Write([]byte{0})
	switch {
	case o.User != "":
		h.Write([]byte("user\x00" + o.User + "\x00" + o.Password))
	case o.Token != "":
		h.Write([]byte("token\x00" + o.Token))
	case o.NKeySeed != "":
		h.Write([]byte("nkey\x00" + o.NKeySeed))
	}
	return h.Sum(nil)
}

// listen opens the direct-link listener and works out the addresses to
// advertise.
func (c *Cluster) listen() error {
	addr := c.opts.DirectListen
	if addr == "" {
		host := "127.0.0.1"
		if len(c.opts.URLs) == 0 {
			if h, _, err := net.SplitHostPort(c.opts.RouteListen); err == nil {
				host = h
			}
		}
		addr = net.JoinHostPort(host, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cluster: direct links: %w", err)
	}
	c.ln = ln
	if c.opts.DirectAdvertise != "" {
		c.addrs = []string{c.opts.DirectAdvertise}
		return nil
	}
	ta := ln.Addr().(*net.TCPAddr)
	if !ta.IP.IsUnspecified() {
		c.addrs = []string{ta.String()}
		return nil
	}
	// Listening on every interface: advertise each address, loopback
	// last (a node on the same host reaches it; others fail fast and try
	// the next).
	port := strconv.Itoa(ta.Port)
	ifaddrs, _ := net.InterfaceAddrs()
	var loop []string
	for _, a := range ifaddrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		s := net.JoinHostPort(ipn.IP.String(), port)
		if ipn.IP.IsLoopback() {
			loop = append(loop, s)
		} else {
			c.addrs = append(c.addrs, s)
		}
	}
	c.addrs = append(c.addrs, loop...)
	if len(c.addrs) > maxAddrs {
		c.addrs = c.addrs[:maxAddrs]
	}
	return nil
}

func (c *Cluster) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return // closed by Leave
		}
		c.wg.Add(1)
		go c.serveLink(conn)
	}
}

// A link is a direct connection to another node.
type link struct {
	c    *Cluster
	conn net.Conn
	br   *bufio.Reader
	p    *peer         // set by establish
	wake chan struct{} // the writer has frames to write

	// Who reads the socket (see rsReader): rstate and the fields after
	// it are guarded by rmu; br is used by the reader of the moment.
	rmu    sync.Mutex
	rstate uint8
	intr   bool            // the reading caller's read was interrupted (a deadline in the past)
	hdl    int64           // the reading caller's deadline (UnixNano), 0 for none
	hctx   context.Context // the reading caller's context
	rerr   error           // why a caller's read failed, for the link's goroutine
	rback  chan struct{}   // the socket is handed back to the link's goroutine
	rtimer *time.Timer     // the link's goroutine's, in lend
	quit   chan struct{}   // closed by close
	once   sync.Once

	// A call run on the link's goroutine (see runCall). pend is the call
	// readFrame left for it (the link's reader's only). The rest is
	// guarded by rmu: inl numbers the call running (0: none) and inlSeq
	// the last one started (a goroutine running call seq whose l.inl is
	// no longer seq was replaced as the link's reader); at each tick of
	// the rescue timer (armed while ticking) inlSeen is the call that was
	// running at the last tick and inlLast the inlSeq then.
	pend                          pendingReq
	inl, inlSeq, inlSeen, inlLast uint64
	ticking                       bool
	rescueT                       *time.Timer
	rp                            *peer

	// A write on the sender's goroutine (see kick): raw is the TCP
	// socket (nil for TLS), wf the write function handed to it, wdata, wn
	// and werr its argument and results. Only the holder of p.writing
	// uses them.
	raw   syscall.RawConn
	wf    func(fd uintptr) bool
	wdata []byte
	wn    int
	werr  error
}

// reader returns what the link reads from: the TCP socket with raw
// system calls (see rawMax), or with Options.BusyPoll a reader that keeps
// trying it for that long before it waits for it, or for TLS the
// connection.
func (l *link) reader() io.Reader {
	switch {
	case l.raw == nil:
		return l.conn
	case l.c.opts.BusyPoll <= 0:
		return newRawReader(l)
	}
	return &busyReader{l: l, spin: l.c.opts.BusyPoll}
}

// busyReader reads the link's socket, trying it again (yielding the
// processor between tries) for up to spin before it waits for it through
// the runtime's poller: a reply that comes within spin is read without a
// wake-up of a sleeping thread. It costs the CPU it spins.
type busyReader struct {
	l    *link
	spin time.Duration
	buf  []byte
	n    int
	err  error
	f    func(fd uintptr) bool
	dead int64 // UnixNano after which this Read stops trying
}

// spinPreempted is how long one try of a busy-polling reader may take
// before it counts as preempted: the operating system ran something else
// on the CPU it was spinning on. Preempted spinPreemptions times within
// spinWindow, spinning takes CPU that work needs: the node's links stop
// spinning for busyPollOff.
const (
	spinPreempted   = 200 * time.Microsecond
	spinPreemptions = 3
	spinWindow      = 50 * time.Millisecond
	busyPollOff     = time.Second
)

// preempted records a preemption of a spinning reader at now, and turns
// spinning off when they come too often.
func (c *Cluster) preempted(now int64) {
	c.spinMu.Lock()
	defer c.spinMu.Unlock()
	if now-c.spinFirst > int64(spinWindow) {
		c.spinFirst, c.spinCount = now, 0
	}
	c.spinCount++
	if c.spinCount >= spinPreemptions {
		c.spinOff.Store(now + int64(busyPollOff))
		c.spinFirst, c.spinCount = now, 0
	}
}

func (r *busyReader) Read(b []byte) (int, error) {
	c := r.l.c
	if r.f == nil {
		r.f = func(fd uintptr) bool {
			last := time.Now().UnixNano()
			for {
				r.n, r.err = syscall.Read(int(fd), r.buf)
				if r.err != syscall.EAGAIN {
					return true
				}
				now := time.Now().UnixNano()
				if now-last > int64(spinPreempted) {
					c.preempted(now) // the CPUs may be busy
					return false
				}
				if now > r.dead {
					return false // wait for the socket
				}
				last = now
				runtime.Gosched()
			}
		}
	}
	r.buf, r.dead = b, time.Now().Add(r.spin).UnixNano()
	if r.dead < c.spinOff.Load() {
		r.dead = 0 // one try, then wait
	}
	return readSocket(r.l.raw, r.f, &r.n, &r.err)
}

// inlineGap is how long a link must have been idle for a sender to write
// to it itself. A sender that writes more often hands its frames to the
// link's writer, which writes everything queued meanwhile in one system
// call: a busy sender pays one write per batch, an occasional one (a
// call, its reply) no goroutine switch.
const inlineGap = 20 * time.Microsecond

func (c *Cluster) newLink(conn net.Conn) (*link, bool) {
	l := &link{c: c, conn: conn, wake: make(chan struct{}, 1), quit: make(chan struct{}), rback: make(chan struct{}, 1)}
	if tc, ok := conn.(*net.TCPConn); ok {
		if raw, err := tc.SyscallConn(); err == nil {
			l.raw = raw
			l.wf = func(fd uintptr) bool {
				l.wn, l.werr = rawWrite(fd, l.wdata)
				return true // one attempt: never wait for the socket
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		conn.Close()
		return nil, false
	}
	c.links[l] = struct{}{}
	return l, true
}

// close closes the link; its reader then ends and reports the peer down.
func (l *link) close() {
	l.once.Do(func() {
		close(l.quit)
		l.conn.Close()
		l.c.mu.Lock()
		delete(l.c.links, l)
		l.c.mu.Unlock()
	})
}

func (c *Cluster) handshakeTimeout() time.Duration {
	return min(c.opts.HeartbeatTimeout, 5*time.Second)
}

// serveLink runs a link another node dialled: the responder's handshake,
// then the link itself.
func (c *Cluster) serveLink(conn net.Conn) {
	replaced := false // as in dial
	defer func() {
		if !replaced {
			c.wg.Done()
		}
	}()
	if c.opts.TLS != nil {
		conn = tls.Server(conn, c.opts.TLS)
	}
	l, ok := c.newLink(conn)
	if !ok {
		return
	}
	s, err := c.respond(l)
	if err != nil {
		c.stats.linkFailures.Add(1)
		if errors.Is(err, errAuth) {
			c.auth.refuse(&AuthError{Peer: conn.RemoteAddr().String(), Inbound: true, Err: err})
		} else {
			c.log.Debug("cluster: direct link refused", "remote", conn.RemoteAddr().String(), "err", err)
		}
		l.close()
		return
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		l.close()
		return
	}
	c.shakes[s.inc.name] = s
	c.mu.Unlock()
	p := c.establish(s, 0, l)
	if p == nil {
		l.close()
		return
	}
	if err := l.writeMsg([]byte{wireMagic, lkAccept}); err != nil {
		c.nodeDown(p, false)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	replaced = l.run(p)
}

// respond runs the responder's side of the handshake.
func (c *Cluster) respond(l *link) (*shake, error) {
	_ = l.conn.SetDeadline(time.Now().Add(c.handshakeTimeout()))
	l.br = bufio.NewReaderSize(l.reader(), 64<<10)
	hello, err := l.readMsg(1024)
	if err != nil {
		return nil, err
	}
	hello = slices.Clone(hello) // the transcript outlives the read buffer
	d := &reader{b: hello}
	if d.byte1() != wireMagic || d.byte1() != lkHello || d.byte1() != wireVersion {
		return nil, errors.New("not a gotp link of this version")
	}
	cluster := d.str()
	var inc incarnation
	inc.name = d.str()
	inc.creation = d.u32()
	start := int64(d.uvarint())
	target := d.str()
	targetCr := d.u32()
	if len(d.b) != nonceLen || d.err != nil {
		return nil, errors.New("bad hello")
	}
	if cluster != c.opts.Cluster || target != c.name || targetCr != c.cr || inc.name == c.name || inc.name == "" || inc.creation == 0 {
		return nil, fmt.Errorf("hello from %s meant for %s/%d of cluster %q", inc.name, target, targetCr, cluster)
	}
	c.mu.Lock()
	_, gone := c.left[inc]
	cur := c.peers()[inc.name]
	c.mu.Unlock()
	if gone || cur != nil && cur.start > start {
		return nil, fmt.Errorf("hello from an incarnation of %s that is gone", inc.name)
	}
	ack := []byte{wireMagic, lkAck}
	ack = appendStr(ack, c.name)
	ack = binary.AppendUvarint(ack, uint64(c.cr))
	ack = binary.AppendUvarint(ack, uint64(c.start))
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:])
	ack = append(ack, nonce[:]...)
	ack = append(ack, linkMAC(c.key, "ack", hello, ack)...)
	if err := l.writeMsg(ack); err != nil {
		return nil, err
	}
	confirm, err := l.readMsg(64)
	if err != nil {
		return nil, err
	}
	if len(confirm) != 2+macLen || confirm[0] != wireMagic || confirm[1] != lkConfirm {
		return nil, errors.New("bad confirm")
	}
	if !hmac.Equal(confirm[2:], linkMAC(c.key, "confirm", hello, ack)) {
		return nil, errAuth
	}
	c.mu.Lock()
	conn := c.newConnLocked()
	c.mu.Unlock()
	return &shake{inc: inc, start: start, conn: conn, expires: time.Now().Add(c.handshakeTimeout())}, nil
}

func linkMAC(key []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	for _, p := range parts {
		var n [binary.MaxVarintLen64]byte
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		m.Write(p)
	}
	return m.Sum(nil)
}

// dial tries the addresses of s's node in turn for a direct link, and
// falls back to a connection over NATS if none works.
func (c *Cluster) dial(s *shake, addrs []string) {
	replaced := false // the link's reading went to another goroutine, with this one's count in c.wg
	defer func() {
		if !replaced {
			c.wg.Done()
		}
	}()
	defer func() {
		c.mu.Lock()
		s.dialing = false
		c.mu.Unlock()
	}()
	ctx := c.ctx
	for _, a := range addrs {
		p, err := c.dialOne(ctx, s, a)
		if err == nil {
			if p != nil {
				replaced = p.link.run(p)
			}
			return
		}
		c.stats.linkFailures.Add(1)
		if errors.Is(err, errAuth) {
			c.auth.refuse(&AuthError{Peer: a, Err: err})
		} else {
			c.log.Debug("cluster: no direct link", "peer", s.inc.name, "addr", a, "err", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
	c.mu.Lock()
	c.noLink[s.inc] = time.Now()
	c.mu.Unlock()
	c.askOverNATS(s)
}

// dialOne makes a direct link to s's node at addr. It returns a nil peer
// and no error when s is no longer wanted.
func (c *Cluster) dialOne(ctx context.Context, s *shake, addr string) (*peer, error) {
	to := c.handshakeTimeout()
	dctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if c.opts.TLS != nil {
		cfg := c.opts.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn = tls.Client(conn, cfg)
	}
	l, ok := c.newLink(conn)
	if !ok {
		return nil, nil
	}
	if err := c.initiate(l, s, to); err != nil {
		l.close()
		return nil, err
	}
	p := c.establish(s, 0, l)
	if p == nil {
		l.close()
		return nil, nil
	}
	_ = conn.SetDeadline(time.Time{})
	return p, nil
}

// initiate runs the initiator's side of the handshake.
func (c *Cluster) initiate(l *link, s *shake, timeout time.Duration) error {
	_ = l.conn.SetDeadline(time.Now().Add(timeout))
	l.br = bufio.NewReaderSize(l.reader(), 64<<10)
	hello := []byte{wireMagic, lkHello, wireVersion}
	hello = appendStr(hello, c.opts.Cluster)
	hello = appendStr(hello, c.name)
	hello = binary.AppendUvarint(hello, uint64(c.cr))
	hello = binary.AppendUvarint(hello, uint64(c.start))
	hello = appendStr(hello, s.inc.name)
	hello = binary.AppendUvarint(hello, uint64(s.inc.creation))
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:])
	hello = append(hello, nonce[:]...)
	if err := l.writeMsg(hello); err != nil {
		return err
	}
	ack, err := l.readMsg(1024)
	if err != nil {
		return err
	}
	if len(ack) < 2+macLen || ack[0] != wireMagic || ack[1] != lkAck {
		return errors.New("bad ack")
	}
	body, mac := ack[:len(ack)-macLen], ack[len(ack)-macLen:]
	d := &reader{b: body[2:]}
	name := d.str()
	cr := d.u32()
	_ = d.uvarint()
	if d.err != nil || len(d.b) != nonceLen || name != s.inc.name || cr != s.inc.creation {
		return fmt.Errorf("ack from %s/%d, not %s/%d", name, cr, s.inc.name, s.inc.creation)
	}
	if !hmac.Equal(mac, linkMAC(c.key, "ack", hello, body)) {
		return errAuth
	}
	ack = slices.Clone(ack)
	if err := l.writeMsg(append([]byte{wireMagic, lkConfirm}, linkMAC(c.key, "confirm", hello, ack)...)); err != nil {
		return err
	}
	accept, err := l.readMsg(16)
	if err != nil {
		return err
	}
	if len(accept) != 2 || accept[0] != wireMagic || accept[1] != lkAccept {
		return errors.New("not accepted")
	}
	return nil
}

func (l *link) writeMsg(b []byte) error {
	m := binary.AppendUvarint(make([]byte, 0, len(b)+4), uint64(len(b)))
	_, err := l.conn.Write(append(m, b...))
	return err
}

// readMsg reads one handshake message of at most limit bytes; the slice
// is valid until the next read.
func (l *link) readMsg(limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(l.br)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, errors.New("handshake message too long")
	}
	b, err := l.br.Peek(int(n))
	if err != nil {
		return nil, err
	}
	_, _ = l.br.Discard(int(n))
	return b, nil
}

// run reads frames from the link on the calling goroutine until it
// closes, and starts its writer. When the link ends, p is down. It
// reports whether another goroutine took over reading the link (see
// runCall): the calling goroutine's count in the cluster's wait group is
// then that goroutine's, and the caller must not mark it done.
func (l *link) run(p *peer) (replaced bool) {
	c := l.c
	p.mu.Lock()
	p.writing = false // frames queued during the handshake may go now
	p.scheduled = true
	p.mu.Unlock()
	l.wakeWriter()
	c.wg.Add(1)
	c.writers.Add(1)
	go l.writer(p)
	return l.serve(p)
}

// serve reads the link's frames as its goroutine until the link closes,
// and then reports p down; or until another goroutine has taken over
// reading it (see runCall), and then just returns true.
func (l *link) serve(p *peer) (replaced bool) {
	replaced, err := l.read(p)
	if replaced {
		return true
	}
	l.close()
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		l.c.log.Debug("cluster: direct link closed", "peer", p.name, "err", err)
	}
	l.c.nodeDown(p, false)
	return false
}

func (l *link) read(p *peer) (replaced bool, err error) {
	var scratch []byte
	for {
		stop, kind, err := l.readFrame(p, &scratch, false)
		if err != nil || stop {
			return false, err
		}
		if l.pend.ok {
			// A call, the last frame read: its server handles it
			// here, and this goroutine then reads again at once.
			if reader, err := l.runCall(p); !reader || err != nil {
				return !reader, err
			}
			continue
		}
		if l.br.Buffered() != 0 {
			continue
		}
		if kind == kReply && p.calling.Load() == 0 {
			// A call was answered and no other waits: its caller may
			// call again at once, and then reads its reply itself.
			if err := l.lend(); err != nil {
				return false, err
			}
			continue
		}
		// Let the processes these frames woke run before this
		// goroutine reads again (which waits for the socket): a
		// call's server, or the caller its reply wakes, starts at
		// once.
		runtime.Gosched()
	}
}

// Callers read their own replies. A call's caller that finds its link's
// socket free (rsFree) reads it itself after writing the request: the
// reply wakes the caller's thread directly, where a hand-off from the
// link's goroutine would wake two more threads (the goroutine's, and
// another that Go's scheduler starts for the caller). While it waits it
// handles every frame that comes, as the link's goroutine would, and when
// it has its answer and nothing is buffered it frees the socket again, or
// hands it back to the link's goroutine if other calls wait or reading
// failed. The link's goroutine frees the socket (lend) after handling a
// reply when no other call waits, and takes it back when it has been free
// at a tick of linkLend; at those ticks it also interrupts a caller whose
// deadline has passed or whose context is done. So a frame that comes
// while no call is under way waits at most linkLend, and a call's timeout
// and cancellation are seen within linkLend.
const (
	rsReader = iota // the link's goroutine reads the socket
	rsFree          // nobody does: the first caller may
	rsCaller        // a caller does
)

// linkLend is how long the socket of a link may stay free before its
// goroutine takes it back, and how often that goroutine checks the
// deadline and context of a caller reading it.
const linkLend = time.Millisecond

// errBigFrame tells a caller reading the socket that the next frame is
// longer than the read buffer: the link's goroutine reads it.
var errBigFrame = errors.New("cluster: frame longer than the read buffer")

// lend frees the socket for callers and waits until one hands it back,
// or it is free at a tick of linkLend; meanwhile it interrupts a caller
// whose deadline has passed or whose context is done.
func (l *link) lend() error {
	l.rmu.Lock()
	l.rstate = rsFree
	l.rmu.Unlock()
	return l.waitBack()
}

// reclaim takes the socket back for the link's goroutine after it was
// free: at once if nobody took it, otherwise when the caller reading it
// hands it back (as in lend).
func (l *link) reclaim() error {
	l.rmu.Lock()
	if l.rstate == rsFree {
		l.rstate = rsReader
		l.rmu.Unlock()
		return nil
	}
	l.rmu.Unlock()
	return l.waitBack()
}

// waitBack is lend's wait once the socket is free or lent.
func (l *link) waitBack() error {
	if l.rtimer == nil {
		l.rtimer = time.NewTimer(linkLend)
	} else {
		l.rtimer.Reset(linkLend)
	}
	for {
		select {
		case <-l.rback:
			l.rtimer.Stop()
			l.rmu.Lock()
			err := l.rerr
			l.rerr = nil
			l.rmu.Unlock()
			return err
		case <-l.quit:
			l.rtimer.Stop()
			return net.ErrClosed
		case <-l.rtimer.C:
		}
		l.rmu.Lock()
		switch l.rstate {
		case rsFree:
			l.rstate = rsReader
			l.rmu.Unlock()
			return nil
		case rsCaller:
			if !l.intr && (l.hdl != 0 && time.Now().UnixNano() > l.hdl || l.hctx != nil && l.hctx.Err() != nil) {
				l.intr = true
				_ = l.conn.SetReadDeadline(aLongTimeAgo)
			}
		}
		// rsReader: handed back, rback has the word.
		l.rmu.Unlock()
		l.rtimer.Reset(linkLend)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// takeSocket makes the calling goroutine the reader of the link's socket
// if it is free, until releaseSocket; deadline (UnixNano, 0 for none) and
// ctx are the caller's, checked by the link's goroutine.
func (l *link) takeSocket(deadline int64, ctx context.Context) bool {
	if l == nil {
		return false
	}
	l.rmu.Lock()
	ok := l.rstate == rsFree
	if ok {
		l.rstate = rsCaller
		l.hdl, l.hctx = deadline, ctx
	}
	l.rmu.Unlock()
	return ok
}

// readUntil reads and handles the link's frames as its reader until
// answered holds the caller's answer and nothing is buffered, or reading
// fails, then releases the socket.
func (l *link) readUntil(p *peer, answered chan callResult) {
	var scratch []byte
	var err error
	for {
		var stop bool
		if stop, _, err = l.readFrame(p, &scratch, true); err != nil || stop {
			break
		}
		if len(answered) > 0 && l.br.Buffered() == 0 {
			break
		}
	}
	l.releaseSocket(p, err)
}

// releaseSocket ends a caller's turn as the socket's reader: the socket is
// free again, or back with the link's goroutine if other calls wait, the
// peer is down, or the read failed with err (the goroutine then ends the
// link with it, unless it was this node's interrupt or a frame too big for
// a caller).
func (l *link) releaseSocket(p *peer, err error) {
	l.rmu.Lock()
	if l.intr {
		l.intr = false
		_ = l.conn.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
	}
	l.hdl, l.hctx = 0, nil
	back := err != nil || p.down.Load() || p.calling.Load() > 0
	if err == errBigFrame {
		err = nil
	}
	if !back {
		l.rstate = rsFree
		l.rmu.Unlock()
		return
	}
	l.rerr, l.rstate = err, rsReader
	l.rmu.Unlock()
	select {
	case l.rback <- struct{}{}:
	default:
	}
}

// readFrame reads one frame and handles it; stop reports that the peer is
// down. A caller reading the socket (self) consumes nothing of a frame it
// cannot read whole, so that an interrupted read leaves the stream as it
// was; it leaves frames longer than the buffer to the link's goroutine
// (errBigFrame).
func (l *link) readFrame(p *peer, scratch *[]byte, self bool) (stop bool, kind byte, err error) {
	c := l.c
	n, hdr, err := l.peekLen(uint64(c.opts.MaxMessageSize) + 64)
	if err != nil {
		if errors.Is(err, ErrDecode) { // the stream cannot be read on
			c.stats.decodeErrors.Add(1)
			c.log.Warn("cluster: closing a direct link on a bad frame", "peer", p.name, "err", err)
		}
		return false, 0, err
	}
	var body []byte
	big := hdr+n > l.br.Size()
	switch {
	case big && self:
		return false, 0, errBigFrame
	case big:
		if cap(*scratch) < n {
			*scratch = make([]byte, n)
		}
		body = (*scratch)[:n]
		_, _ = l.br.Discard(hdr)
		if _, err := io.ReadFull(l.br, body); err != nil {
			return false, 0, err
		}
	default:
		b, err := l.br.Peek(hdr + n)
		if err != nil {
			return false, 0, err
		}
		body = b[hdr:]
	}
	p.lastSeen.Store(time.Now().UnixNano())
	c.stats.bytesIn.Add(uint64(n))
	if len(body) > 0 {
		kind = body[0]
	}
	last := !self && !big && l.br.Buffered() == hdr+n
	p.rx.Lock()
	if p.down.Load() {
		p.rx.Unlock()
		return true, kind, nil
	}
	if last {
		p.inlineTo = l // a call may run on this goroutine: nothing else waits
	}
	if err := c.handleFrame(p, body); err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Warn("cluster: dropped a message", "peer", p.name, "err", err)
	}
	p.inlineTo = nil
	p.rx.Unlock()
	if !big {
		_, _ = l.br.Discard(hdr + n)
	}
	return p.down.Load(), kind, nil // down: a bye, or dropped by this node
}

// peekLen returns the length of the next frame and of its length prefix,
// without consuming either.
func (l *link) peekLen(max uint64) (n, hdr int, err error) {
	for k := 1; ; k++ {
		b, err := l.br.Peek(k)
		if err != nil {
			return 0, 0, err
		}
		v, m := binary.Uvarint(b)
		switch {
		case m > 0 && v > max:
			return 0, 0, fmt.Errorf("%w: frame of %d bytes", ErrDecode, v)
		case m > 0:
			return int(v), m, nil
		case m < 0 || k == binary.MaxVarintLen64:
			return 0, 0, fmt.Errorf("%w: bad frame length", ErrDecode)
		}
	}
}

// kick gets p's queue written, with p.mu held (and released): on this
// goroutine, with one non-blocking write, when nothing is being written
// and the link has been idle for inlineGap (or now: a caller, which waits
// for the answer anyway); otherwise by the link's writer. What a non-blocking write leaves (the socket's buffer is full)
// goes to the writer.
func (l *link) kick(p *peer, now bool) {
	if p.writing || p.scheduled {
		p.mu.Unlock()
		return
	}
	if l.raw == nil || len(p.full) > 0 || !now && time.Now().UnixNano()-p.lastWrite < int64(inlineGap) {
		p.scheduled = true
		p.mu.Unlock()
		l.wakeWriter()
		return
	}
	data := p.buf
	p.buf, p.pending, p.writing = nil, 0, true
	p.mu.Unlock()
	l.wdata = data
	err := l.raw.Write(l.wf)
	n, werr := l.wn, l.werr
	l.wdata = nil
	if n < 0 {
		n = 0
	}
	if err == nil && werr != nil && werr != syscall.EAGAIN && werr != syscall.EINTR {
		err = werr
	}
	if err != nil {
		l.close()
	}
	c := l.c
	c.stats.bytesOut.Add(uint64(n))
	if n > 0 {
		c.stats.batchesOut.Add(1)
	}
	p.mu.Lock()
	p.writing = false
	p.lastWrite = time.Now().UnixNano()
	if n < len(data) && err == nil {
		rest := append(c.getBatch(), data[n:]...)
		rest = append(rest, p.buf...)
		if p.buf != nil && p.spare == nil {
			p.spare = p.buf[:0]
		}
		p.buf = rest
		p.pending += len(data) - n
	}
	if p.spare == nil {
		p.spare, data = data[:0], nil
	}
	more := len(p.buf) > 0 || len(p.full) > 0
	if more {
		p.scheduled = true
	}
	p.mu.Unlock()
	if data != nil {
		c.putBatch(data)
	}
	if more {
		l.wakeWriter()
	}
}

func (l *link) wakeWriter() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// writer writes what is queued for p, everything queued since its last
// write in one system call. A write that cannot finish within the
// heartbeat timeout (the peer stopped reading) closes the link. When the
// cluster leaves it writes what is left and ends.
func (l *link) writer(p *peer) {
	c := l.c
	defer c.wg.Done()
	defer c.writers.Done()
	var hold [][]byte
	var bufs net.Buffers
	for {
		leaving := false
		select {
		case <-l.wake:
		case <-l.quit:
			return
		case <-c.done:
			leaving = true
		}
		p.mu.Lock()
		if p.writing && !leaving {
			// A sender is writing; it wakes the writer again if it
			// leaves anything.
			p.scheduled = false
			p.mu.Unlock()
			continue
		}
		for leaving && p.writing { // the sender's write does not wait
			p.mu.Unlock()
			time.Sleep(10 * time.Microsecond)
			p.mu.Lock()
		}
		hold = append(hold, p.full...)
		if len(p.buf) > 0 {
			hold = append(hold, p.buf)
		}
		p.full, p.buf, p.pending, p.scheduled = nil, nil, 0, false
		p.writing = len(hold) > 0
		p.mu.Unlock()
		if len(hold) > 0 {
			bufs = append(bufs[:0], hold...)
			n := 0
			for _, b := range hold {
				n += len(b)
			}
			_ = l.conn.SetWriteDeadline(time.Now().Add(c.opts.HeartbeatTimeout))
			var err error
			if raceEnabled { // writev tells the race detector nothing (see rawRead)
				for _, b := range hold {
					if _, err = l.conn.Write(b); err != nil {
						break
					}
				}
			} else {
				_, err = bufs.WriteTo(l.conn)
			}
			p.mu.Lock()
			p.writing = false
			p.lastWrite = time.Now().UnixNano()
			more := len(p.buf) > 0 || len(p.full) > 0
			if more && !p.scheduled {
				p.scheduled = true
				l.wakeWriter()
			}
			p.mu.Unlock()
			if err != nil {
				l.close()
				return
			}
			c.stats.batchesOut.Add(1)
			c.stats.bytesOut.Add(uint64(n))
			for i, b := range hold {
				c.recycle(p, b)
				hold[i] = nil
			}
			hold = hold[:0]
		}
		if leaving {
			return
		}
	}
}
