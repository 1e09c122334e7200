// Command chat-load is the H1 workload of gotp's benchmarks: many users
// connected to one chat service, each sending messages to another user. It
// reports messages per second, the send-to-receive latency (p50, p99,
// max), the server's bytes per connection and its peak resident set.
//
//	go run ./cmd/chat-load                              # 1,000 TCP users × 100 messages
//	go run ./cmd/chat-load -users 200 -messages 50      # smaller
//	go run ./cmd/chat-load -rate 2000 -flood 10         # the hostile mix: 10 flooding clients beside the users
//	go run ./cmd/chat-load -users 10000 -ws 5000 -messages 0   # 10,000 idle connections, half of them WebSockets
//	go run ./cmd/chat-load -addr host:4000              # against a running cmd/chat (no memory figures)
//
// Without -addr it starts the server in this process (on loopback, history
// in a temporary directory) and runs the clients in a child process
// (itself, re-executed), so that the memory it measures is the server's
// alone: the heap and stack in use (after a GC) and the resident set,
// before the users connect and once they all have, divided by the number
// of users; and the highest resident set seen (sampled every 50 ms) from
// the first connection to the last message.
//
// User i sends to user i+1 (the last to the first). Each sender keeps at
// most -window messages in flight: it sends the next when SENT arrives for
// an earlier one. The latency of a message runs from just before its SEND is
// written to when its MSG is read by the recipient (both in the client
// process, one clock). Messages/s counts messages received over the time
// from the start of sending to the last receipt. Users below -ws speak
// JSON over the WebSocket (/ws), the others the line protocol over TCP.
//
// With -flood N, N more clients connect (the first -flood-ws of them over
// the WebSocket, the others over TCP) and, while the users send, each
// writes a command (-flood-cmd, WHO by default) over and over without
// waiting for the replies, and reads the replies at only -flood-read bytes
// per second: clients that pipeline and read slowly.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/examples/chat"
	"github.com/gotp/gotp/internal/fdlimit"
)

// childEnv marks the re-executed client process.
const childEnv = "GOTP_CHAT_LOAD_CLIENT"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chat-load:", err)
		os.Exit(1)
	}
}

