package main

import (
	"fmt"
	"io"
	"runtime/metrics"
	"time"
)

// runtimeStats is what the Go runtime of the server's process says about
// one moment: garbage collections so far, objects allocated so far, and
// the scheduler's latency histogram (how long goroutines waited, runnable,
// before they ran). The difference of two tells what happened between.
type runtimeStats struct {
	gcs, allocs uint64
	allocBytes  uint64
	gcCPU       float64   // seconds of CPU the GC spent (marking and pauses)
	sched       []uint64  // counts of /sched/latencies:seconds
	bounds      []float64 // its buckets' boundaries, in seconds
}

var runtimeMetrics = []string{"/gc/cycles/total:gc-cycles", "/gc/heap/allocs:objects", "/sched/latencies:seconds", "/gc/heap/allocs:bytes", "/cpu/classes/gc/total:cpu-seconds"}

func readRuntime() runtimeStats {
	s := make([]metrics.Sample, len(runtimeMetrics))
	for i, n := range runtimeMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	var r runtimeStats
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.gcs = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		r.allocs = s[1].Value.Uint64()
	}
	if s[3].Value.Kind() == metrics.KindUint64 {
		r.allocBytes = s[3].Value.Uint64()
	}
	if s[4].Value.Kind() == metrics.KindFloat64 {
		r.gcCPU = s[4].Value.Float64()
	}
	if s[2].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[2].Value.Float64Histogram()
		r.sched = append([]uint64(nil), h.Counts...)
		r.bounds = h.Buckets
	}
	return r
}

// schedQuantile returns the upper bound of the bucket of the q-quantile
// of the scheduler latencies sampled from a to b (0 if none were).
func schedQuantile(a, b runtimeStats, q float64) time.Duration {
	if len(a.sched) != len(b.sched) {
		return 0
	}
	var total uint64
	for i := range b.sched {
		total += b.sched[i] - a.sched[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var acc uint64
	for i := range b.sched {
		if acc += b.sched[i] - a.sched[i]; acc > want {
			return time.Duration(b.bounds[i+1] * float64(time.Second))
		}
	}
	return 0
}

// reportRuntime prints what the server's runtime did from a to b, over
// msgs messages: the server is this process, so the figures are the
// server's (with chat-load's own sampling of its memory).
func reportRuntime(out io.Writer, a, b runtimeStats, msgs int) {
	fmt.Fprintf(out, "server runtime over the load: %d GCs (%.1f ms of CPU), %.1f allocations (%.0f B) per message; scheduler latency p50 %v, p99 %v, p99.9 %v (bucket bounds)\n",
		b.gcs-a.gcs, (b.gcCPU-a.gcCPU)*1e3, float64(b.allocs-a.allocs)/float64(max(msgs, 1)), float64(b.allocBytes-a.allocBytes)/float64(max(msgs, 1)),
		schedQuantile(a, b, .5), schedQuantile(a, b, .99), schedQuantile(a, b, .999))
}
