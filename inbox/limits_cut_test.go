package inbox_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// cutter is a TCP proxy to Postgres whose connections can be cut at once (reset,
// as a network failure would: the client gets no error from the server, so a
// statement in flight is in doubt), and which refuses new connections for a while
// after a cut. It listens on a port of this review's range (29000-29099).
type cutter struct {
	ln      net.Listener
	target  string
	refuse  atomic.Int64 // unix nanos until which new connections are reset
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	stopped bool
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	var ln net.Listener
	var err error
	for port := 29000; port < 29100; port++ {
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
	}
	if ln == nil {
		t.Fatalf("no free port in 29000-29099: %v", err)
	}
	c := &cutter{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	c.wg.Go(c.accept)
	t.Cleanup(c.close)
	return c
}

func (c *cutter) accept() {
	for {
		a, err := c.ln.Accept()
		if err != nil {
			return
		}
		if time.Now().UnixNano() < c.refuse.Load() {
			reset(a)
			continue
		}
		d, err := net.Dial("tcp", c.target)
		if err != nil {
			a.Close()
			continue
		}
		if !c.track(a, d) {
			return
		}
		c.wg.Go(func() { pipe(d, a) })
		c.wg.Go(func() { pipe(a, d) })
	}
}

func (c *cutter) track(cs ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		for _, x := range cs {
			x.Close()
		}
		return false
	}
	for _, x := range cs {
		c.conns[x] = struct{}{}
	}
	return true
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// reset closes c with a TCP reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// cut resets every connection and refuses new ones for d.
func (c *cutter) cut(d time.Duration) {
	c.refuse.Store(time.Now().Add(d).UnixNano())
	c.mu.Lock()
	defer c.mu.Unlock()
	for x := range c.conns {
		reset(x)
		delete(c.conns, x)
	}
}

func (c *cutter) close() {
	c.ln.Close()
	c.mu.Lock()
	c.stopped = true
	for x := range c.conns {
		x.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// cutPool is a pool of at most n connections to the test database through a
// cutter.
func cutPool(t *testing.T, n int32) (*pgxpool.Pool, *cutter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := newCutter(t, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)))
	host, port, _ := net.SplitHostPort(c.ln.Addr().String())
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, c
}

// PerPartition on Postgres: a lane that holds prefetched rows of a key and loses
// its places of that key (here their extension is in doubt: the network cut
// mid-lease) must still get its rows run. The rows wait in the lane for a place
// of their key while the lane extends their leases; the lane asks only for
// places of keys with ready rows, and once another instance has run the key's
// one ready row (the handler the loss cancelled, retried) the key has none: the
// lane's rows of it wait for ever, leased, never run.
func TestReviewPerPartitionRowsWithoutAPlaceAreNotWedged(t *testing.T) {
	b := pgBackend(t)
	groupTable(t, b)
	pub := newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()})
	for i := range 3 {
		if _, err := pub.Publish(t.Context(), msg{N: i}, &inbox.PublishOpts{Partition: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	done := newTally(3)
	started := make(chan int, 16)
	var first atomic.Bool
	h := func(ctx context.Context, j inbox.Job[msg]) error {
		started <- j.Payload.N
		if first.CompareAndSwap(false, true) {
			select {
			case <-ctx.Done(): // its place lost
				return ctx.Err()
			case <-time.After(4 * time.Second): // the cut missed the places' extension
			}
		}
		done.add(j.Payload.N)
		return nil
	}
	o := inbox.SubscribeOptions{Workers: 2, Claimers: 1, Prefetch: 4, Lease: 3 * time.Second, PollInterval: 10 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }, Limits: inbox.Limits{PerPartition: 1}}
	pool, cut := cutPool(t, 4)
	victim, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: b.table, Columns: inbox.GroupColumns(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// The victim claims only with settlements and its places' asks, not every
	// poll (a claim retried through the cut would hold its loop back, and the
	// places' extension with it).
	vo := o
	vo.PollInterval = time.Hour
	start(t, victim, h, vo)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no job started")
	}
	// The victim holds the key's place and all three rows (two prefetched).
	within(t, 10*time.Second, func() bool {
		return b.queryN(t, `SELECT count(*) FROM "`+b.table+`" WHERE claimed_at IS NOT NULL`) == 3
	}, "the victim holds every row of the key")
	start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), h, o)
	// The network fails for longer than the places' next extension (a third of a
	// lease away at most): in doubt, the victim holds no place.
	cut.cut(o.Lease/3 + 300*time.Millisecond)
	select {
	case <-done.all:
	case <-time.After(6 * o.Lease):
		dump(t, b)
		done.mu.Lock()
		defer done.mu.Unlock()
		t.Fatalf("jobs done %v of 0..2 within %v of the cut: the victim's rows of the key wait for a place, leased, never run", done.seen, 6*o.Lease)
	}
}

// dump logs the rows of b's table and of its TABLE_limits.
func dump(t *testing.T, b *backend) {
	t.Helper()
	pool := b.newDB(t).(*pgxpool.Pool)
	for _, q := range []string{
		`SELECT id::text, coalesce(partition_key, '-'), coalesce(claimed_at::text, '-'), locked_until::text, attempts::text FROM "` + b.table + `" ORDER BY id`,
		`SELECT name, window_start::text, to_timestamp(starts / 1e6)::text, '', '' FROM "` + b.table + `_limits" ORDER BY name`,
	} {
		rows, err := pool.Query(context.Background(), q)
		if err != nil {
			t.Logf("%s: %v", q, err)
			continue
		}
		for rows.Next() {
			var a, b2, c, d, e string
			if err := rows.Scan(&a, &b2, &c, &d, &e); err != nil {
				t.Log(err)
				break
			}
			t.Logf("%s | %s | %s | %s | %s", a, b2, c, d, e)
		}
		rows.Close()
	}
	t.Logf("now %v", time.Now().UTC())
}
