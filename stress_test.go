package gotp_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

type (
	linkCmd     struct{ to gotp.PID }
	unlinkCmd   struct{ to gotp.PID }
	trapCmd     struct{ on bool }
	panicCmd    struct{}
	peerMonitor struct{ to gotp.PID }
)

// stressTarget is a process that obeys the commands of the stress test and
// ends with any error it is sent.
func stressTarget(p *gotp.Process) error {
	for {
		m, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case linkCmd:
			_ = p.Link(m.to) // ErrNoProc is fine: the peer may be gone
		case unlinkCmd:
			p.Unlink(m.to)
		case trapCmd:
			p.TrapExit(m.on)
		case peerMonitor:
			p.Monitor(m.to)
		case panicCmd:
			panic("stress")
		case error:
			return m
		}
	}
}

// A stress watcher holds monitors on targets and checks its own Downs.
type (
	watchCmd     struct{ target gotp.PID }
	demonitorCmd struct{ flush bool }
	reportCmd    struct{ reply chan<- watcherReport }
)

type watcherReport struct {
	monitors, pending int
	problems          []string
}

type refState struct {
	target       gotp.PID
	downs        int
	demonitored  bool
	flushed      bool
	active       bool // what Demonitor returned
	downsAfterDM int  // Downs received after Demonitor returned
}

func stressWatcher(p *gotp.Process) error {
	refs := make(map[gotp.Ref]*refState)
	var order []gotp.Ref
	var problems []string
	rng := rand.New(rand.NewPCG(uint64(p.Self().ID()), 1))
	for {
		m, err := p.Receive(context.Background())
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case watchCmd:
			ref := p.Monitor(m.target)
			refs[ref] = &refState{target: m.target}
			order = append(order, ref)
		case demonitorCmd:
			if len(order) == 0 {
				continue
			}
			ref := order[rng.IntN(len(order))]
			st := refs[ref]
			if st.demonitored {
				continue
			}
			st.demonitored, st.flushed = true, m.flush
			st.active = p.Demonitor(ref, m.flush)
			if st.active && st.downs != 0 {
				problems = append(problems, "Demonitor reported active after its Down")
			}
		case gotp.Down:
			st, ok := refs[m.Ref]
			if !ok {
				problems = append(problems, "a Down for a monitor never made")
				continue
			}
			if m.PID != st.target {
				problems = append(problems, "a Down naming the wrong process")
			}
			st.downs++
			if st.demonitored {
				st.downsAfterDM++
			}
		case reportCmd:
			r := watcherReport{monitors: len(refs)}
			for _, st := range refs {
				switch {
				case st.downs > 1:
					problems = append(problems, "more than one Down for a monitor")
				case st.downsAfterDM > 0 && (st.flushed || st.active):
					problems = append(problems, "a Down after Demonitor(flush) or after Demonitor returned true")
				case st.downs == 0 && (!st.demonitored || (!st.active && !st.flushed)):
					r.pending++ // this Down is still owed
				}
			}
			r.problems = problems
			m.reply <- r
		}
	}
}

func TestStressLinksMonitorsExits(t *testing.T) {
	targets, drivers, ops := 150, 4, 1500
	if os.Getenv("GOTP_STRESS") != "" {
		targets, drivers, ops = 2000, 8, 50000
	}
	n := gotptest.NewNode(t)
	var (
		mu   sync.Mutex
		pids []gotp.PID
	)
	for range targets {
		pid, err := n.Spawn(stressTarget)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	const watchers = 6
	var ws []gotp.PID
	for range watchers {
		w, err := n.Spawn(stressWatcher)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}

	// MonitorFunc watchers, counted per Ref.
	type fnMon struct {
		calls       atomic.Int32
		demonitored bool
		active      bool
	}
	var fnMu sync.Mutex
	fnMons := make(map[gotp.Ref]*fnMon)

	reasons := []error{nil, errBoom, gotp.ErrKill, gotp.ErrShutdown, gotp.ErrKilled}
	var wg sync.WaitGroup
	for d := range drivers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(d), 42))
			pick := func() gotp.PID {
				mu.Lock()
				defer mu.Unlock()
				return pids[rng.IntN(len(pids))]
			}
			for range ops {
				target := pick()
				switch k := rng.IntN(100); {
				case k < 20:
					n.Send(target, linkCmd{pick()})
				case k < 27:
					n.Send(target, unlinkCmd{pick()})
				case k < 32:
					n.Send(target, trapCmd{rng.IntN(2) == 0})
				case k < 50:
					n.Send(ws[rng.IntN(watchers)], watchCmd{target})
				case k < 55:
					n.Send(ws[rng.IntN(watchers)], demonitorCmd{flush: rng.IntN(2) == 0})
				case k < 62:
					m := &fnMon{}
					ref := n.MonitorFunc(target, func(gotp.Down) { m.calls.Add(1) })
					if rng.IntN(3) == 0 {
						m.demonitored = true
						m.active = n.Demonitor(ref, target)
					}
					fnMu.Lock()
					fnMons[ref] = m
					fnMu.Unlock()
				case k < 67:
					n.Send(target, peerMonitor{pick()})
				case k < 72:
					n.Exit(target, reasons[rng.IntN(len(reasons))])
				case k < 75:
					n.Send(target, reasons[1+rng.IntN(len(reasons)-1)])
				case k < 76:
					n.Send(target, panicCmd{})
				case k < 88:
					n.Send(target, "noise")
				default:
					pid, err := n.Spawn(stressTarget, gotp.LinkTo(target), gotp.TrapExit(rng.IntN(4) == 0))
					if err != nil {
						if !errors.Is(err, gotp.ErrNoProc) {
							t.Errorf("Spawn: %v", err)
						}
						continue
					}
					mu.Lock()
					pids = append(pids, pid)
					mu.Unlock()
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		buf := make([]byte, 1<<22)
		t.Fatalf("deadlock? drivers did not finish:\n%s", buf[:runtime.Stack(buf, true)])
	}

	// Kill every target; then every owed Down must arrive, once.
	for _, pid := range pids {
		n.Exit(pid, gotp.ErrKill)
	}
	gotptest.Eventually(t, "every target to be gone", func() bool { return n.ProcessCount() == watchers })
	total := 0
	for _, w := range ws {
		var r watcherReport
		gotptest.Eventually(t, "every owed Down", func() bool {
			reply := make(chan watcherReport, 1)
			n.Send(w, reportCmd{reply})
			r = gotptest.Recv(t, reply)
			return r.pending == 0 || len(r.problems) > 0
		})
		for _, p := range r.problems {
			t.Errorf("watcher %v: %s", w, p)
		}
		total += r.monitors
	}

	// Stop waits for every goroutine, so every exit has finished firing.
	if err := n.Stop(stopCtx(t)); err != nil {
		t.Fatal(err)
	}
	fnMu.Lock()
	defer fnMu.Unlock()
	for _, m := range fnMons {
		want := int32(1)
		if m.demonitored && m.active {
			want = 0
		}
		if got := m.calls.Load(); got != want && !(m.demonitored && !m.active && got == 1) {
			t.Errorf("MonitorFunc fn called %d times (demonitored %v, active %v)", got, m.demonitored, m.active)
		}
	}
	t.Logf("%d targets, %d process monitors, %d MonitorFuncs", len(pids), total, len(fnMons))
}
