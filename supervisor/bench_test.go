package supervisor_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
	"github.com/gotp/gotp/supervisor"
)

// W8: one_for_one supervisor, one permanent worker killed N times, each
// time waiting for its restart; a dynamic supervisor starting 100,000
// children. The figures mirror docs/bench/beam/w8_supervisor.exs.

// notifier is a gen_server worker that reports each (re)start, as the
// BEAM script's W8.Worker does.
type notifier struct {
	server.Defaults
	started chan<- gotp.PID
}

func (w notifier) Init(_ context.Context, p *gotp.Process) error {
	w.started <- p.Self()
	return nil
}

// killLoop kills the worker kills times, waiting for each restart, and
// returns the time it took.
func killLoop(first gotp.PID, n *gotp.Node, started <-chan gotp.PID, kills int) time.Duration {
	pid := first
	t0 := time.Now()
	for range kills {
		n.Exit(pid, gotp.ErrKill)
		pid = <-started
	}
	return time.Since(t0)
}

// BenchmarkW8Restart measures restarts/s of a one_for_one supervisor's
// permanent worker (a gen_server, and a bare linked function process), at
// 1,000 and 10,000 restarts within the intensity period, to show the cost
// per restart does not grow with the number of recent restarts.
func BenchmarkW8Restart(b *testing.B) {
	for _, kind := range []string{"genserver", "bare"} {
		for _, kills := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("%s/kills=%d", kind, kills), func(b *testing.B) {
				var total time.Duration
				restarts := 0
				for b.Loop() {
					n := gotp.NewNode(gotp.Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)})
					ctx := context.Background()
					started := make(chan gotp.PID, 1)
					spec := supervisor.Server("w", func() server.Behaviour { return notifier{started: started} })
					if kind == "bare" {
						spec = supervisor.Func("w", func(p *gotp.Process) error {
							started <- p.Self()
							<-p.Context().Done()
							return nil
						})
					}
					if _, err := supervisor.Start(ctx, n, supervisor.Spec{
						Intensity: kills * 100, Period: time.Second,
						Children: []supervisor.ChildSpec{spec},
					}); err != nil {
						b.Fatal(err)
					}
					total += killLoop(<-started, n, started, kills)
					restarts += kills
					n.Stop(ctx)
				}
				b.ReportMetric(float64(restarts)/total.Seconds(), "restarts/s")
				b.ReportMetric(float64(total.Nanoseconds())/float64(restarts), "ns/restart")
			})
		}
	}
}

// BenchmarkW8RestartBaseline is the floor under a restart: a process that
// traps exits spawns a linked worker, and on its Exit spawns the next one,
// with no supervisor bookkeeping, intensity check or logging.
func BenchmarkW8RestartBaseline(b *testing.B) {
	const kills = 10_000
	var total time.Duration
	restarts := 0
	for b.Loop() {
		n := gotp.NewNode(gotp.Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)})
		started := make(chan gotp.PID, 1)
		work := func(p *gotp.Process) error {
			started <- p.Self()
			<-p.Context().Done()
			return nil
		}
		n.Spawn(func(p *gotp.Process) error {
			if _, err := p.SpawnLink(work); err != nil {
				return err
			}
			for {
				msg, err := p.Receive(p.Context())
				if err != nil {
					return err
				}
				if _, ok := msg.(gotp.Exit); ok {
					if _, err := p.SpawnLink(work); err != nil {
						return err
					}
				}
			}
		}, gotp.TrapExit(true))
		total += killLoop(<-started, n, started, kills)
		restarts += kills
		n.Stop(context.Background())
	}
	b.ReportMetric(float64(restarts)/total.Seconds(), "restarts/s")
	b.ReportMetric(float64(total.Nanoseconds())/float64(restarts), "ns/restart")
}

type idleChild struct{ server.Defaults }

// BenchmarkW8DynamicStart measures child starts/s of a dynamic supervisor
// asked 100,000 times in a row to start an idle gen_server child.
func BenchmarkW8DynamicStart(b *testing.B) {
	const children = 100_000
	var total time.Duration
	var mem int64
	starts := 0
	for b.Loop() {
		n := gotp.NewNode(gotp.Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		sup, err := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
			Start: func(ctx context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
				return server.StartLink(ctx, sup, idleChild{})
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		before := heapInUse()
		t0 := time.Now()
		for i := range children {
			if _, err := supervisor.StartDynamicChild(ctx, n, sup, i); err != nil {
				b.Fatal(err)
			}
		}
		total += time.Since(t0)
		mem += heapInUse() - before
		starts += children
		n.Exit(sup, gotp.ErrKill) // brutal teardown, not timed (as the BEAM script)
		n.Stop(ctx)
	}
	b.ReportMetric(float64(starts)/total.Seconds(), "starts/s")
	b.ReportMetric(float64(total.Nanoseconds())/float64(starts), "ns/start")
	b.ReportMetric(float64(mem)/float64(starts), "B/child")
}

// heapInUse returns the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkW8DynamicStartBaseline is the floor under a dynamic start: the
// same 100,000 idle gen_servers started directly, linked to one process,
// with no call to a supervisor.
func BenchmarkW8DynamicStartBaseline(b *testing.B) {
	const children = 100_000
	var total time.Duration
	starts := 0
	for b.Loop() {
		n := gotp.NewNode(gotp.Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		done := make(chan time.Duration, 1)
		n.Spawn(func(p *gotp.Process) error {
			t0 := time.Now()
			for range children {
				if _, err := server.StartLink(ctx, p, idleChild{}); err != nil {
					return err
				}
			}
			done <- time.Since(t0)
			_, err := p.Receive(p.Context()) // until Stop
			return err
		})
		total += <-done
		starts += children
		n.Stop(ctx)
	}
	b.ReportMetric(float64(starts)/total.Seconds(), "starts/s")
	b.ReportMetric(float64(total.Nanoseconds())/float64(starts), "ns/start")
}

// BenchmarkW8DynamicShutdown measures a graceful stop of a dynamic
// supervisor with 10,000 idle gen_server children (the BEAM script's
// extra figure).
func BenchmarkW8DynamicShutdown(b *testing.B) {
	const children = 10_000
	var total time.Duration
	for b.Loop() {
		n := gotp.NewNode(gotp.Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		sup, _ := supervisor.StartDynamic(ctx, n, supervisor.DynamicSpec[int]{
			Start: func(ctx context.Context, sup *gotp.Process, _ int) (gotp.PID, error) {
				return server.StartLink(ctx, sup, idleChild{})
			},
		})
		for i := range children {
			supervisor.StartDynamicChild(ctx, n, sup, i)
		}
		t0 := time.Now()
		if err := server.Stop(ctx, n, sup, nil); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		n.Stop(ctx)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/shutdown")
}
