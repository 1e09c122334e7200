package gotp

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A Batch sends messages to many processes and wakes them together; see
// Node.Batch. It belongs to the goroutine running the Batch's function and
// must not be used after that function returns.
type Batch struct {
	n     *Node
	from  PID
	woken []*Process
	held  bool // a goroutine is counted for woken (see deliverDeferred)
	done  bool
}

// Batch calls fn with a Batch and returns when fn has returned. Messages
// sent with the Batch's Send are delivered at once, as with Send (same
// order guarantees, same drops); what waits until fn returns is the start
// of the handler-mode processes they woke: instead of one goroutine per
// process, a few goroutines (one per CPU at most) then handle them all,
// one after another, which makes a broadcast to thousands of idle
// processes several times cheaper. Function processes and Resident ones
// are woken at once, as by Send.
//
// A handler that blocks for long does not hold back the others: when the
// batch's goroutines make no progress for a millisecond, another goroutine
// is started to take the processes not yet begun. Batch is safe to call
// from any goroutine; each Batch value is for the goroutine that runs fn.
//
// fn must not wait for a handler-mode process it has sent to: that process
// is not handled before fn returns, so a server.Call to it from fn waits
// until the call's timeout. For the same reason Node.Stop, once fn has
// woken a handler-mode process, waits for fn to return.
func (n *Node) Batch(fn func(b *Batch)) {
	n.batch(PID{}, fn)
}

// Batch is Node.Batch with this process as the sender (for remote
// processes, which learn the sender).
func (p *Process) Batch(fn func(b *Batch)) {
	p.n.batch(p.Self(), fn)
}

func (n *Node) batch(from PID, fn func(b *Batch)) {
	b := &Batch{n: n, from: from}
	defer b.flush()
	fn(b)
}

// Send delivers msg to the process to, as Node.Send does. It never blocks
// and never yields the processor: goroutines it wakes (function processes
// waiting in Receive, and Resident processes) are run by the other
// processors meanwhile, and by this one once the caller blocks or the
// scheduler preempts it. Not yielding lets a caller that broadcasts in a
// loop run ahead of its receivers, which then find several messages each
// time they wake, instead of one.
func (b *Batch) Send(to PID, msg any) {
	if b.done {
		panic("gotp: Batch used after its function returned")
	}
	if p := b.n.lookup(to); p != nil {
		if p.deliverDeferred(msg, &b.held) {
			b.woken = append(b.woken, p)
		}
		return
	}
	b.n.send(b.from, to, msg)
}

// batchChunk is how many processes a batch worker takes at a time.
const batchChunk = 32

// batchStall is how long a batch's workers may make no progress before
// another worker is started.
const batchStall = time.Millisecond

func (b *Batch) flush() {
	b.done = true
	woken := b.woken
	b.woken = nil
	n := b.n
	if len(woken) <= 2 {
		for _, p := range woken {
			n.goroutines.add()
			go p.runHandler()
		}
		if b.held {
			n.goroutines.done()
		}
		return
	}
	chunks := (len(woken) + batchChunk - 1) / batchChunk
	r := &wakeRun{n: n, procs: woken, pos: make([]chunkPos, chunks)}
	for c := range r.pos {
		r.pos[c].next.Store(int64(c * batchChunk))
	}
	workers := min(runtime.GOMAXPROCS(0), chunks)
	// The count the batch holds (see deliverDeferred) becomes the run's
	// own, until every process is done: see stalled.
	r.mu.Lock() // stalled must see the timer set
	r.timer = time.AfterFunc(batchStall, r.stalled)
	r.mu.Unlock()
	n.goroutines.addN(workers)
	for range workers {
		go r.work(false)
	}
}

// wakeRun is one batch's handler processes being handled by a few
// goroutines. Processes are split into chunks taken in turn; within a
// chunk they are claimed one by one (pos[c].next), so that a worker that
// finds another stuck can take over the rest of its chunk.
type wakeRun struct {
	n        *Node
	procs    []*Process
	pos      []chunkPos
	nextC    atomic.Int64 // next chunk not yet taken
	finished atomic.Int64 // processes handled
	timer    *time.Timer

	mu       sync.Mutex // orders the end of the run with stalled's spawns
	over     bool
	lastSeen int64 // finished at the previous stall check
}

type chunkPos struct {
	next atomic.Int64 // next process of the chunk not yet claimed
	_    [56]byte     // one cache line each: chunks are claimed from different CPUs
}

// work handles chunks until none is left. A rescuer (started by stalled)
// first takes what is left in chunks already taken.
func (r *wakeRun) work(rescuer bool) {
	defer r.n.goroutines.done()
	if rescuer {
		for c := range min(int(r.nextC.Load()), len(r.pos)) {
			r.runChunk(c)
		}
	}
	for {
		c := int(r.nextC.Add(1) - 1)
		if c >= len(r.pos) {
			return
		}
		r.runChunk(c)
	}
}

// runChunk claims and handles the processes of chunk c not yet claimed.
func (r *wakeRun) runChunk(c int) {
	end := int64(min((c+1)*batchChunk, len(r.procs)))
	pos := &r.pos[c].next
	done := int64(0)
	draining := false
	defer func() {
		if draining {
			// A handler called runtime.Goexit: its process has exited
			// (see handle) and counts as handled; this goroutine ends,
			// and the stall check starts another for what is left.
			done++
		}
		r.progress(done)
	}()
	for {
		i := pos.Load()
		if i >= end {
			break
		}
		if !pos.CompareAndSwap(i, i+1) {
			continue
		}
		draining = true
		r.procs[i].drain()
		draining = false
		done++
		if done == 8 { // report progress now and then, not per process
			r.progress(done)
			done = 0
		}
	}
}

func (r *wakeRun) progress(done int64) {
	if done == 0 {
		return
	}
	if r.finished.Add(done) != int64(len(r.procs)) {
		return
	}
	r.mu.Lock()
	r.over = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.n.goroutines.done()
}

// stalled runs every batchStall while the run is not over: if no process
// was finished since the last check, the workers are all busy with slow
// handlers, and another worker is started.
func (r *wakeRun) stalled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.over {
		return
	}
	if !r.unclaimed() {
		return // every process has a goroutine: nothing left to rescue
	}
	if f := r.finished.Load(); f != r.lastSeen {
		r.lastSeen = f
	} else {
		r.n.goroutines.add() // while the run holds its own count: Stop waits for it
		go r.work(true)
	}
	r.timer.Reset(batchStall)
}

// unclaimed reports whether some process of the run is not yet claimed.
func (r *wakeRun) unclaimed() bool {
	if int(r.nextC.Load()) < len(r.pos) {
		return true
	}
	for c := range r.pos {
		if int(r.pos[c].next.Load()) < min((c+1)*batchChunk, len(r.procs)) {
			return true
		}
	}
	return false
}
