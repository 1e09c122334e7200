package observer

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gotp/gotp"
)

// Sample is one point of the system panel's history.
type Sample struct {
	Time       time.Time `json:"time"`
	Processes  int       `json:"processes"`
	Messages   int       `json:"messages"`    // waiting in every mailbox
	HeapBytes  uint64    `json:"heap_bytes"`  // live and unswept heap objects
	TotalBytes uint64    `json:"total_bytes"` // all memory the Go runtime has mapped
	Goroutines int       `json:"goroutines"`
}

// System is the system panel: the program and the node now, and the
// history of the last minutes.
type System struct {
	Node       string        `json:"node"`
	Uptime     time.Duration `json:"uptime_ns"` // since the node was made
	GoVersion  string        `json:"go_version"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Goroutines int           `json:"goroutines"`
	HeapBytes  uint64        `json:"heap_bytes"`
	TotalBytes uint64        `json:"total_bytes"`
	GCCycles   uint64        `json:"gc_cycles"`
	Processes  int           `json:"processes"`
	Messages   int           `json:"messages"`
	Longest    int           `json:"longest_mailbox"`
	LongestPID string        `json:"longest_mailbox_pid,omitempty"`
	Crashes    uint64        `json:"crashes"`
	History    []Sample      `json:"history"`
}

// The runtime/metrics the panel reads (no stop of the world, unlike
// runtime.ReadMemStats).
var runtimeMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
	"/sched/goroutines:goroutines",
	"/gc/cycles/total:gc-cycles",
}

// memory reads the runtime's figures: heap objects, total mapped,
// goroutines, GC cycles.
func memory() (heap, total uint64, goroutines int, gc uint64) {
	s := make([]metrics.Sample, len(runtimeMetrics))
	for i, name := range runtimeMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return u(0), u(1), int(u(2)), u(3)
}

// system returns the panel as of now, with a copy of the history.
func (o *Observer) system() System {
	sum := o.n.Summary()
	heap, total, gor, gc := memory()
	sys := System{
		Node: o.n.Name(), Uptime: time.Since(o.n.Started()).Round(time.Second),
		GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Goroutines: gor, HeapBytes: heap, TotalBytes: total, GCCycles: gc,
		Processes: sum.Processes, Messages: sum.Messages, Longest: sum.LongestMailbox,
		Crashes: sum.Crashes, History: o.hist.samples(),
	}
	if !sum.LongestPID.IsZero() {
		sys.LongestPID = sum.LongestPID.String()
	}
	return sys
}

// history is the system panel's ring buffer of samples, filled by a
// process of the node (the sampler) every interval.
type history struct {
	mu   sync.Mutex // guards the fields below
	ring []Sample   // samples, oldest at next once full
	next int
	full bool
	pid  gotp.PID // the sampler; zero if it could not start

	n     *gotp.Node
	every time.Duration
}

// tick is the sampler's timer message.
type tick struct{}

// startHistory starts the sampler on n, which takes its first sample at
// once.
func startHistory(n *gotp.Node, every time.Duration, size int) *history {
	h := &history{ring: make([]Sample, size), n: n, every: every}
	pid, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if _, ok := msg.(tick); ok {
			h.sample()
			n.SendAfter(every, p.Self(), tick{})
		}
		return false, nil
	}), func(p *gotp.Process) error {
		h.sample()
		n.SendAfter(every, p.Self(), tick{})
		return nil
	}, gotp.Behaviour("observer sampler"))
	if err == nil {
		h.mu.Lock()
		h.pid = pid
		h.mu.Unlock()
	}
	return h
}

func (h *history) sample() {
	sum := h.n.Summary()
	heap, total, gor, _ := memory()
	s := Sample{Time: time.Now(), Processes: sum.Processes, Messages: sum.Messages, HeapBytes: heap, TotalBytes: total, Goroutines: gor}
	h.mu.Lock()
	h.ring[h.next] = s
	h.next++
	if h.next == len(h.ring) {
		h.next, h.full = 0, true
	}
	h.mu.Unlock()
}

// samples returns the history, oldest first.
func (h *history) samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]Sample(nil), h.ring[:h.next]...)
	}
	out := make([]Sample, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

func (h *history) stop() {
	h.mu.Lock()
	pid := h.pid
	h.mu.Unlock()
	if !pid.IsZero() {
		h.n.Exit(pid, gotp.ErrKill)
	}
}
