package cluster

import (
	"io"
	"syscall"
	"unsafe"
)

// A direct link's reads, and the writes a sender makes itself (see kick),
// are raw system calls on the non-blocking socket: they never wait (a read
// that finds nothing returns EAGAIN and the runtime's poller waits for the
// socket instead), so they need none of the runtime's bookkeeping around a
// system call that may block. That bookkeeping has a cost beyond its own:
// entering a system call while every processor of the program was idle
// wakes the runtime's monitor thread (sysmon), which then polls every 20
// µs for a while. A call that crosses two programs made each of them idle
// and busy again once per call, so each woke its monitor about once per
// call (perf: about one wake-up of the four per call). rawMax bounds the
// bytes one raw write may copy, so that a raw call stays short; a longer
// write goes through syscall.Write.
const rawMax = 64 << 10

// rawRead reads the socket fd into b with one raw system call. Under the
// race detector it is syscall.Read, and rawWrite syscall.Write: they tell
// the detector that what a write sent happens before what a read of it
// receives, so that a program whose nodes share one process (its tests)
// is not reported racing between a caller's writes and the remote
// handler's reads of the same memory; raw calls tell it nothing.
func rawRead(fd uintptr, b []byte) (int, error) {
	if raceEnabled {
		n, err := syscall.Read(int(fd), b)
		return max(n, 0), err
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawWrite writes b to the socket fd with one system call, raw if b is
// at most rawMax bytes. It returns -1 and the error when nothing was
// written.
func rawWrite(fd uintptr, b []byte) (int, error) {
	if raceEnabled || len(b) > rawMax {
		return syscall.Write(int(fd), b)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawReader reads a link's TCP socket with raw system calls (see rawMax),
// waiting for it through the runtime's poller when it has nothing; read
// deadlines apply as to the connection's own Read.
type rawReader struct {
	l   *link
	buf []byte
	n   int
	err error
	f   func(fd uintptr) bool
}

func newRawReader(l *link) *rawReader {
	r := &rawReader{l: l}
	r.f = func(fd uintptr) bool {
		r.n, r.err = rawRead(fd, r.buf)
		return r.err != syscall.EAGAIN // false: wait for the socket, then again
	}
	return r
}

func (r *rawReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.buf = b
	defer func() { r.buf = nil }()
	return readSocket(r.l.raw, r.f, &r.n, &r.err)
}

// readSocket runs f, a read of the socket that leaves what it read in *n
// and *err, through raw until it has read something, the peer has closed
// (io.EOF) or reading failed.
func readSocket(raw syscall.RawConn, f func(fd uintptr) bool, n *int, err *error) (int, error) {
	for {
		if e := raw.Read(f); e != nil {
			return 0, e
		}
		switch {
		case *err == syscall.EINTR:
			continue
		case *err != nil:
			return 0, *err
		case *n == 0:
			return 0, io.EOF
		}
		return *n, nil
	}
}
