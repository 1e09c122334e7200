package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

// Hostile handlers on the link's goroutine (see runCall): the tests here
// attack the inline calls and their rescue.

// inlineCall calls srv from a until a call runs on b's link goroutine (a
// call may come behind another frame and be delivered instead), each time
// with a fresh server made by start; it returns the error of the call
// that ran inline.
func inlineCall(t *testing.T, a, b member, start func() gotp.PID, req any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for try := 0; try < 50; try++ {
		srv := start()
		before := b.c.Stats()
		_, err := server.Call[any](ctx, a.n, srv, req)
		// A Goexit inline is a rescue, not counted as an inline call.
		if st := b.c.Stats(); st.InlineCalls > before.InlineCalls || st.Rescues > before.Rescues {
			return err
		}
	}
	t.Fatal("no call ran on the link's goroutine in 50 tries")
	return nil
}

// TestInlineGoexitTwice: a handler that calls runtime.Goexit on the
// goroutine that replaced the link's first one (after an earlier Goexit)
// ends that goroutine too; the link goes on, and Leave then returns (the
// wait group's count of every goroutine that ended was marked done).
func TestInlineGoexitTwice(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() gotp.PID {
		pid, err := server.Start(ctx, b.n, &linkServer{})
		gotptest.Must(t, err)
		return pid
	}
	for i := range 3 {
		err := inlineCall(t, a, b, start, "goexit")
		if err == nil || !strings.Contains(err.Error(), gotp.ErrGoexit.Error()) {
			t.Fatalf("goexit %d: %v", i, err)
		}
	}
	if st := b.c.Stats(); st.Rescues < 3 {
		t.Fatalf("%d rescues after 3 inline Goexits", st.Rescues)
	}
	other, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
	gotptest.Must(t, err)
	if v, err := server.Call[int](ctx, a.n, other, 4); err != nil || v != 8 {
		t.Fatalf("call after the Goexits: %v, %v", v, err)
	}
	leave, cancelLeave := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLeave()
	if err := b.c.Leave(leave); err != nil {
		t.Fatalf("Leave after Goexits on rescued readers: %v", err)
	}
}

// byteProxy forwards the direct links dialled to it to target, and can
// write bytes of its own into the stream towards target (a peer that
// sends garbage).
type byteProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	outs   []net.Conn // towards target; writes under mu
	wg     sync.WaitGroup
}

func newByteProxy(t *testing.T, addr, target string) *byteProxy {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	bp := &byteProxy{ln: ln, target: target}
	bp.wg.Add(1)
	go func() { // ends when ln closes (cleanup)
		defer bp.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			bp.mu.Lock()
			bp.outs = append(bp.outs, out)
			bp.mu.Unlock()
			bp.wg.Add(2)
			go func() { // in → out, each chunk written under mu
				defer bp.wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := in.Read(buf)
					if n > 0 {
						bp.mu.Lock()
						_, werr := out.Write(buf[:n])
						bp.mu.Unlock()
						if werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				in.Close()
				out.Close()
			}()
			go func() {
				defer bp.wg.Done()
				_, _ = io.Copy(in, out)
				in.Close()
				out.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		bp.mu.Lock()
		for _, c := range bp.outs {
			c.Close()
		}
		bp.mu.Unlock()
		bp.wg.Wait()
	})
	return bp
}

// inject writes b into every forwarded stream, between chunks.
func (bp *byteProxy) inject(b []byte) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for _, c := range bp.outs {
		_, _ = c.Write(b)
	}
}

// TestLinkGarbageFromPeer: an authenticated peer that sends a frame length
// beyond any limit (ten bytes of 0xff) or past MaxMessageSize gets its
// link closed (a decode error, never a crash or an allocation of that
// size): the node sees it down at once, calls to it fail with
// noconnection, and a new link is made and works.
func TestLinkGarbageFromPeer(t *testing.T) {
	const listen, via = "127.0.0.1:23101", "127.0.0.1:23102"
	for _, c := range []struct {
		name string
		junk []byte
	}{
		{"overflow", bytes.Repeat([]byte{0xff}, 10)},
		{"huge", binary.AppendUvarint(nil, 1<<40)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bp := newByteProxy(t, via, listen)
			k := 0
			ms := startClusterWith(t, func(o *Options) {
				if k++; k == 2 { // the second node, b: dialled by a through the proxy
					o.DirectListen, o.DirectAdvertise = listen, via
				}
			}, "a", "b")
			a, b := ms[0], ms[1]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := server.Start(ctx, b.n, &echo{casts: make(chan any, 1)})
			gotptest.Must(t, err)
			if v, err := server.Call[int](ctx, a.n, srv, 1); err != nil || v != 2 {
				t.Fatalf("call before: %v, %v", v, err)
			}
			sub, _ := b.c.Subscribe()
			defer sub.Close()
			bp.mu.Lock()
			proxied := len(bp.outs)
			bp.mu.Unlock()
			if proxied == 0 {
				t.Fatal("the direct link does not go through the proxy")
			}
			before := b.c.Stats().DecodeErrors
			bp.inject(c.junk)
			waitEvent(t, sub, NodeDown, "a", 3*time.Second)
			if got := b.c.Stats().DecodeErrors; got <= before {
				t.Fatalf("DecodeErrors %d after the bad frame, %d before: the closed link is not counted", got, before)
			}
			gotptest.Must(t, b.c.WaitFor(ctx, "a"))
			gotptest.Must(t, a.c.WaitFor(ctx, "b"))
			gotptest.EventuallyWithin(t, 10*time.Second, "a call on the new connection", func() bool {
				short, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				v, err := server.Call[int](short, a.n, srv, 2)
				return err == nil && v == 4
			})
		})
	}
}

// chain answers n > 0 with one more than the answer of other to n-1, and
// 0 with 0: calls that bounce between two nodes, each handler waiting on
// a call back to the node that called it.
type chain struct {
	server.Defaults
	other *gotp.PID // set before the first call
}

func (s *chain) HandleCall(p *gotp.Process, _ server.From, req any) (any, error) {
	n := req.(int)
	if n == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := server.Call[int](ctx, p.Node(), *s.other, n-1)
	if err != nil {
		return nil, err
	}
	return v + 1, nil
}

// TestInlineReentrantChain: a call from a to b whose handler calls a,
// whose handler calls b again, eight deep, from four callers at once
// (distinct servers per caller, so that no server waits on itself): each
// handler may run on its link's goroutine and read its own reply off the
// link; every chain is answered, and the links go on.
func TestInlineReentrantChain(t *testing.T) {
	ms := startCluster(t, "a", "b")
	a, b := ms[0], ms[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const callers, depth = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		// Servers for each level: even levels on b, odd on a.
		pids := make([]gotp.PID, depth+1)
		servers := make([]*chain, depth+1)
		for i := depth; i >= 0; i-- {
			n := b.n
			if (depth-i)%2 == 1 {
				n = a.n
			}
			servers[i] = &chain{}
			if i > 0 {
				servers[i].other = &pids[i-1]
			}
			pid, err := server.Start(ctx, n, servers[i])
			gotptest.Must(t, err)
			pids[i] = pid
		}
		wg.Add(1)
		go func() { // ends with its calls
			defer wg.Done()
			for range 20 {
				v, err := server.Call[int](ctx, a.n, pids[depth], depth)
				if err == nil && v != depth {
					err = fmt.Errorf("chain of %d answered %d", depth, v)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("a: %+v", a.c.Stats())
	t.Logf("b: %+v", b.c.Stats())
}