type config struct {
	users, messages, window int
	rate                    float64
	ws                      int // users over the WebSocket
	flood                   int // flooding clients
	floodWS                 int // of them, over the WebSocket
	floodRead               int // bytes/s each flooding client reads
	floodCmd                string
	sendBuffer              int       // the gotp server's Config.SendBuffer
	commandRate             float64   // the gotp server's Config.CommandRate
	commandBurst            int       // and CommandBurst
	sync                    chat.Sync // the history's, gotp's and bare-sqlite's
	addr, httpAddr          string
	data                    string
	timeout                 time.Duration
	cpuProfile, memProfile  string
	traceFile               string
	latencies               string
	allocProfile            string
	server                  string
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("chat-load", flag.ContinueOnError)
	var c config
	fs.IntVar(&c.users, "users", 1000, "connected users")
	fs.IntVar(&c.messages, "messages", 100, "messages each user sends (0: connect, measure the memory, and stop)")
	fs.IntVar(&c.window, "window", 1, "messages a user may have in flight (sent, SENT not yet read)")
	fs.Float64Var(&c.rate, "rate", 0, "messages/s offered by all users together, spread evenly (0: each user sends as fast as its window allows)")
	fs.IntVar(&c.ws, "ws", 0, "how many of the users connect over the WebSocket (gotp server only)")
	fs.IntVar(&c.flood, "flood", 0, "flooding clients beside the users: they pipeline -flood-cmd and read slowly (gotp server only)")
	fs.IntVar(&c.floodWS, "flood-ws", 0, "how many of the flooding clients connect over the WebSocket (the others over TCP)")
	fs.IntVar(&c.floodRead, "flood-read", 64<<10, "bytes per second each flooding client reads")
	fs.StringVar(&c.floodCmd, "flood-cmd", "WHO", "the command flooding clients repeat")
	fs.IntVar(&c.sendBuffer, "send-buffer", chat.DefaultSendBuffer, "the gotp server's socket send buffer per connection, bytes (negative: the kernel's autotuned default)")
	fs.Float64Var(&c.commandRate, "command-rate", chat.DefaultCommandRate, "the gotp server's flood control: units a second per connection beyond -command-burst (see chat.Config.CommandRate; negative: off)")
	fs.IntVar(&c.commandBurst, "command-burst", chat.DefaultCommandBurst, "the gotp server's flood control: units a connection may spend at once")
	fs.Func("history-sync", `when the history's commits reach the disk, for the gotp and bare-sqlite servers (and bare-sqlite-group): "full" (each flushed, the chat's default) or "normal" (flushed at checkpoints; see chat.Sync) (default full)`, func(v string) (err error) {
		c.sync, err = chat.ParseSync(v)
		return err
	})
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the server's CPU profile during the load to this file")
	fs.StringVar(&c.latencies, "latencies", "", "write each message's send time (ns from the load's start, given on a first line \"# start <Unix ns>\") and send→receive latency (ns), one pair a line, to this file")
	fs.StringVar(&c.traceFile, "trace", "", "write the server's execution trace during the load to this file (go tool trace)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write the server's heap profile, with the users connected and idle, to this file")
	fs.StringVar(&c.allocProfile, "allocprofile", "", "write the server's allocations profile (all allocations since it started, the load's included) after the load to this file")
	fs.StringVar(&c.server, "server", "gotp", `the in-process server: "gotp" (the chat service), or the baselines "bare" (plain Go, no history), "bare-sqlite" (plain Go, the same SQLite history, a transaction per message) and "bare-sqlite-group" (the same with group commit, one committer goroutine)`)
	fs.StringVar(&c.addr, "addr", "", "TCP address of a running chat (empty: start one in this process)")
	fs.StringVar(&c.httpAddr, "http-addr", "", "HTTP address of the running chat's WebSocket, with -addr and -ws")
	fs.StringVar(&c.data, "data", "", "data directory of the in-process chat (empty: a temporary one)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.users < 2 || c.messages < 0 || c.window < 1 || c.ws < 0 || c.ws > c.users || c.flood < 0 || c.floodWS < 0 || c.floodWS > c.flood || c.floodRead < 1 {
		return errors.New("need -users ≥ 2, -messages ≥ 0, -window ≥ 1, 0 ≤ -ws ≤ -users, -flood ≥ 0, 0 ≤ -flood-ws ≤ -flood, -flood-read ≥ 1")
	}
	if c.server != "gotp" && c.server != "bare" && c.server != "bare-sqlite" && c.server != "bare-sqlite-group" {
		return errBadServer
	}
	if c.server != "gotp" && (c.ws > 0 || c.flood > 0) {
		return errors.New("-ws and -flood need -server gotp")
	}
	if _, err := fdlimit.Raise(uint64(c.users + c.flood + 256)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if os.Getenv(childEnv) == "1" {
		return clientProcess(ctx, c, os.Stdin, out)
	}
	if c.addr != "" {
		return clientsOnly(ctx, c, out)
	}
	return serverAndClients(ctx, c, out)
}

// serverMem is the server's memory at one moment, after a GC.
type serverMem struct {
	heap, stack uint64 // HeapInuse, StackInuse
	rss         uint64 // VmRSS
	goroutines  int
}

func measure() serverMem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return serverMem{heap: ms.HeapInuse, stack: ms.StackInuse, rss: rss(), goroutines: runtime.NumGoroutine()}
}

