//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// openFileLimit reads the soft limit of open files of process pid from
// /proc.
func openFileLimit(t *testing.T, pid int) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
			n, err := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no open-file limit in /proc/<pid>/limits")
	return 0
}

// At start the chat raises its open-file limit to fit -max-conns: beyond
// the hard limit where the OS lets it (CAP_SYS_RESOURCE), and where it
// does not (without it, or past fs.nr_open, which binds everyone) it logs an error saying how to raise
// it, takes what it can, and serves anyway.
func TestProgramRaisesOpenFileLimit(t *testing.T) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		t.Skip("no /proc/sys/fs/nr_open:", err)
	}
	nrOpen, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("beyond the hard limit", func(t *testing.T) {
		conns := l.Max + 1000 // the program wants 256 more for itself
		if conns+256 > nrOpen {
			t.Skipf("the hard limit %d is too close to fs.nr_open %d", l.Max, nrOpen)
		}
		p := startProgram(t, "-max-conns", strconv.FormatUint(conns, 10))
		got := openFileLimit(t, p.cmd.Process.Pid)
		if got >= conns+256 {
			return // the OS let it raise the hard limit (CAP_SYS_RESOURCE)
		}
		p.waitLog(`msg="chat: open files" err=".*ulimit -Hn`)
		if got != l.Max {
			t.Fatalf("open-file limit %d, want all of the hard limit %d", got, l.Max)
		}
	})

	t.Run("refused by the OS", func(t *testing.T) {
		conns := nrOpen + 1000
		p := startProgram(t, "-max-conns", strconv.FormatUint(conns, 10))
		p.waitLog(`msg="chat: open files" err=".*the OS refuses to raise it.*ulimit -Hn`)
		if got := openFileLimit(t, p.cmd.Process.Pid); got < l.Max {
			t.Fatalf("open-file limit %d, want at least the hard limit %d it started with", got, l.Max)
		}
		c := dialLine(t, p.tcp)
		c.expect("CONNECT ana", "OK")
	})
}
