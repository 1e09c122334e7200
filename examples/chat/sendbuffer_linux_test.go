//go:build linux

package chat

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// sendBuffer is the SO_SNDBUF of the socket under c.
func sendBuffer(t *testing.T, c net.Conn) int {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("connection is a %T, not TCP", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	raw.Control(func(fd uintptr) { n, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Every connection, TCP and WebSocket, has the send buffer Config.SendBuffer
// asks for (Linux reports it doubled), not the kernel's default of 16 KiB
// that autotuning grows to megabytes for a client that pipelines and
// reads slowly.
func TestSendBufferIsSet(t *testing.T) {
	const size = 48 << 10
	var conns connTracker
	ts := startServiceConfig(t, Config{SendBuffer: size, onConn: conns.add})
	connect(t, ts, "line")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+ts.HTTPAddr().String()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	(&wsClient{t: t, c: ws}).expectType(map[string]string{"cmd": "connect", "name": "web"}, "ok")

	_, line := conns.of(t, ts, "line")
	_, web := conns.of(t, ts, "web")
	for name, c := range map[string]net.Conn{"line": line.w.(*lineWire).c, "web": web.w.(*webSocketWire).nc.Conn} {
		if got := sendBuffer(t, c); got < size || got > 2*size {
			t.Errorf("%s: SO_SNDBUF %d, want %d (or double it)", name, got, size)
		}
	}
}