// rss returns the resident set size of this process, or 0 where
// /proc/self/status is missing.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// rssPeak samples the resident set every 50 ms until stop is called, and
// returns the highest it saw.
func rssPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// serverAndClients runs the chat here and the clients in a child process.
func serverAndClients(ctx context.Context, c config, out io.Writer) error {
	dir := c.data
	if dir == "" {
		d, err := os.MkdirTemp("", "chat-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	srv, err := startServer(ctx, c.server, dir, c.users+c.flood+16, c)
	if err != nil {
		return err
	}
	defer srv.stop()

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{
		"-addr", srv.addr, "-http-addr", srv.httpAddr, "-users", strconv.Itoa(c.users), "-ws", strconv.Itoa(c.ws),
		"-messages", strconv.Itoa(c.messages), "-window", strconv.Itoa(c.window), "-rate", strconv.FormatFloat(c.rate, 'g', -1, 64),
		"-flood", strconv.Itoa(c.flood), "-flood-ws", strconv.Itoa(c.floodWS), "-flood-read", strconv.Itoa(c.floodRead), "-flood-cmd", c.floodCmd,
		"-timeout", c.timeout.String(), "-latencies", c.latencies,
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	before := measure()
	peak := rssPeak()
	if err := cmd.Start(); err != nil {
		peak()
		return err
	}
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) (string, error) {
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return rest, nil
			}
			fmt.Fprintln(out, lines.Text())
		}
		cmd.Wait()
		return "", fmt.Errorf("the client process ended before %q", prefix)
	}
	connected, err := next("CONNECTED ")
	if err != nil {
		peak()
		return err
	}
	after := measure()
	if c.memProfile != "" {
		if err := writeProfile(c.memProfile, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) }); err != nil {
			peak()
			return err
		}
	}
	// The CPU profile and the execution trace record the load; stopRec
	// stops those started and closes their files.
	stopRec := func() {}
	for _, r := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{{c.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile}, {c.traceFile, trace.Start, trace.Stop}} {
		if r.path == "" {
			continue
		}
		f, err := os.Create(r.path)
		if err == nil {
			if err = r.start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			stopRec()
			peak()
			return err
		}
		prev := stopRec
		stopRec = func() { prev(); r.stop(); f.Close() }
	}
	if _, err := io.WriteString(stdin, "GO\n"); err != nil {
		stopRec()
		peak()
		return err
	}
	// The server's figures end with the load's last message (LOADED),
	// before the users disconnect: the teardown is not the load's.
	cpuBefore, rtBefore := cpuTime(), readRuntime()
	_, err = next("LOADED")
	serverCPU, rtAfter := cpuTime()-cpuBefore, readRuntime()
	stopRec()
	var result string
	if err == nil {
		result, err = next("RESULT ")
	}
	peakRSS := peak()
	if err != nil {
		return err
	}
	if c.allocProfile != "" {
		if err := writeProfile(c.allocProfile, func(w io.Writer) error { return pprof.Lookup("allocs").WriteTo(w, 0) }); err != nil {
			return err
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("client process: %w", err)
	}
	loaded := measure()
	report(out, c, connected, result)
	if clientCPU, msgs := cpuOfResult(result); msgs > 0 {
		fmt.Fprintf(out, "CPU per message: server %.1f µs, clients %.1f µs (user+system, over the load)\n",
			float64(serverCPU.Microseconds())/float64(msgs), float64(clientCPU.Microseconds())/float64(msgs))
	}
	if _, msgs := cpuOfResult(result); msgs > 0 {
		reportRuntime(out, rtBefore, rtAfter, msgs)
	}
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(c.users+c.flood) }
	fmt.Fprintf(out, "server bytes per connection: %.0f heap+stack (heap %.0f, stack %.0f), %.0f RSS; goroutines +%.2f per connection\n",
		per(before.heap+before.stack, after.heap+after.stack), per(before.heap, after.heap), per(before.stack, after.stack),
		per(before.rss, after.rss), float64(after.goroutines-before.goroutines)/float64(c.users+c.flood))
	fmt.Fprintf(out, "server heap+stack: %.1f MB before, %.1f MB with %d connections idle, %.1f MB after the load (users gone); RSS %.1f / %.1f / %.1f MB\n",
		mb(before.heap+before.stack), mb(after.heap+after.stack), c.users+c.flood, mb(loaded.heap+loaded.stack), mb(before.rss), mb(after.rss), mb(loaded.rss))
	fmt.Fprintf(out, "server RSS peak: %.1f MB (sampled every 50 ms from the first connection to the last message)\n", mb(peakRSS))
	if srv.slow != nil {
		fmt.Fprintf(out, "server: %d slow consumers disconnected, %d commands held back by -command-rate %g units/s (burst %d)\n", srv.slow(), srv.throttled(), c.commandRate, c.commandBurst)
	}
	return nil
}

// server is a server under test, on loopback.
type server struct {
	addr, httpAddr string // httpAddr is empty for the bare servers
	stop           func()
	slow           func() uint64 // slow consumers disconnected, for gotp
	throttled      func() uint64 // commands that waited for the flood control, for gotp
}

