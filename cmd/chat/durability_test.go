package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// SENT means on disk, under group commit too: users send pipelined
// messages (so that many wait for one transaction), the program is killed
// with SIGKILL while they are still sending, and after a restart on the
// same data every message that got its SENT is in the history, in order.
func TestProgramSentSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	p := startProgram(t, "-data", dir)
	const users, each = 6, 400
	var mu sync.Mutex
	sent := make([][]int, users) // the message numbers acknowledged, per user
	clients := make([]*lineClient, users)
	for i := range clients {
		clients[i] = dialLine(t, p.tcp)
		clients[i].expect(fmt.Sprintf("CONNECT k%d", i), "OK")
	}
	var wg sync.WaitGroup
	enough := make(chan struct{})
	var once sync.Once
	for i, c := range clients {
		to := fmt.Sprintf("k%d", (i+1)%users)
		wg.Go(func() {
			var b bytes.Buffer
			for k := range each {
				fmt.Fprintf(&b, "SEND %s m%d\n", to, k)
			}
			go c.c.Write(b.Bytes()) // the kill ends it
			rd := bufio.NewReader(c.c)
			k := 0
			for {
				l, err := rd.ReadString('\n')
				if err != nil {
					return // killed
				}
				if l == "SENT "+to+"\n" {
					mu.Lock()
					sent[i] = append(sent[i], k)
					total := 0
					for _, s := range sent {
						total += len(s)
					}
					mu.Unlock()
					k++
					if total >= users*each/4 {
						once.Do(func() { close(enough) })
					}
				}
			}
		})
	}
	<-enough
	p.signal(syscall.SIGKILL)
	p.exit()
	wg.Wait()

	p2 := startProgram(t, "-data", dir)
	for i := range users {
		c := dialLine(t, p2.tcp)
		c.expect(fmt.Sprintf("CONNECT k%d", i), "OK")
		to := fmt.Sprintf("k%d", (i+1)%users)
		c.c.Write([]byte("HISTORY " + to + "\n"))
		head := c.line()
		var n int
		if _, err := fmt.Sscanf(head, "HISTORY %d", &n); err != nil {
			t.Fatalf("history header %q", head)
		}
		var mine []string
		for range n {
			if l := c.line(); strings.HasPrefix(l, fmt.Sprintf("k%d ", i)) {
				mine = append(mine, strings.TrimPrefix(l, fmt.Sprintf("k%d ", i)))
			}
		}
		mu.Lock()
		acked := sent[i]
		mu.Unlock()
		if len(mine) < len(acked) {
			t.Fatalf("k%d had %d messages acknowledged with SENT, the history after the kill holds %d", i, len(acked), len(mine))
		}
		for j := range acked {
			if mine[j] != fmt.Sprintf("m%d", j) {
				t.Fatalf("k%d: history message %d is %q, want m%d", i, j, mine[j], j)
			}
		}
		c.c.Close()
	}
}

// SENT means on disk: the program, under strace, writes each message's
// SENT only after the message's page went to SQLite's write-ahead log and
// that file was flushed (fsync). With -history-sync normal the writer never
// flushes the log, and no SENT follows a flush: the check can tell the two
// apart. Skipped where strace is missing or cannot trace.
func TestProgramSentAfterFlush(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("no strace")
	}
	if err := exec.Command("strace", "-o", os.DevNull, "true").Run(); err != nil {
		t.Skipf("strace cannot trace here: %v", err)
	}
	for _, mode := range []string{"full", "normal"} {
		t.Run(mode, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace")
			// -s 8192: a page written whole, so that its messages' texts show.
			p := launchWith(t, nil, []string{"strace", "-f", "-qq", "-s", "8192", "-o", trace, "-e", "trace=pwrite64,fsync,fdatasync,write,writev"},
				"-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-data", t.TempDir(), "-history-sync", mode)
			p.tcp = p.waitLog(`msg="chat: line protocol listening" tcp=(\S+)`)[1]
			// The traced program is strace's child. Stop it, not strace,
			// which would detach and leave it running; strace ends with it.
			child := childOf(t, p.cmd.Process.Pid)
			exited := false // then its pid may be another process's
			t.Cleanup(func() {
				if !exited {
					syscall.Kill(child, syscall.SIGKILL)
				}
			})
			a, b := dialLine(t, p.tcp), dialLine(t, p.tcp)
			a.expect("CONNECT a", "OK")
			b.expect("CONNECT b", "OK")
			const count = 20
			for i := range count {
				// One at a time: the i-th SENT written is message i's.
				a.expect(fmt.Sprintf("SEND b "+noteText, i), "SENT b")
			}
			a.c.Close()
			b.c.Close()
			if err := syscall.Kill(child, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.exit()
			exited = true
			if code != 0 {
				t.Fatalf("exit status %d", code)
			}
			f, err := os.Open(trace)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			why := flushedBeforeSent(t, f, count)
			flushed := 0
			for _, w := range why {
				if w == "" {
					flushed++
				}
			}
			t.Logf("-history-sync %s: %d of %d SENT after their message was flushed", mode, flushed, count)
			switch {
			case mode == "full" && flushed < count:
				for i, w := range why {
					if w != "" {
						t.Errorf("message %d: %s", i, w)
					}
				}
			case mode == "normal" && flushed > 0:
				t.Fatalf("%d SENT after a flush of the log with -history-sync normal: the check cannot tell", flushed)
			}
		})
	}
}

