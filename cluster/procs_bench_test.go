package cluster

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/pg"
	"github.com/gotp/gotp/server"
)

// The C1/C2 benchmarks across OS processes, as users deploy: node a runs
// in the benchmark's process, nodes b and c each in a node process of
// their own (this test binary re-executed, see nodeproc_test.go), every
// node with its embedded NATS server routed to a's, and direct links
// between them unless the benchmark says otherwise. The Erlang
// distribution anchor measuring the same things is
// docs/bench/beam/c1_c2_cluster.exs; docs/bench/cluster-sitting.sh runs both in
// one sitting.

// benchProcs starts a here and b and c as node processes, all connected.
func benchProcs(b *testing.B, noDirect bool) (member, map[string]*nodeProc) {
	return benchProcsPoll(b, noDirect, 0)
}

// benchProcsPoll is benchProcs with Options.BusyPoll on every node.
func benchProcsPoll(b *testing.B, noDirect bool, busy time.Duration) (member, map[string]*nodeProc) {
	b.Helper()
	o := fastOpts(b)
	o.HeartbeatInterval, o.HeartbeatTimeout = DefaultHeartbeatInterval, DefaultHeartbeatTimeout
	o.NoDirect, o.BusyPoll = noDirect, busy
	a := startNode(b, "a", o)
	procs := map[string]*nodeProc{}
	for _, name := range []string{"b", "c"} {
		procs[name] = startNodeProc(b, "", nodeProcConfig{Name: name, Peers: []string{a.c.RouteURL()}, NoDirect: noDirect, BusyPoll: busy,
			HeartbeatInterval: o.HeartbeatInterval, HeartbeatTimeout: o.HeartbeatTimeout})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gotptest.Must(b, a.c.WaitFor(ctx, "b", "c"))
	for _, np := range procs {
		for !strings.Contains(np.do("nodes"), "a") {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, ni := range a.c.Nodes() {
		if ni.Direct == noDirect {
			b.Fatalf("node %s: direct %v", ni.Name, ni.Direct)
		}
	}
	return a, procs
}

func resolveOn(b *testing.B, a member, node, name string) gotp.PID {
	b.Helper()
	pid, ok := Remote{Node: node, Name: name}.Resolve(a.n)
	if !ok {
		b.Fatalf("no %s on %s", name, node)
	}
	return pid
}

// BenchmarkC1ProcsSend: one-way sends from a to a counting process on b,
// b.N of them (the anchor sends 1,000,000), until b's counter has seen
// them all.
func BenchmarkC1ProcsSend(b *testing.B) {
	a, _ := benchProcs(b, false)
	ctr := resolveOn(b, a, "b", "counter")
	me, ch := sinkOf(b, a.n)
	a.n.Send(ctr, countTo{N: b.N, Report: me})
	syncCall(b, a, "b")
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		a.n.Send(ctr, i)
	}
	if _, ok := gotptest.RecvWithin(b, 5*time.Minute, ch).(counted); !ok {
		b.Fatal("no count")
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
}

// syncCall makes one call to node's adder, so that what a sent before has
// arrived.
func syncCall(b *testing.B, a member, node string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := server.Call[int](ctx, a.n, Remote{Node: node, Name: "adder"}, 0); err != nil {
		b.Fatal(err)
	}
}

// callBench makes b.N sequential calls from a to b's adder (the anchor
// makes 20,000) and reports round trips per second and the latency
// percentiles.
func callBench(b *testing.B, noDirect bool, byName bool) { callBenchPoll(b, noDirect, byName, 0) }

func callBenchPoll(b *testing.B, noDirect bool, byName bool, busy time.Duration) {
	a, _ := benchProcsPoll(b, noDirect, busy)
	var to gotp.Dest = resolveOn(b, a, "b", "adder")
	if byName {
		to = Remote{Node: "b", Name: "adder"}
	}
	ctx := context.Background()
	for i := range 1000 { // warm up both ends
		if _, err := server.Call[int](ctx, a.n, to, i); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t0 := time.Now()
		v, err := server.Call[int](ctx, a.n, to, i)
		if err != nil || v != i+1 {
			b.Fatalf("call: %v, %v", v, err)
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	b.StopTimer()
	reportLatency(b, el, lat, "calls/s")
}

func reportLatency(b *testing.B, el time.Duration, lat []time.Duration, unit string) {
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/el.Seconds(), unit)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkC1ProcsCall: server.Call from a to the server on b, over the
// direct link.
func BenchmarkC1ProcsCall(b *testing.B) { callBench(b, false, false) }

// BenchmarkC1ProcsCallByName: the same, to the name "adder" on b
// (Erlang's gen_server:call({adder, b}, ...)): the name is looked up on b
// as each call arrives.
func BenchmarkC1ProcsCallByName(b *testing.B) { callBench(b, false, true) }

// BenchmarkC1ProcsCallBusyPoll: the same with Options.BusyPoll of 50 µs on
// every node (links spin that long before they sleep, as Erlang's
// schedulers do).
func BenchmarkC1ProcsCallBusyPoll(b *testing.B) {
	busy := 50 * time.Microsecond
	if d, err := time.ParseDuration(os.Getenv("GOTP_BENCH_BUSYPOLL")); err == nil {
		busy = d // to try other spans
	}
	callBenchPoll(b, false, false, busy)
}

// BenchmarkC1ProcsCallOverNATS: the same call with every node's
// connections over NATS (Options.NoDirect).
func BenchmarkC1ProcsCallOverNATS(b *testing.B) { callBench(b, true, false) }

// BenchmarkC1ProcsNATSBaseline is the floor of a round trip over NATS in
// the same topology: a plain NATS request from a's connection, through
// a's embedded server and its route, to an echo on b's connection and
// back, with no gotp above it.
func BenchmarkC1ProcsNATSBaseline(b *testing.B) {
	a, _ := benchProcs(b, true)
	got := make(chan struct{}, 1)
	inboxSubj := "bench.reply.a"
	sub, err := a.c.nc.Subscribe(inboxSubj, func(*nats.Msg) { got <- struct{}{} })
	gotptest.Must(b, err)
	defer sub.Unsubscribe()
	gotptest.Must(b, a.c.nc.Flush())
	msg := make([]byte, 32)
	round := func() {
		if err := a.c.nc.PublishRequest("bench.echo.b", inboxSubj, msg); err != nil {
			b.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			b.Fatal("no echo")
		}
	}
	timeRounds(b, round)
}

// timeRounds warms round up, then runs it b.N times and reports round
// trips per second and the latency percentiles.
func timeRounds(b *testing.B, round func()) {
	for range 1000 {
		round()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		round()
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	b.StopTimer()
	reportLatency(b, el, lat, "rt/s")
}

// BenchmarkC2ProcsJoinVisible: a process on a joins a group; c's group
// monitor sees it and tells a (so the figure holds one c→a hop more than
// the true one, as the anchor's does).
func BenchmarkC2ProcsJoinVisible(b *testing.B) {
	a, procs := benchProcs(b, false)
	scope, err := pg.Start(context.Background(), a.n, "mp", pg.Options{})
	gotptest.Must(b, err)
	gotptest.Must(b, a.c.Replicate(scope))
	me, ch := sinkOf(b, a.n)
	procs["c"].do("watch g " + me.String())
	s := scopeOn{m: a, scope: scope}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		joinAs(b, s, "g", 1)
		gotptest.RecvWithin(b, 10*time.Second, ch)
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e6, "max-ms")
	_ = el
}

// BenchmarkC2ProcsKilledNode: c's process is killed (SIGKILL); the time
// until a has the NodeDown of c and until a's view of the group has none
// of c's 10 members. The heartbeat timeout is the default 3 s: the closed
// links tell first.
func BenchmarkC2ProcsKilledNode(b *testing.B) {
	var down, gone time.Duration
	for range b.N {
		b.StopTimer()
		a, procs := benchProcs(b, false)
		scope, err := pg.Start(context.Background(), a.n, "mp", pg.Options{})
		gotptest.Must(b, err)
		gotptest.Must(b, a.c.Replicate(scope))
		procs["c"].do("join g 10")
		for countMembers(scope, "g") != 10 {
			time.Sleep(time.Millisecond)
		}
		sub, _ := a.c.Subscribe()
		b.StartTimer()
		t0 := time.Now()
		procs["c"].kill()
		waitEvent(b, sub, NodeDown, "c", time.Minute)
		down += time.Since(t0)
		for countMembers(scope, "g") != 0 {
			time.Sleep(100 * time.Microsecond)
		}
		gone += time.Since(t0)
		b.StopTimer()
		sub.Close()
		procs["b"].kill()
		stopNode(b, a.n)
	}
	b.ReportMetric(float64(down.Microseconds())/1e3/float64(b.N), "ms-to-nodedown")
	b.ReportMetric(float64(gone.Microseconds())/1e3/float64(b.N), "ms-to-members-gone")
}