// startServer starts the server under test for up to conns connections;
// c's sendBuffer, commandRate and commandBurst are the gotp server's.
func startServer(ctx context.Context, kind, dir string, conns int, c config) (*server, error) {
	switch kind {
	case "bare", "bare-sqlite", "bare-sqlite-group":
		s, err := startBare(ctx, dir, kind != "bare", c.sync, kind == "bare-sqlite-group")
		if err != nil {
			return nil, err
		}
		return &server{addr: s.addr(), stop: func() { s.stop() }}, nil
	}
	n := gotp.NewNode(gotp.Options{Name: "chat-load", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	svc, err := chat.Start(ctx, n, chat.Config{DataDir: dir, HistorySync: c.sync, TCPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", MaxConnections: conns, SendBuffer: c.sendBuffer,
		CommandRate: c.commandRate, CommandBurst: c.commandBurst})
	if err != nil {
		n.Stop(context.Background())
		return nil, err
	}
	return &server{
		addr:     svc.TCPAddr().String(),
		httpAddr: svc.HTTPAddr().String(),
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			svc.Stop(ctx)
			n.Stop(ctx)
		},
		slow:      svc.SlowConsumers,
		throttled: svc.ThrottledCommands,
	}, nil
}

func writeProfile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// clientsOnly runs the clients here, against c.addr.
func clientsOnly(ctx context.Context, c config, out io.Writer) error {
	l, err := newLoad(ctx, c)
	if err != nil {
		return err
	}
	defer l.close()
	res, err := l.run(ctx)
	if err != nil {
		return err
	}
	report(out, c, l.connectLine(), res)
	return nil
}

// clientProcess is the child: connect, say so, wait for GO, run, report.
func clientProcess(ctx context.Context, c config, in io.Reader, out io.Writer) error {
	l, err := newLoad(ctx, c)
	if err != nil {
		return err
	}
	defer l.close()
	fmt.Fprintf(out, "CONNECTED %s\n", l.connectLine())
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for GO: %w", err)
	}
	before := cpuTime()
	var cpu time.Duration
	l.loaded = func() {
		cpu = cpuTime() - before
		fmt.Fprintf(out, "LOADED\n")
	}
	res, err := l.run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "RESULT %s %d\n", res, cpu.Nanoseconds())
	return nil
}

// report prints the client's figures: connected is "<users> <seconds>",
// result is "<messages> <seconds> <p50 ns> <p99 ns> <max ns> <flood
// replies> <flood bytes> <flood ended>".
func report(out io.Writer, c config, connected, result string) {
	var users int
	var connSecs float64
	fmt.Sscan(connected, &users, &connSecs)
	var msgs int
	var secs float64
	var p50, p99, pmax, floodReplies, floodBytes, floodEnded int64
	fmt.Sscan(result, &msgs, &secs, &p50, &p99, &pmax, &floodReplies, &floodBytes, &floodEnded)
	offered := "as fast as the window allows"
	if c.rate > 0 {
		offered = fmt.Sprintf("offered %.0f messages/s", c.rate)
	}
	server := c.server
	if c.addr != "" {
		server = c.addr
	}
	fmt.Fprintf(out, "H1 chat load: server %s, %d users (%d TCP, %d WebSocket) × %d messages, window %d, %s, %d flooding clients, GOMAXPROCS %d\n",
		server, c.users, c.users-c.ws, c.ws, c.messages, c.window, offered, c.flood, runtime.GOMAXPROCS(0))
	if c.server == "gotp" && c.addr == "" {
		fmt.Fprintf(out, "server send buffer: %d B per connection (negative: the kernel's autotuned default)\n", c.sendBuffer)
	}
	fmt.Fprintf(out, "connect: %d users in %.2f s\n", users, connSecs)
	if c.messages == 0 {
		return
	}
	fmt.Fprintf(out, "messages: %d in %.2f s = %.0f messages/s\n", msgs, secs, float64(msgs)/secs)
	fmt.Fprintf(out, "send→receive latency: p50 %s, p99 %s, max %s\n",
		time.Duration(p50).Round(time.Microsecond), time.Duration(p99).Round(time.Microsecond), time.Duration(pmax).Round(time.Microsecond))
	if c.flood > 0 {
		fmt.Fprintf(out, "flooding clients (%d TCP, %d WebSocket): %d replies (%.1f MB) read at %d B/s each; %d of %d disconnected by the server\n",
			c.flood-c.floodWS, c.floodWS, floodReplies, mb(uint64(floodBytes)), c.floodRead, floodEnded, c.flood)
	}
}

