//go:build unix

package chat

import "syscall"

// tryWrite writes b to the socket without waiting for room in it: it
// returns how many bytes the socket took at once (0 on EAGAIN or any
// error, which the writer goroutine then meets and handles).
//
// The outbox calls it from one goroutine at a time (the one that set its
// writing flag), so the function handed to the RawConn and the state it
// works on are the wire's own, made once: a write allocates nothing.
func (w *lineWire) tryWrite(b []byte) int {
	if w.raw == nil {
		return 0
	}
	if w.try.fn == nil {
		w.try.fn = w.tryFD
	}
	w.try.b, w.try.n = b, 0
	w.raw.Write(w.try.fn)
	n := w.try.n
	w.try.b = nil
	return n
}

// tryFD is tryWrite's write on the socket's descriptor.
func (w *lineWire) tryFD(fd uintptr) bool {
	t := &w.try
	for t.n < len(t.b) {
		m, err := syscall.Write(int(fd), t.b[t.n:])
		if m > 0 {
			t.n += m
		}
		if err != nil || m <= 0 {
			break
		}
	}
	return true // never wait for the socket: the writer goroutine does
}
