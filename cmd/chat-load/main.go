// Command chat-load is the H1 workload of gotp's benchmarks: many users
// connected to one chat service over TCP, each sending messages to another
// user. It reports messages per second, the send-to-receive latency
// (p50, p99, max) and the server's bytes per connection.
//
//	go run ./cmd/chat-load                              # 1,000 users × 100 messages
//	go run ./cmd/chat-load -users 200 -messages 50      # smaller
//	go run ./cmd/chat-load -addr host:4000              # against a running cmd/chat (no memory figures)
//
// Without -addr it starts a chat.Service in this process (TCP on loopback,
// history in a temporary directory) and runs the clients in a child
// process (itself, re-executed), so that the memory it measures is the
// server's alone: the heap and stack in use (after a GC) and the resident
// set, before the users connect and once they all have, divided by the
// number of users.
//
// User i sends to user i+1 (the last to the first). Each sender keeps at
// most -window messages in flight: it sends the next when SENT arrives for
// an earlier one. The latency of a message runs from just before its SEND is
// written to when its MSG line is read by the recipient (both in the client
// process, one clock). Messages/s counts messages received over the time
// from the start of sending to the last receipt.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/examples/chat"
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
	addr                    string
	data                    string
	timeout                 time.Duration
	cpuProfile, memProfile  string
	server                  string
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("chat-load", flag.ContinueOnError)
	var c config
	fs.IntVar(&c.users, "users", 1000, "connected users")
	fs.IntVar(&c.messages, "messages", 100, "messages each user sends")
	fs.IntVar(&c.window, "window", 1, "messages a user may have in flight (sent, SENT not yet read)")
	fs.Float64Var(&c.rate, "rate", 0, "messages/s offered by all users together, spread evenly (0: each user sends as fast as its window allows)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the server's CPU profile during the load to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write the server's heap profile, with the users connected and idle, to this file")
	fs.StringVar(&c.server, "server", "gotp", `the in-process server: "gotp" (the chat service), or the baselines "bare" (plain Go, no history) and "bare-sqlite" (plain Go, the same SQLite history)`)
	fs.StringVar(&c.addr, "addr", "", "TCP address of a running chat (empty: start one in this process)")
	fs.StringVar(&c.data, "data", "", "data directory of the in-process chat (empty: a temporary one)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.users < 2 || c.messages < 1 || c.window < 1 {
		return errors.New("need -users ≥ 2, -messages ≥ 1, -window ≥ 1")
	}
	if c.server != "gotp" && c.server != "bare" && c.server != "bare-sqlite" {
		return errBadServer
	}
	if err := raiseOpenFiles(c.users + 256); err != nil {
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

// raiseOpenFiles raises the soft limit of open files to at least n (up to
// the hard limit).
func raiseOpenFiles(n int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur >= uint64(n) {
		return nil
	}
	if l.Max < uint64(n) {
		return fmt.Errorf("open files: need %d, hard limit is %d (raise it with ulimit -Hn)", n, l.Max)
	}
	l.Cur = uint64(n)
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
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
	addr, stop, err := startServer(ctx, c.server, dir)
	if err != nil {
		return err
	}
	defer stop()

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe,
		"-addr", addr, "-users", strconv.Itoa(c.users),
		"-messages", strconv.Itoa(c.messages), "-window", strconv.Itoa(c.window), "-rate", strconv.FormatFloat(c.rate, 'g', -1, 64),
		"-timeout", c.timeout.String())
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
	if err := cmd.Start(); err != nil {
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
		return err
	}
	after := measure()
	if c.memProfile != "" {
		if err := writeProfile(c.memProfile, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) }); err != nil {
			return err
		}
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(stdin, "GO\n"); err != nil {
		return err
	}
	result, err := next("RESULT ")
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("client process: %w", err)
	}
	loaded := measure()
	report(out, c, connected, result)
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(c.users) }
	fmt.Fprintf(out, "server bytes per connection: %.0f heap+stack (heap %.0f, stack %.0f), %.0f RSS; goroutines +%.2f per connection\n",
		per(before.heap+before.stack, after.heap+after.stack), per(before.heap, after.heap), per(before.stack, after.stack),
		per(before.rss, after.rss), float64(after.goroutines-before.goroutines)/float64(c.users))
	fmt.Fprintf(out, "server heap+stack: %.1f MB before, %.1f MB with %d users idle, %.1f MB after the load (users gone); RSS %.1f / %.1f / %.1f MB\n",
		mb(before.heap+before.stack), mb(after.heap+after.stack), c.users, mb(loaded.heap+loaded.stack), mb(before.rss), mb(after.rss), mb(loaded.rss))
	return nil
}

