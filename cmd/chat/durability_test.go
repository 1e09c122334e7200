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

// SENT means on disk: the program, under strace, writes each SENT only
// after it has flushed (fsync) SQLite's write-ahead log since its last
// write to it. With -history-sync normal the writer never flushes the log,
// and every SENT goes before a flush: the check can tell the two apart.
// Skipped where strace is missing or cannot trace.
func TestProgramSentAfterFlush(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("no strace")
	}
	if err := exec.Command("strace", "-o", os.DevNull, "true").Run(); err != nil {
		t.Skipf("strace cannot trace here: %v", err)
	}
	for _, sync := range []string{"full", "normal"} {
		t.Run(sync, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "trace")
			p := launchWith(t, nil, []string{"strace", "-f", "-qq", "-s", "64", "-o", trace, "-e", "trace=pwrite64,fsync,fdatasync,write,writev"},
				"-tcp", "127.0.0.1:0", "-http", "127.0.0.1:0", "-data", t.TempDir(), "-history-sync", sync)
			p.tcp = p.waitLog(`msg="chat: line protocol listening" tcp=(\S+)`)[1]
			// The traced program is strace's child. Stop it, not strace,
			// which would detach and leave it running; strace ends with it.
			child := childOf(t, p.cmd.Process.Pid)
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
			a, b := dialLine(t, p.tcp), dialLine(t, p.tcp)
			a.expect("CONNECT a", "OK")
			b.expect("CONNECT b", "OK")
			const count = 20
			for i := range count {
				a.expect(fmt.Sprintf("SEND b m%d", i), "SENT b")
			}
			a.c.Close()
			b.c.Close()
			if err := syscall.Kill(child, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.exit(); code != 0 {
				t.Fatalf("exit status %d", code)
			}
			f, err := os.Open(trace)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			after, before := sentsAfterFlush(t, f)
			t.Logf("-history-sync %s: %d SENT after the log's flush, %d before", sync, after, before)
			switch {
			case after+before != count:
				t.Fatalf("%d SENT writes traced, want %d", after+before, count)
			case sync == "full" && before > 0:
				t.Fatalf("%d SENT written before the write-ahead log was flushed", before)
			case sync == "normal" && before == 0:
				t.Fatal("every SENT followed a flush of the log with -history-sync normal: the check cannot tell")
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

// Lines of `strace -f -qq -s N` that sentsAfterFlush reads: a write of a
// frame's 24-byte header to the write-ahead log (SQLite writes no other
// 24-byte piece), a flush of a file descriptor, or a reply starting SENT.
var (
	frameWrite  = regexp.MustCompile(`pwrite64\((\d+), .*, 24, \d+`)
	flushStart  = regexp.MustCompile(`f(?:data)?sync\((\d+)`)
	flushDone   = regexp.MustCompile(`f(?:data)?sync\((\d+)\)\s+= 0|<\.\.\. f(?:data)?sync resumed>\)\s+= 0`)
	sentWritten = regexp.MustCompile(`write\(\d+, "(?:[^"]*\\n)?SENT `)
)

// sentsAfterFlush reads an strace log and counts the SENT replies written
// after the write-ahead log's last frame was flushed (after) and those
// written while a frame had not been (before). A frame write that strace
// shows unfinished counts from its start, a flush only once it has
// returned 0: the count errs towards before.
func sentsAfterFlush(t *testing.T, r io.Reader) (after, before int) {
	t.Helper()
	log := ""                       // the write-ahead log's file descriptor
	dirty := false                  // a frame written and not yet flushed
	flushing := map[string]string{} // thread → the descriptor it is flushing
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		tid, _, _ := strings.Cut(l, " ")
		if m := frameWrite.FindStringSubmatch(l); m != nil {
			log, dirty = m[1], true
			continue
		}
		if m := flushDone.FindStringSubmatch(l); m != nil {
			fd := m[1]
			if fd == "" {
				fd = flushing[tid]
				delete(flushing, tid)
			}
			if fd == log {
				dirty = false
			}
			continue
		}
		if m := flushStart.FindStringSubmatch(l); m != nil && strings.Contains(l, "<unfinished") {
			flushing[tid] = m[1]
			continue
		}
		if sentWritten.MatchString(l) {
			if dirty {
				before++
			} else {
				after++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return after, before
}
