//go:build unix

package pg_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) the test process has
// used so far. Benchmarks report CPU per operation beside wall time: on a
// shared, loaded machine the CPU a phase costs varies far less than the
// time it takes.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