// load is the client side: one connection per user, and the flooders.
type load struct {
	c        config
	users    []*user
	floods   []*flooder
	connTook time.Duration
	loaded   func() // if set, called once the last message has arrived, before the users disconnect
}

// wire is a user's connection: the line protocol or JSON over a WebSocket.
type wire interface {
	send(text string) error                   // one command
	next() (kind byte, arg string, err error) // the next reply: 'o' OK, 's' SENT, 'm' MSG (arg: its text), 'e' anything else (arg: it)
	close()
}

type user struct {
	id   int
	name string
	w    wire
	to   string

	window    chan struct{} // a token per message in flight
	lat       []int64       // latencies of the messages received, ns
	at        []int64       // with -latencies: their send times, ns since the Unix epoch
	errs      []string      // ERROR lines, unexpected lines
	received  chan struct{} // closed when all messages arrived
	readerEnd chan struct{} // closed when the reader goroutine has returned
}

func userName(i int) string { return fmt.Sprintf("u%05d", i) }

func newLoad(ctx context.Context, c config) (*load, error) {
	l := &load{c: c}
	start := time.Now()
	var d net.Dialer
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: -1}}
	// Connect in parallel, 64 at a time.
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	l.users = make([]*user, c.users)
	for i := range c.users {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			u, err := connectUser(ctx, &d, hc, c, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp(firstErr, err)
				return
			}
			l.users[i] = u
		})
	}
	wg.Wait()
	if firstErr == nil {
		for i := range c.flood {
			f, err := connectFlooder(ctx, &d, c, i)
			if err != nil {
				firstErr = err
				break
			}
			l.floods = append(l.floods, f)
		}
	}
	l.connTook = time.Since(start)
	if firstErr != nil {
		l.close()
		return nil, firstErr
	}
	return l, nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func connectUser(ctx context.Context, d *net.Dialer, hc *http.Client, c config, i int) (*user, error) {
	u := &user{
		id: i, name: userName(i), to: userName((i + 1) % c.users),
		window: make(chan struct{}, c.window), lat: make([]int64, 0, c.messages),
		received: make(chan struct{}), readerEnd: make(chan struct{}),
	}
	if c.latencies != "" {
		u.at = make([]int64, 0, c.messages)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	if i < c.ws {
		u.w, err = dialWS(cctx, hc, c.httpAddr)
	} else {
		u.w, err = dialLine(cctx, d, c.addr)
	}
	if err != nil {
		return nil, err
	}
	if err := u.w.send("CONNECT " + u.name); err != nil {
		u.w.close()
		return nil, err
	}
	if kind, arg, err := u.w.next(); err != nil || kind != 'o' {
		u.w.close()
		return nil, fmt.Errorf("CONNECT %s: %q %v", u.name, arg, err)
	}
	return u, nil
}

// lineWire is the TCP line protocol.
type lineWire struct {
	c  net.Conn
	rd *bufio.Reader
	bw *bufio.Writer
}

func dialLine(ctx context.Context, d *net.Dialer, addr string) (*lineWire, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &lineWire{c: c, rd: bufio.NewReader(c), bw: bufio.NewWriter(c)}, nil
}

func (w *lineWire) send(text string) error {
	w.bw.WriteString(text)
	w.bw.WriteByte('\n')
	return w.bw.Flush()
}

func (w *lineWire) next() (byte, string, error) {
	line, err := w.rd.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	line = strings.TrimSuffix(line, "\n")
	switch {
	case line == "OK":
		return 'o', "", nil
	case strings.HasPrefix(line, "SENT "):
		return 's', "", nil
	case strings.HasPrefix(line, "MSG "):
		_, text, _ := strings.Cut(line[4:], " ") // MSG <from> <text>
		return 'm', text, nil
	}
	return 'e', line, nil
}

func (w *lineWire) close() { w.c.Close() }

// wsWire is JSON over the WebSocket.
type wsWire struct {
	c *websocket.Conn
}

func dialWS(ctx context.Context, hc *http.Client, addr string) (*wsWire, error) {
	if addr == "" {
		return nil, errors.New("-ws needs the chat's HTTP address (-http-addr)")
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	return &wsWire{c: c}, nil
}

func (w *wsWire) send(text string) error {
	verb, rest, _ := strings.Cut(text, " ")
	var cmd map[string]string
	switch verb {
	case "CONNECT":
		cmd = map[string]string{"cmd": "connect", "name": rest}
	case "SEND":
		to, msg, _ := strings.Cut(rest, " ")
		cmd = map[string]string{"cmd": "send", "to": to, "text": msg}
	default:
		cmd = map[string]string{"cmd": strings.ToLower(verb)}
	}
	b, _ := json.Marshal(cmd)
	return w.c.Write(context.Background(), websocket.MessageText, b)
}

func (w *wsWire) next() (byte, string, error) {
	_, data, err := w.c.Read(context.Background())
	if err != nil {
		return 0, "", err
	}
	var r struct{ Type, Text, Reason string }
	if err := json.Unmarshal(data, &r); err != nil {
		return 'e', string(data), nil
	}
	switch r.Type {
	case "ok":
		return 'o', "", nil
	case "sent":
		return 's', "", nil
	case "msg":
		return 'm', r.Text, nil
	}
	return 'e', string(data), nil
}

func (w *wsWire) close() { w.c.CloseNow() }

func (l *load) connectLine() string {
	return fmt.Sprintf("%d %.3f", len(l.users), l.connTook.Seconds())
}

func (l *load) close() {
	for _, u := range l.users {
		if u != nil {
			u.w.close()
		}
	}
	for _, f := range l.floods {
		f.close()
	}
}

// read is the reader goroutine of u: SENT frees a window slot, MSG is a
// delivery whose latency it records.
func (u *user) read(expect int) {
	defer close(u.readerEnd)
	for {
		kind, arg, err := u.w.next()
		if err != nil {
			if len(u.lat) < expect {
				u.errs = append(u.errs, "read: "+err.Error())
			}
			return
		}
		now := time.Now().UnixNano()
		switch kind {
		case 's':
			<-u.window
		case 'm':
			f := strings.Fields(arg) // <seq> <sent at>
			if len(f) != 2 {
				u.errs = append(u.errs, arg)
				continue
			}
			at, _ := strconv.ParseInt(f[1], 10, 64)
			u.lat = append(u.lat, now-at)
			if u.at != nil {
				u.at = append(u.at, at)
			}
			if len(u.lat) == expect {
				close(u.received)
			}
		default:
			u.errs = append(u.errs, arg)
			select {
			case <-u.window: // an ERROR is the reply: the slot is free
			default:
			}
		}
	}
}

// send sends u's messages, the first not before start+offset; with
// every > 0, the k-th one not before start+offset+k·every.
func (u *user) send(ctx context.Context, messages int, start time.Time, offset, every time.Duration) error {
	for k := range messages {
		if every > 0 || k == 0 {
			if d := time.Until(start.Add(offset + time.Duration(k)*every)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			}
		}
		select {
		case u.window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := u.w.send(fmt.Sprintf("SEND %s %d %d", u.to, k, time.Now().UnixNano())); err != nil {
			return err
		}
	}
	return nil
}

// flooder is a client that pipelines one command without waiting for the
// replies, and reads them slowly, over TCP or (ws) the WebSocket. A
// WebSocket flooder speaks the protocol on the raw connection, so that it
// can write many frames at a time as the TCP one writes many lines, and
// read the server's frames at a byte rate.
type flooder struct {
	c       net.Conn
	ws      bool
	frames  frameCounter // ws: the replies read so far
	replies atomic.Int64
	bytes   atomic.Int64
	ended   atomic.Bool // the server closed the connection
}

func (f *flooder) close() { f.c.Close() }

func connectFlooder(ctx context.Context, d *net.Dialer, c config, i int) (*flooder, error) {
	ws := i < c.floodWS
	addr := c.addr
	if ws {
		addr = c.httpAddr
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &flooder{c: conn, ws: ws}
	rd := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var line string
	if ws {
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: Z290cC1jaGF0LWxvYWQhIQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			conn.Close()
			return nil, fmt.Errorf("flooder %d: WebSocket upgrade: %v %v", i, resp, err)
		}
		conn.Write(wsFrame(fmt.Sprintf(`{"cmd":"connect","name":"flood%03d"}`, i)))
		line, err = readWSFrame(rd)
		if err == nil && !strings.Contains(line, `"ok"`) {
			err = errors.New("not ok")
		}
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("flooder %d: %q %v", i, line, err)
		}
	} else {
		fmt.Fprintf(conn, "CONNECT flood%03d\n", i)
		if line, err = rd.ReadString('\n'); err != nil || line != "OK\n" {
			conn.Close()
			return nil, fmt.Errorf("flooder %d: %q %v", i, line, err)
		}
	}
	if rd.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Errorf("flooder %d: unexpected bytes after the connect", i)
	}
	conn.SetDeadline(time.Time{})
	return f, nil
}

// wsFrame is a client's text frame carrying payload (under 126 bytes),
// masked with a zero key (a valid key that leaves the payload as it is).
func wsFrame(payload string) []byte {
	return append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

// readWSFrame reads one unmasked frame of the server's and returns its
// payload.
func readWSFrame(rd *bufio.Reader) (string, error) {
	var h [2]byte
	if _, err := io.ReadFull(rd, h[:]); err != nil {
		return "", err
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126, 127:
		ext := make([]byte, 2+6*(n-126))
		if _, err := io.ReadFull(rd, ext); err != nil {
			return "", err
		}
		n = 0
		for _, b := range ext {
			n = n<<8 | int(b)
		}
	}
	b := make([]byte, n)
	_, err := io.ReadFull(rd, b)
	return string(b), err
}

// frameCounter counts the server's data frames in a stream of its bytes
// fed in pieces of any size.
type frameCounter struct {
	head []byte // the header of the next frame, so far
	left int    // bytes of the current frame's payload not yet seen
}

// feed takes the next bytes of the stream and returns how many data frames
// ended in them.
func (fc *frameCounter) feed(b []byte) (frames int) {
	for len(b) > 0 {
		if fc.left > 0 {
			k := min(fc.left, len(b))
			fc.left -= k
			b = b[k:]
			continue
		}
		fc.head = append(fc.head, b[0])
		b = b[1:]
		if len(fc.head) < 2 {
			continue
		}
		need := 2
		switch fc.head[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if len(fc.head) < need {
			continue
		}
		n := int(fc.head[1] & 0x7f)
		if n >= 126 {
			n = 0
			for _, x := range fc.head[2:need] {
				n = n<<8 | int(x)
			}
		}
		if fc.head[0]&0x08 == 0 { // a data frame, not a control frame
			frames++
		}
		fc.head, fc.left = fc.head[:0], n
	}
	return frames
}

// run floods until stop is closed: one goroutine writes cmd over and over,
// the other reads at rate bytes/s.
func (f *flooder) run(cmd string, rate int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		one := []byte(cmd + "\n")
		if f.ws {
			one = wsFrame(fmt.Sprintf(`{"cmd":%q}`, strings.ToLower(cmd)))
		}
		chunk := bytes.Repeat(one, max(1, 4096/len(one)))
		for {
			if _, err := f.c.Write(chunk); err != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	wg.Go(func() {
		buf := make([]byte, min(4096, rate))
		tick := time.Duration(float64(time.Second) * float64(len(buf)) / float64(rate))
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			n, err := f.c.Read(buf)
			f.bytes.Add(int64(n))
			if f.ws {
				f.replies.Add(int64(f.frames.feed(buf[:n])))
			} else {
				f.replies.Add(int64(bytes.Count(buf[:n], []byte{'\n'})))
			}
			if err != nil {
				select {
				case <-stop:
				default:
					f.ended.Store(true)
				}
				return
			}
		}
	})
	return wg.Wait
}

// run sends every message and waits for every delivery; the result is
// "<messages> <seconds> <p50 ns> <p99 ns> <max ns> <flood replies> <flood
// bytes> <floods ended>".
func (l *load) run(ctx context.Context) (string, error) {
	m := l.c.messages
	if m == 0 {
		if l.loaded != nil {
			l.loaded()
		}
		return "0 0 0 0 0 0 0 0", nil
	}
	stopFlood := make(chan struct{})
	var floodWaits []func()
	for _, f := range l.floods {
		floodWaits = append(floodWaits, f.run(l.c.floodCmd, l.c.floodRead, stopFlood))
	}
	endFlood := func() (replies, bytes, ended int64) {
		close(stopFlood)
		for _, f := range l.floods {
			f.close()
		}
		for _, w := range floodWaits {
			w()
		}
		for _, f := range l.floods {
			replies += f.replies.Load()
			bytes += f.bytes.Load()
			if f.ended.Load() {
				ended++
			}
		}
		return
	}
	for _, u := range l.users {
		go u.read(m)
	}
	// The clock starts a little after the senders are launched, so that
	// launching them (a few ms for a thousand) is not inside the load:
	// every sender waits for its first turn from the same start.
	start := time.Now().Add(startDelay)
	var every time.Duration // each user's interval between two sends
	if l.c.rate > 0 {
		every = time.Duration(float64(len(l.users)) / l.c.rate * float64(time.Second))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(l.users))
	for i, u := range l.users {
		offset := every * time.Duration(i) / time.Duration(len(l.users)) // spread the users over one interval
		wg.Go(func() {
			if err := u.send(ctx, m, start, offset, every); err != nil {
				errs <- fmt.Errorf("%s: %w", u.name, err)
			}
		})
	}
	for _, u := range l.users {
		select {
		case <-u.received:
		case <-ctx.Done():
			endFlood()
			return "", fmt.Errorf("%s did not receive its %d messages: %w", u.name, m, ctx.Err())
		case <-u.readerEnd:
			endFlood()
			return "", fmt.Errorf("%s: connection ended after %d of %d messages: %q", u.name, len(u.lat), m, u.errs)
		}
	}
	took := time.Since(start)
	if l.loaded != nil {
		l.loaded()
	}
	floodReplies, floodBytes, floodEnded := endFlood()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	// Every SENT has arrived once every MSG has? Not necessarily: wait for
	// the windows to drain, then stop the readers.
	for _, u := range l.users {
		for range l.c.window {
			select {
			case u.window <- struct{}{}:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	l.close()
	var all []int64
	for _, u := range l.users {
		<-u.readerEnd
		if len(u.errs) > 0 && !(len(u.errs) == 1 && strings.HasPrefix(u.errs[0], "read:")) {
			return "", fmt.Errorf("%s: unexpected lines %q", u.name, u.errs)
		}
		all = append(all, u.lat...)
	}
	if l.c.latencies != "" {
		if err := l.writeLatencies(start); err != nil {
			return "", err
		}
	}
	slices.Sort(all)
	q := func(p float64) int64 { return all[min(len(all)-1, int(p*float64(len(all))))] }
	return fmt.Sprintf("%d %.3f %d %d %d %d %d %d", len(all), took.Seconds(), q(0.50), q(0.99), all[len(all)-1],
		floodReplies, floodBytes, floodEnded), nil
}

// writeLatencies writes the -latencies file: a first line "# start <ns>"
// (start in ns since the Unix epoch), then every message's send time, in
// ns from start, and its latency, in ns, one message a line.
func (l *load) writeLatencies(start time.Time) error {
	f, err := os.Create(l.c.latencies)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# start %d\n", start.UnixNano())
	for _, u := range l.users {
		for i, d := range u.lat {
			fmt.Fprintf(w, "%d %d\n", u.at[i]-start.UnixNano(), d)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startDelay is how long after its senders are launched a load starts.
const startDelay = 50 * time.Millisecond

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOfResult reads the client process's CPU during the load, the last
// field of a RESULT line from a client process, and the messages.
func cpuOfResult(result string) (time.Duration, int) {
	f := strings.Fields(result)
	if len(f) < 9 {
		return 0, 0
	}
	ns, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
	msgs, _ := strconv.Atoi(f[0])
	return time.Duration(ns), msgs
}
