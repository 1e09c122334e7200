package pg_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
)

// W5 sizes (docs/bench/workloads.md).
const (
	w5Members    = 10_000
	w5Broadcasts = 100
)

type goSignal struct{}

// w5JoinRound runs one W5 join phase on a fresh node, as the Erlang script
// does: w5Members idle handler-mode processes (as gen_servers are) are
// told to go, and each then opens the scope and joins group "g" itself
// (join == false: does nothing) and counts itself done. It returns the
// time from the first go to the last member done.
func w5JoinRound(b *testing.B, join bool) (wall, cpu time.Duration) {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "w5"})
	defer n.Stop(ctx)
	s, err := pg.Start(ctx, n, "w5", pg.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var left atomic.Int64
	left.Store(w5Members)
	done := make(chan struct{})
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if join {
			inst, err := s.Open(p)
			if err != nil {
				return true, err
			}
			if err := inst.Join("g"); err != nil {
				return true, err
			}
		}
		if left.Add(-1) == 0 {
			close(done)
		}
		return false, nil
	})
	pids := make([]gotp.PID, w5Members)
	for j := range pids {
		if pids[j], err = n.SpawnHandler(h, nil); err != nil {
			b.Fatal(err)
		}
	}
	start, cpu0 := time.Now(), cpuTime()
	for _, pid := range pids {
		n.Send(pid, goSignal{})
	}
	<-done
	wall, cpu = time.Since(start), cpuTime()-cpu0
	if join && s.Info().LocalJoins != w5Members {
		b.Fatalf("%d members, want %d", s.Info().LocalJoins, w5Members)
	}
	return wall, cpu
}

// BenchmarkW5PGJoin is W5's join phase: 10,000 processes each open the
// scope and join "g" at once (Erlang's figure, 9,700 joins/s, is for this
// shape: every process calls pg:join for itself). Each iteration also runs
// the same round without the pg calls (go, then done) as a baseline,
// interleaved so that both see the same machine load; ns/op is the pg
// round only.
func BenchmarkW5PGJoin(b *testing.B) {
	var pgTime, baseTime, pgCPU, baseCPU time.Duration
	base := func() {
		w, c := w5JoinRound(b, false)
		baseTime += w
		baseCPU += c
	}
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which round goes first, so that neither always
		// inherits the other's garbage.
		if i%2 == 1 {
			base()
		}
		b.StartTimer()
		w, c := w5JoinRound(b, true)
		b.StopTimer()
		pgTime += w
		pgCPU += c
		if i%2 == 0 {
			base()
		}
	}
	joins := float64(b.N) * w5Members
	b.ReportMetric(joins/pgTime.Seconds(), "joins/s")
	b.ReportMetric(joins/baseTime.Seconds(), "baseline-rounds/s")
	b.ReportMetric(float64(pgTime-baseTime)/joins, "ns/join-over-baseline")
	b.ReportMetric(float64(pgCPU)/joins, "cpu-ns/join")
	b.ReportMetric(float64(baseCPU)/joins, "cpu-ns/baseline-round")
}

// BenchmarkW5PGBroadcast is W5's broadcast phase: 10,000 handler-mode
// processes (as gen_servers are) are members of "g"; one process
// broadcasts 100 times; each member counts its messages. The time runs
// from the first broadcast until every member has received all 100. Each
// iteration also sends the same message to the same 10,000 processes with
// a raw loop of Process.Send, 100 times, as the baseline (interleaved,
// same processes); ns/op is the pg phase only.
func BenchmarkW5PGBroadcast(b *testing.B) { w5Broadcast(b, false) }

// BenchmarkW5PGBroadcastReceiveLoop is BenchmarkW5PGBroadcast with members
// that are function processes receiving in a loop, as the Erlang script's
// members are.
func BenchmarkW5PGBroadcastReceiveLoop(b *testing.B) { w5Broadcast(b, true) }