// childOf returns the process whose parent is pid (the one child of
// strace), from /proc.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		_, rest, _ := strings.Cut(string(b), ") ")
		if fields := strings.Fields(rest); len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/stat"))
			return child
		}
	}
	t.Fatalf("no child of %d in /proc", pid)
	return 0
}

// noteText is the text of TestProgramSentAfterFlush's messages: one
// number, unique, and not a part of another message's text.
const noteText = "note-%03d-end"

// Lines of `strace -f -qq -s 8192` that flushedBeforeSent reads: a write to
// a file at an offset (SQLite's), a flush of a file, and a reply to the
// sender.
var (
	fileWrite   = regexp.MustCompile(`^\d+\s+pwrite64\((\d+), `)
	noteNumber  = regexp.MustCompile(`note-(\d{3})-end`)
	flushDone   = regexp.MustCompile(`^(\d+)\s+f(?:data)?sync\((\d+)\)\s+= 0`)
	flushStart  = regexp.MustCompile(`^(\d+)\s+f(?:data)?sync\((\d+) <unfinished`)
	flushResume = regexp.MustCompile(`^(\d+)\s+<\.\.\. f(?:data)?sync resumed>\)\s+= 0`)
	sentWrite   = regexp.MustCompile(`^\d+\s+writev?\(.*SENT b\\n`)
)

// flushedBeforeSent reads the strace log of a run in which message i (text
// noteText with i) was acknowledged by the i-th SENT b written, and says
// for each message why its SENT did not come after it was on disk, or ""
// if it did: the message's first write to a file (its page's frame in the
// write-ahead log) must come before the SENT, and a flush of that file
// descriptor must have returned in between. A write strace shows unfinished
// counts from its start, a flush only once it has returned 0.
func flushedBeforeSent(t *testing.T, r io.Reader, count int) []string {
	t.Helper()
	type at struct {
		line int
		fd   string
	}
	frames := map[int]at{}          // message → its first write to a file
	var flushes []at                // flushes that returned, in order
	flushing := map[string]string{} // thread → the descriptor it is flushing
	var sents []int                 // lines of the SENT writes, in order
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for line := 0; sc.Scan(); line++ {
		l := sc.Text()
		if m := fileWrite.FindStringSubmatch(l); m != nil {
			for _, n := range noteNumber.FindAllStringSubmatch(l, -1) {
				i, _ := strconv.Atoi(n[1])
				if _, ok := frames[i]; !ok {
					frames[i] = at{line, m[1]}
				}
			}
			continue
		}
		if m := flushDone.FindStringSubmatch(l); m != nil {
			flushes = append(flushes, at{line, m[2]})
			continue
		}
		if m := flushStart.FindStringSubmatch(l); m != nil {
			flushing[m[1]] = m[2]
			continue
		}
		if m := flushResume.FindStringSubmatch(l); m != nil {
			if fd, ok := flushing[m[1]]; ok {
				flushes = append(flushes, at{line, fd})
				delete(flushing, m[1])
			}
			continue
		}
		if sentWrite.MatchString(l) {
			sents = append(sents, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sents) != count {
		t.Fatalf("%d SENT writes traced, want %d", len(sents), count)
	}
	why := make([]string, count)
	for i, sent := range sents {
		f, ok := frames[i]
		if !ok || f.line > sent {
			why[i] = "SENT written before the message was written to a file"
			continue
		}
		why[i] = "SENT written before the message's write-ahead log was flushed"
		for _, fl := range flushes {
			if fl.fd == f.fd && fl.line > f.line && fl.line < sent {
				why[i] = ""
				break
			}
		}
	}
	return why
}
