package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// subjectToken makes a node or cluster name usable as one NATS subject
// token: kept as is when it only has safe characters, hex-encoded
// otherwise.
func subjectToken(s string) string {
	safe := s != ""
	for i := 0; i < len(s) && safe; i++ {
		ch := s[i]
		safe = ch == '-' || ch == '_' || ch == '@' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
	}
	if safe {
		return s
	}
	return "x" + hex.EncodeToString([]byte(s))
}

func (c *Cluster) nodeSubject(name string) string {
	return "gotp." + subjectToken(c.opts.Cluster) + ".node." + subjectToken(name)
}

func (c *Cluster) routeCreds() (user, pass string) {
	o := &c.opts
	switch {
	case o.User != "":
		return o.User, o.Password
	case o.Token != "":
		return "gotp-route", o.Token
	case o.NKeySeed != "":
		sum := sha256.Sum256([]byte("gotp-route:" + o.NKeySeed))
		return "gotp-route", hex.EncodeToString(sum[:])
	}
	return "", ""
}

func splitHostPort(s string) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, err
	}
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	return host, port, nil
}

func (c *Cluster) connect(ctx context.Context) error {
	o := &c.opts
	nopts := []nats.Option{
		nats.Name("gotp " + c.name),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectBufSize(o.MaxPending),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Warn("cluster: nats error", "err", err)
		}),
	}
	var kp nkeys.KeyPair
	switch {
	case o.NKeySeed != "":
		var err error
		kp, err = nkeys.FromSeed([]byte(o.NKeySeed))
		if err != nil {
			return fmt.Errorf("cluster: bad NKeySeed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return fmt.Errorf("cluster: bad NKeySeed: %w", err)
		}
		nopts = append(nopts, nats.Nkey(pub, kp.Sign))
	case o.User != "":
		nopts = append(nopts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		nopts = append(nopts, nats.Token(o.Token))
	}
	if o.TLS != nil {
		nopts = append(nopts, nats.Secure(o.TLS))
	}
	if len(o.URLs) == 0 {
		sopts := &natsserver.Options{
			ServerName: c.name + "-" + strconv.FormatUint(uint64(c.cr), 10), // unique even for a twin
			NoSigs:     true,
			NoLog:      true,
			MaxPayload: int32(max(o.MaxMessageSize, 1<<20) + 64<<10),
			Host:       "127.0.0.1", // routing needs a client listener
			Port:       natsserver.RANDOM_PORT,
			TLSConfig:  o.TLS,
		}
		if o.ClientListen != "" {
			h, p, err := splitHostPort(o.ClientListen)
			if err != nil {
				return fmt.Errorf("cluster: ClientListen: %w", err)
			}
			sopts.Host, sopts.Port = h, p
		}
		h, p, err := splitHostPort(o.RouteListen)
		if err != nil {
			return fmt.Errorf("cluster: RouteListen: %w", err)
		}
		ru, rp := c.routeCreds()
		sopts.Cluster = natsserver.ClusterOpts{
			Name: "gotp-" + subjectToken(o.Cluster), Host: h, Port: p,
			Username: ru, Password: rp, NoAdvertise: o.NoAdvertise, Advertise: o.RouteAdvertise, TLSConfig: o.TLS,
			Compression: natsserver.CompressionOpts{Mode: natsserver.CompressionOff},
			// A route silent through a partition is dropped and dialled
			// again (explicit routes) rather than kept for minutes with
			// its TCP retransmissions backing off, so that heartbeats
			// flow again soon after the partition heals.
			PingInterval: max(c.opts.HeartbeatTimeout/2, time.Second), MaxPingsOut: 2,
		}
		for _, s := range o.Peers {
			u, err := url.Parse(s)
			if err != nil {
				return fmt.Errorf("cluster: peer %q: %w", s, err)
			}
			if u.User == nil && ru != "" {
				u.User = url.UserPassword(ru, rp)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
		switch {
		case o.NKeySeed != "":
			pub, _ := kp.PublicKey()
			sopts.Nkeys = []*natsserver.NkeyUser{{Nkey: pub}}
		case o.User != "":
			sopts.Username, sopts.Password = o.User, o.Password
		case o.Token != "":
			sopts.Authorization = o.Token
		}
		srv, err := natsserver.NewServer(sopts)
		if err != nil {
			return fmt.Errorf("cluster: embedded server: %w", err)
		}
		c.srv = srv
		srv.SetLoggerV2(&c.auth, false, false, false)
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			return errors.New("cluster: embedded server did not start")
		}
		nopts = append(nopts, nats.InProcessServer(srv))
	}
	urls := strings.Join(o.URLs, ",")
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(urls, nopts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("cluster: connect: %w", clientAuthError(o.URLs, r.err))
		}
		c.nc = r.nc
		return nil
	case <-ctx.Done():
		r := <-ch // nats.Connect gives up by its own timeout
		if r.nc != nil {
			r.nc.Close()
		}
		return ctx.Err()
	}
}

func (c *Cluster) shutdownNATS() {
	if c.nc != nil {
		c.nc.Close()
	}
	if c.srv != nil {
		c.srv.Shutdown()
		c.srv.WaitForShutdown()
	}
}

// onBatch handles one NATS message from another node.
func (c *Cluster) onBatch(m *nats.Msg) {
	if c.closed.Load() {
		return
	}
	c.stats.batchesIn.Add(1)
	c.stats.bytesIn.Add(uint64(len(m.Data)))
	if err := c.handleBatch(m.Data); err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Warn("cluster: bad batch", "err", err)
	}
}

