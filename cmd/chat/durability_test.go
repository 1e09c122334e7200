package main

import (
	"bufio"
	"bytes"
	"fmt"
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