func w5Broadcast(b *testing.B, receiveLoop bool) {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "w5"})
	defer n.Stop(ctx)
	s, err := pg.Start(ctx, n, "w5", pg.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var left atomic.Int64
	var done atomic.Pointer[chan struct{}]
	count := func(got *int) {
		if *got++; *got == w5Broadcasts {
			*got = 0
			if left.Add(-1) == 0 {
				close(*done.Load())
			}
		}
	}
	join := func(p *gotp.Process) error {
		inst, err := s.Open(p)
		if err != nil {
			return err
		}
		return inst.Join("g")
	}
	pids := make([]gotp.PID, w5Members)
	for j := range pids {
		if receiveLoop {
			joined := make(chan error, 1)
			pids[j], err = n.Spawn(func(p *gotp.Process) error {
				joined <- join(p)
				got := 0
				for {
					if _, err := p.Receive(ctx); err != nil {
						return nil
					}
					count(&got)
				}
			})
			if err == nil {
				err = <-joined
			}
		} else {
			got := 0
			pids[j], err = n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
				count(&got)
				return false, nil
			}), join)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	senderCh := make(chan *gotp.Process, 1)
	if _, err := n.Spawn(func(p *gotp.Process) error {
		senderCh <- p
		_, err := p.Receive(ctx)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	sender := <-senderCh
	inst, err := s.Open(sender)
	if err != nil {
		b.Fatal(err)
	}
	if m, _ := inst.Members("g"); len(m) != w5Members {
		b.Fatalf("%d members", len(m))
	}
	round := func(send func(k int)) (wall, cpu time.Duration) {
		ch := make(chan struct{})
		done.Store(&ch)
		left.Store(w5Members)
		start, cpu0 := time.Now(), cpuTime()
		for k := range w5Broadcasts {
			send(k)
		}
		<-ch
		return time.Since(start), cpuTime() - cpu0
	}
	broadcast := func(k int) {
		if err := inst.Broadcast("g", "t", k); err != nil {
			b.Fatal(err)
		}
	}
	sendLoop := func(k int) {
		var msg any = pg.Message{Scope: "w5", Group: "g", Topic: "t", Payload: k, From: sender.Self()}
		for _, pid := range pids {
			sender.Send(pid, msg)
		}
	}
	var pgTime, baseTime, pgCPU, baseCPU time.Duration
	base := func() {
		w, c := round(sendLoop)
		baseTime += w
		baseCPU += c
	}
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which phase goes first.
		if i%2 == 1 {
			base()
		}
		b.StartTimer()
		w, c := round(broadcast)
		b.StopTimer()
		pgTime += w
		pgCPU += c
		if i%2 == 0 {
			base()
		}
	}
	deliveries := float64(b.N) * w5Members * w5Broadcasts
	b.ReportMetric(deliveries/pgTime.Seconds(), "deliveries/s")
	b.ReportMetric(deliveries/baseTime.Seconds(), "baseline-deliveries/s")
	b.ReportMetric(baseTime.Seconds()/pgTime.Seconds(), "pg/baseline-speed")
	b.ReportMetric(float64(pgCPU)/deliveries, "cpu-ns/delivery")
	b.ReportMetric(float64(baseCPU)/deliveries, "cpu-ns/baseline-delivery")
}

// BenchmarkW5PGJoinCost measures one join and one leave of a process that
// is not yet a member (the path that adds a distinct member) in a group
// that already holds 1,000 members and in one that holds 20,000: the cost
// must not grow with the size (Erlang's pg: about 14 µs a join at 1,000
// members, 170 µs at 20,000). The two groups are measured in alternating
// batches of one loop, so that machine load falls on both alike; an op is
// one join+leave, half of them on each group.
func BenchmarkW5PGJoinCost(b *testing.B) {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "w5"})
	defer n.Stop(ctx)
	idle := gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return false, nil })
	sizes := []int{1_000, 20_000}
	scopes := make([]*pg.Scope, len(sizes))
	pools := make([][]*pg.Instance, len(sizes))
	for i, size := range sizes {
		s, err := pg.Start(ctx, n, fmt.Sprintf("w5-%d", size), pg.Options{})
		if err != nil {
			b.Fatal(err)
		}
		scopes[i] = s
		open := func(join bool) *pg.Instance {
			var inst *pg.Instance
			_, err := n.SpawnHandler(idle, func(p *gotp.Process) error {
				var err error
				if inst, err = s.Open(p); err != nil {
					return err
				}
				if join {
					return inst.Join("g")
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			return inst
		}
		for range size {
			open(true)
		}
		pools[i] = make([]*pg.Instance, 1024)
		for j := range pools[i] {
			pools[i][j] = open(false)
		}
	}
	const batch = 256
	spent := make([]time.Duration, len(sizes))
	ops := make([]int, len(sizes))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		for i := range sizes {
			k := min(batch, b.N-done)
			if k <= 0 {
				break
			}
			pool := pools[i]
			start := time.Now()
			for j := range k {
				inst := pool[(ops[i]+j)&1023]
				if err := inst.Join("g"); err != nil {
					b.Fatal(err)
				}
				if err := inst.Leave("g"); err != nil {
					b.Fatal(err)
				}
			}
			spent[i] += time.Since(start)
			ops[i] += k
			done += k
		}
	}
	b.StopTimer()
	for i, size := range sizes {
		if in := scopes[i].Info(); in.LocalJoins != size {
			b.Fatalf("%d joins at the end, want %d", in.LocalJoins, size)
		}
		if ops[i] > 0 {
			b.ReportMetric(float64(spent[i].Nanoseconds())/float64(ops[i]), fmt.Sprintf("ns/join+leave@%d", size))
		}
	}
	if ops[0] > 0 && ops[1] > 0 {
		r := (float64(spent[1]) / float64(ops[1])) / (float64(spent[0]) / float64(ops[0]))
		b.ReportMetric(r, "cost-20000/cost-1000")
	}
}