// startServer starts the server under test on a loopback port and returns
// its address and how to stop it.
func startServer(ctx context.Context, kind, dir string) (string, func(), error) {
	switch kind {
	case "bare", "bare-sqlite":
		s, err := startBare(ctx, dir, kind == "bare-sqlite")
		if err != nil {
			return "", nil, err
		}
		return s.addr(), func() { s.stop() }, nil
	}
	n := gotp.NewNode(gotp.Options{Name: "chat-load", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	svc, err := chat.Start(ctx, n, chat.Config{DataDir: dir, TCPAddr: "127.0.0.1:0"})
	if err != nil {
		n.Stop(context.Background())
		return "", nil, err
	}
	return svc.TCPAddr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		svc.Stop(ctx)
		n.Stop(ctx)
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
	res, err := l.run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "RESULT %s\n", res)
	return nil
}

// report prints the client's figures: connected is "<users> <seconds>",
// result is "<messages> <seconds> <p50 ns> <p99 ns> <max ns>".
func report(out io.Writer, c config, connected, result string) {
	var users int
	var connSecs float64
	fmt.Sscan(connected, &users, &connSecs)
	var msgs int
	var secs float64
	var p50, p99, pmax int64
	fmt.Sscan(result, &msgs, &secs, &p50, &p99, &pmax)
	offered := "as fast as the window allows"
	if c.rate > 0 {
		offered = fmt.Sprintf("offered %.0f messages/s", c.rate)
	}
	server := c.server
	if c.addr != "" {
		server = c.addr
	}
	fmt.Fprintf(out, "H1 chat load: server %s, %d users × %d messages, window %d, %s, GOMAXPROCS %d\n", server, c.users, c.messages, c.window, offered, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "connect: %d users in %.2f s\n", users, connSecs)
	fmt.Fprintf(out, "messages: %d in %.2f s = %.0f messages/s\n", msgs, secs, float64(msgs)/secs)
	fmt.Fprintf(out, "send→receive latency: p50 %s, p99 %s, max %s\n",
		time.Duration(p50).Round(time.Microsecond), time.Duration(p99).Round(time.Microsecond), time.Duration(pmax).Round(time.Microsecond))
}

// load is the client side: one TCP connection per user.
type load struct {
	c        config
	users    []*user
	connTook time.Duration
}

type user struct {
	id   int
	name string
	conn net.Conn
	rd   *bufio.Reader
	to   string

	window    chan struct{} // a token per message in flight
	lat       []int64       // latencies of the messages received, ns
	errs      []string      // ERROR lines, unexpected lines
	received  chan struct{} // closed when all messages arrived
	readerEnd chan struct{} // closed when the reader goroutine has returned
}

func userName(i int) string { return fmt.Sprintf("u%05d", i) }

func newLoad(ctx context.Context, c config) (*load, error) {
	l := &load{c: c}
	start := time.Now()
	var d net.Dialer
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
			u, err := connectUser(ctx, &d, c, i)
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

func connectUser(ctx context.Context, d *net.Dialer, c config, i int) (*user, error) {
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	u := &user{
		id: i, name: userName(i), conn: conn, rd: bufio.NewReader(conn), to: userName((i + 1) % c.users),
		window: make(chan struct{}, c.window), lat: make([]int64, 0, c.messages),
		received: make(chan struct{}), readerEnd: make(chan struct{}),
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("CONNECT " + u.name + "\n")); err != nil {
		conn.Close()
		return nil, err
	}
	line, err := u.rd.ReadString('\n')
	if err != nil || line != "OK\n" {
		conn.Close()
		return nil, fmt.Errorf("CONNECT %s: %q %v", u.name, line, err)
	}
	conn.SetDeadline(time.Time{})
	return u, nil
}

func (l *load) connectLine() string {
	return fmt.Sprintf("%d %.3f", len(l.users), l.connTook.Seconds())
}

func (l *load) close() {
	for _, u := range l.users {
		if u != nil {
			u.conn.Close()
		}
	}
}

// read is the reader goroutine of u: SENT frees a window slot, MSG is a
// delivery whose latency it records.
func (u *user) read(expect int) {
	defer close(u.readerEnd)
	for {
		line, err := u.rd.ReadString('\n')
		if err != nil {
			if len(u.lat) < expect {
				u.errs = append(u.errs, "read: "+err.Error())
			}
			return
		}
		now := time.Now().UnixNano()
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "SENT "):
			<-u.window
		case strings.HasPrefix(line, "MSG "):
			f := strings.Fields(line) // MSG <from> <seq> <sent at>
			if len(f) != 4 {
				u.errs = append(u.errs, line)
				continue
			}
			at, _ := strconv.ParseInt(f[3], 10, 64)
			u.lat = append(u.lat, now-at)
			if len(u.lat) == expect {
				close(u.received)
			}
		default:
			u.errs = append(u.errs, line)
			select {
			case <-u.window: // an ERROR is the reply: the slot is free
			default:
			}
		}
	}
}

// send sends u's messages; with every > 0, the k-th one not before
// start+offset+k·every.
func (u *user) send(ctx context.Context, messages int, start time.Time, offset, every time.Duration) error {
	w := bufio.NewWriter(u.conn)
	for k := range messages {
		if every > 0 {
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
		fmt.Fprintf(w, "SEND %s %d %d\n", u.to, k, time.Now().UnixNano())
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// run sends every message and waits for every delivery; the result is
// "<messages> <seconds> <p50 ns> <p99 ns> <max ns>".
func (l *load) run(ctx context.Context) (string, error) {
	m := l.c.messages
	for _, u := range l.users {
		go u.read(m)
	}
	start := time.Now()
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
			return "", fmt.Errorf("%s did not receive its %d messages: %w", u.name, m, ctx.Err())
		case <-u.readerEnd:
			return "", fmt.Errorf("%s: connection ended after %d of %d messages: %q", u.name, len(u.lat), m, u.errs)
		}
	}
	took := time.Since(start)
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
	slices.Sort(all)
	q := func(p float64) int64 { return all[min(len(all)-1, int(p*float64(len(all))))] }
	return fmt.Sprintf("%d %.3f %d %d %d", len(all), took.Seconds(), q(0.50), q(0.99), all[len(all)-1]), nil
}
