package cluster

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// counter spawns a process on n that counts messages and closes done when
// it has seen want of them.
func counter(b *testing.B, n *gotp.Node, want int64) (gotp.PID, chan struct{}) {
	var got atomic.Int64
	done := make(chan struct{})
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(_ *gotp.Process, msg any) (bool, error) {
		if got.Add(1) == want {
			close(done)
		}
		return false, nil
	}), nil)
	gotptest.Must(b, err)
	return pid, done
}

// BenchmarkC1RemoteSend: one-way sends from node A to a process on node B
// (three nodes up, all in this process, over direct links). Frames to one
// node are batched: every frame queued while the link's writer writes goes
// out in its next write. BenchmarkC1ProcsSend is the same across
// processes.
func BenchmarkC1RemoteSend(b *testing.B) {
	ms := startCluster(b, "a", "b", "c")
	a, bn := ms[0], ms[1]
	pid, done := counter(b, bn.n, int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		a.n.Send(pid, i)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("messages lost")
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	st := a.c.Stats()
	b.ReportMetric(float64(st.MessagesOut)/float64(max(st.BatchesOut, 1)), "msgs/batch")
}

// BenchmarkC1RemoteSendLocalBaseline is the same send to a process on the
// sender's own node: the ratio shows what crossing nodes costs.
func BenchmarkC1RemoteSendLocalBaseline(b *testing.B) {
	n := gotp.NewNode(gotp.Options{Name: "solo"})
	defer stopNode(b, n)
	pid, done := counter(b, n, int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		n.Send(pid, i)
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

type adder struct{ server.Defaults }

func (adder) HandleCall(_ *gotp.Process, _ server.From, req any) (any, error) {
	return req.(int) + 1, nil
}

// BenchmarkC1CallRoundTrip: server.Call from node A to a server on node B,
// both in this process (allocations count both ends).
// BenchmarkC1ProcsCall is the same across processes.
func BenchmarkC1CallRoundTrip(b *testing.B) {
	ms := startCluster(b, "a", "b", "c")
	a, bn := ms[0], ms[1]
	ctx := context.Background()
	srv, err := server.Start(ctx, bn.n, adder{})
	gotptest.Must(b, err)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		v, err := server.Call[int](ctx, a.n, srv, i)
		if err != nil || v != i+1 {
			b.Fatalf("call: %v, %v", v, err)
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkC2JoinVisible: a process on node A joins a group; time until
// node C's scope lists it (seen through a Monitor subscription on C).
func BenchmarkC2JoinVisible(b *testing.B) {
	ms := startCluster(b, "a", "b", "c")
	scopes := replicatedScopes(b, ms, "bench")
	var inst *pg.Instance
	obsSink := gotptest.NewSink(b, ms[2].n)
	var err error
	obsSink.Do(b, func(p *gotp.Process) { inst, err = scopes[2].scope.Open(p) })
	gotptest.Must(b, err)
	sub, _, err := inst.Monitor("g")
	gotptest.Must(b, err)
	defer sub.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		joinAs(b, scopes[0], "g", 1)
		select {
		case <-sub.C():
		case <-time.After(10 * time.Second):
			b.Fatal("join not seen on c")
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkC2KilledNodeGone: node C crashes (its direct links close and
// its NATS server stops, with no goodbye, as when its process dies); time
// until node A no longer lists C's group members. The heartbeat timeout
// is 1 s: the closed links tell well before it. BenchmarkC2ProcsKilledNode
// kills a real process.
func BenchmarkC2KilledNodeGone(b *testing.B) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		var ms []member
		var routes []string
		for _, name := range []string{"a", "b", "c"} {
			o := fastOpts(b)
			o.HeartbeatTimeout = time.Second
			o.Peers = routes
			m := startNode(b, name, o)
			routes = append(routes, m.c.RouteURL())
			ms = append(ms, m)
		}
		waitMesh(b, ms)
		scopes := replicatedScopes(b, ms, "bench")
		joinAs(b, scopes[2], "g", 10)
		waitConverged(b, scopes, "g", 10)
		b.StartTimer()
		t0 := time.Now()
		crash(ms[2])
		for countMembers(scopes[0].scope, "g") != 0 {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(t0)
		b.StopTimer()
		for _, m := range ms {
			stopNode(b, m.n)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-gone")
}
