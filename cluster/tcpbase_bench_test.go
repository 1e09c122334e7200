package cluster

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/gotp/gotp/gotptest"
)

// tcpEchoEnv, when set, makes the test binary a bare TCP echo process
// (see tcpEchoMain) instead of running tests.
const tcpEchoEnv = "GOTP_CLUSTER_TCP_ECHO"

// tcpEchoMain listens on loopback, prints its address, and echoes every
// 32-byte frame of the one connection it accepts until it closes. It is
// the far end of BenchmarkC1ProcsTCPBaseline: no gotp, no NATS.
func tcpEchoMain() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	os.Stdout.WriteString(ln.Addr().String() + "\n")
	conn, err := ln.Accept()
	ln.Close()
	if err != nil {
		return 1
	}
	conn.(*net.TCPConn).SetNoDelay(true)
	buf := make([]byte, 32)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return 0
		}
		if _, err := conn.Write(buf); err != nil {
			return 0
		}
	}
}

// BenchmarkC1ProcsTCPBaseline is the floor of a round trip between two OS
// processes on this machine: a 32-byte frame written on a loopback TCP
// connection to an echo process (this binary re-executed) and read back,
// one goroutine on each side, nothing else. Any cluster whose calls cross
// a socket between processes pays at least this (C1's call benchmarks
// report beside it).
func BenchmarkC1ProcsTCPBaseline(b *testing.B) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), tcpEchoEnv+"=1")
	out, err := cmd.StdoutPipe()
	gotptest.Must(b, err)
	gotptest.Must(b, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	gotptest.Must(b, err)
	conn, err := net.Dial("tcp", addr[:len(addr)-1])
	gotptest.Must(b, err)
	defer conn.Close()
	buf := make([]byte, 32)
	round := func() {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			b.Fatal(err)
		}
	}
	timeRounds(b, round)
}
