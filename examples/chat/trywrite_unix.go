//go:build unix

package chat

import "syscall"

// tryWrite writes b to the socket without waiting for room in it: it
// returns how many bytes the socket took at once (0 on EAGAIN or any
// error, which the writer goroutine then meets and handles).
func (w *lineWire) tryWrite(b []byte) int {
	if w.raw == nil {
		return 0
	}
	n := 0
	w.raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			if err != nil || m <= 0 {
				break
			}
		}
		return true // never wait for the socket: the writer goroutine does
	})
	return n
}
