//go:build linux || darwin

package fdlimit

import (
	"fmt"
	"syscall"
)

// Raise raises this process's limit of open files to at least want, the
// hard limit too where the OS allows it (root, or CAP_SYS_RESOURCE). Go
// already raises the soft limit to the hard limit at start; this goes
// further for a program that needs more descriptors than the hard limit
// allows. Where the hard limit cannot move it takes all of it. It returns
// the limit in force, and an error saying how to raise it when that stays
// below want. It changes process-wide state: call it at start, from one
// goroutine.
func Raise(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	n := l
	n.Cur = want
	if n.Max < want {
		n.Max = want
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n); err == nil {
		return want, nil
	}
	if l.Cur < l.Max { // the hard limit could not move: take all of it
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("raising the open-file limit to %d: %w", l.Max, err)
		}
	}
	return l.Cur, fmt.Errorf("the open-file limit is %d, fewer than the %d needed, and the OS refuses to raise it "+
		"(raise the hard limit: ulimit -Hn %d, or LimitNOFILE=%d in a systemd unit)", l.Cur, want, want, want)
}