func (c *Cluster) handleBatch(data []byte) error {
	d := &reader{b: data}
	inc, start, conn := parseHeader(d)
	if d.err != nil {
		return d.err
	}
	if conn == 0 {
		for len(d.b) > 0 {
			body := d.bytes()
			if d.err != nil {
				return d.err
			}
			f, err := decodeControl(&reader{b: body})
			if err != nil {
				return err
			}
			switch f.kind {
			case kHeartbeat:
				c.discovered(inc, start, f.addrs)
			case kHello:
				c.onHello(inc, start, f)
			}
		}
		return nil
	}
	p := c.connFor(inc, conn)
	if p == nil {
		c.stats.stale.Add(1)
		return nil
	}
	p.lastSeen.Store(time.Now().UnixNano())
	p.rx.Lock()
	defer p.rx.Unlock()
	for len(d.b) > 0 && !p.down.Load() {
		body := d.bytes()
		if d.err != nil {
			return d.err
		}
		if len(body) > c.opts.MaxMessageSize {
			c.stats.decodeErrors.Add(1)
			continue
		}
		if err := c.handleFrame(p, body); err != nil {
			c.stats.decodeErrors.Add(1)
			c.log.Warn("cluster: dropped a message", "peer", p.name, "err", err)
		}
	}
	return nil
}

// connFor returns the NATS connection from inc that this node calls conn,
// confirming a half-open one with its first batch; nil if conn is not the
// current connection (a late batch of an earlier one).
func (c *Cluster) connFor(inc incarnation, conn uint64) *peer {
	if p := c.peers()[inc.name]; p != nil && p.creation == inc.creation && p.link == nil && p.conn == conn {
		return p
	}
	c.mu.Lock()
	s := c.shakes[inc.name]
	ok := s != nil && !s.initiator && s.inc == inc && s.conn == conn
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c.establish(s, s.theirs, nil)
}

// publishControl publishes one control frame (outside any connection) to
// subject.
func (c *Cluster) publishControl(subject string, f []byte) {
	b := make([]byte, 0, len(c.header)+len(f)+8)
	b = append(b, c.header...)
	b = append(b, 0) // conn 0: control
	b = binary.AppendUvarint(b, uint64(len(f)))
	b = append(b, f...)
	if err := c.nc.Publish(subject, b); err == nil {
		c.stats.batchesOut.Add(1)
		c.stats.bytesOut.Add(uint64(len(b)))
	}
}

// publishTo publishes one frame on p's NATS connection at once, ahead of
// anything queued (used for a bye as the connection is dropped).
func (c *Cluster) publishTo(p *peer, f []byte) {
	b := make([]byte, 0, len(p.hdr)+len(f)+8)
	b = append(b, p.hdr...)
	b = binary.AppendUvarint(b, uint64(len(f)))
	b = append(b, f...)
	_ = c.nc.Publish(p.subject, b)
}

// writer publishes the frames queued for NATS connections: one NATS
// message per peer and wake-up holds every frame queued for that peer
// meanwhile (up to the batch limit), so that a busy sender pays for NATS
// once per batch.
func (c *Cluster) writer() {
	defer c.wg.Done()
	defer c.writers.Done()
	var ready []*peer
	var bufs [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			c.flushAll(&ready, &bufs)
			return
		}
		c.flushAll(&ready, &bufs)
	}
}

func (c *Cluster) flushAll(ready *[]*peer, bufs *[][]byte) {
	c.readyMu.Lock()
	*ready, c.ready = c.ready, (*ready)[:0]
	c.readyMu.Unlock()
	for i, p := range *ready {
		(*ready)[i] = nil
		p.mu.Lock()
		*bufs = append(*bufs, p.full...)
		if len(p.buf) > len(p.hdr) {
			*bufs = append(*bufs, p.buf)
		} else if p.buf != nil {
			c.putBatch(p.buf)
		}
		p.full, p.buf, p.pending, p.scheduled = nil, nil, 0, false
		down := p.down.Load()
		p.mu.Unlock()
		for j, b := range *bufs {
			if !down {
				if err := c.nc.Publish(p.subject, b); err != nil {
					c.stats.dropped.Add(1)
				} else {
					c.stats.batchesOut.Add(1)
					c.stats.bytesOut.Add(uint64(len(b)))
				}
			}
			c.recycle(p, b) // NATS copied it
			(*bufs)[j] = nil
		}
		*bufs = (*bufs)[:0]
	}
}
