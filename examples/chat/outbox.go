package chat

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// lingerTimeout bounds the end of a connection: the writing of what is
// still queued for the client, its last line (BYE, or the ERROR that says
// why it is closed) and the close.
const lingerTimeout = 2 * time.Second

// replyRoom is how many bytes of replies may wait for the client before
// the connection runs no more of its commands (at most half of MaxOutput):
// room for any pipelining a client needs, little work done ahead for one
// that reads slowly.
const replyRoom = 32 << 10

// maxWrite bounds one write to the client: the write timeout then runs
// from the last progress the client made, not from the start of all that
// was queued, and the room the client makes is seen as it goes.
const maxWrite = 64 << 10

// coalesceMax bounds the bytes an outbox holds back while its process has
// more messages to handle (see outbox.flush): replies and events that
// arrive together go to the client in one write.
const coalesceMax = 4 << 10

// outbox is the output side of one connection. The connection's process
// (and, for the messages it commits, the history owner: see
// conn.deliverDirect) queues encoded replies and events without ever
// waiting; a goroutine of
// the outbox's own, started when there is something to write and gone
// when there is not, writes them to the wire. It is what bounds the output
// a connection holds (Config.MaxOutput):
//
//   - events (MSG, ROOM) that others push: one that would take the bytes
//     of events queued over the limit means the client cannot keep up, and
//     the process ends the connection with ERROR slow_consumer;
//   - replies to the client's own commands: the process runs a command
//     only while fewer than replyRoom bytes of replies (at most half the
//     limit) are queued, so a client that sends commands faster than it
//     reads the replies waits (its commands queue, the reader stops
//     reading, TCP pushes back) instead of growing the queue.
//
// Writes are coalesced: reply and event only queue (up to coalesceMax
// bytes, or a quarter of the limit), and the process calls flush once it
// has handled the messages in its mailbox, so that the SENT and the MSG
// one batch of the history brings a client go out in one write.
//
// Its methods are safe for concurrent use.
type outbox struct {
	w       wire
	limit   int
	timeout time.Duration // of one write
	ready   func()        // tells the process there is room for replies again
	failed  func()        // tells the process a write failed: the client is gone
	closed  func()        // called once, after the wire is closed
	replied atomic.Int64  // bytes of replies ever queued (flood control charges them: see commandBucket)

	mu       sync.Mutex // guards the fields below
	queue    []chunk    // queue[head:] is not yet taken by the writer, oldest first; only the writer moves head
	head     int
	events   int     // bytes of events queued or being written
	replies  int     // bytes of replies queued or being written
	writing  bool    // the writer goroutine runs
	waiting  bool    // the process waits for room (ready is owed)
	ending   *ending // set by end: write the queue, then last, then close
	refused  bool    // an event was refused (the client is a slow consumer): every later one is too
	finished bool    // the wire is closed, or the writer is closing it
}

// chunk is one encoded reply or event.
type chunk struct {
	b     []byte
	event bool
}

// ending is how a connection ends: last is written after what is queued
// (unless the queue was dropped), then the wire is closed with why, all by
// deadline.
type ending struct {
	last     []byte
	why      Reason
	deadline time.Time
}

func newOutbox(w wire, limit int, timeout time.Duration) *outbox {
	nop := func() {}
	return &outbox{w: w, limit: limit, timeout: timeout, ready: nop, failed: nop, closed: nop}
}

// reply queues a reply to one of the client's commands; it never waits
// and never refuses (see room).
func (o *outbox) reply(b []byte) {
	o.mu.Lock()
	if o.ending != nil {
		o.mu.Unlock()
		return
	}
	o.queue = append(o.queue, chunk{b: b})
	o.replies += len(b)
	o.replied.Add(int64(len(b)))
	o.startHeldLocked()
}

// startHeldLocked starts writing unless what is queued, none of it being
// written yet, is little enough to wait for flush; it unlocks o.mu.
func (o *outbox) startHeldLocked() {
	if !o.writing && o.events+o.replies < o.coalesceLocked() {
		o.mu.Unlock()
		return
	}
	o.startLocked()
}

func (o *outbox) coalesceLocked() int { return min(coalesceMax, max(o.limit/4, 1)) }

// flush starts writing what is queued, if the writer is not at it. The
// process calls it once it has nothing more to handle for now.
func (o *outbox) flush() {
	o.mu.Lock()
	if o.writing || o.finished || o.head == len(o.queue) {
		o.mu.Unlock()
		return
	}
	o.startLocked()
}

// event queues an event unless the client is too slow for it: the events
// already queued and it would exceed the limit. It never waits; false
// means the connection must end (slow_consumer), and so does every later
// call once one has returned false. An event alone larger than the limit
// is queued when no other event is.
func (o *outbox) event(b []byte) bool {
	o.mu.Lock()
	if o.ending != nil {
		o.mu.Unlock()
		return true // the connection is ending anyway
	}
	if o.refused || o.events > 0 && o.events+len(b) > o.limit {
		o.refused = true
		o.mu.Unlock()
		return false
	}
	o.queue = append(o.queue, chunk{b: b, event: true})
	o.events += len(b)
	o.startHeldLocked()
	return true
}

// room reports whether the process may run a command now: fewer than
// replyRoom bytes of replies (or half the limit) are waiting to be
// written. If not, ready is called once they are.
func (o *outbox) room() bool {
	o.mu.Lock()
	if o.replies < o.roomLocked() {
		o.mu.Unlock()
		return true
	}
	o.waiting = true
	if o.writing || o.finished || o.head == len(o.queue) {
		o.mu.Unlock()
		return false
	}
	o.startLocked() // what waits must be on its way, or ready would never come
	return false
}

func (o *outbox) roomLocked() int { return max(min(o.limit/2, replyRoom), 1) }

// end ends the connection: what is queued is written (unless drop), then
// last, then the wire is closed, within lingerTimeout. Only the first call
// counts.
func (o *outbox) end(last []byte, why Reason, drop bool) {
	o.mu.Lock()
	if o.ending != nil {
		o.mu.Unlock()
		return
	}
	e := &ending{last: last, why: why, deadline: time.Now().Add(lingerTimeout)}
	o.ending = e
	if drop {
		for _, c := range o.queue[o.head:] {
			if c.event {
				o.events -= len(c.b)
			} else {
				o.replies -= len(c.b)
			}
		}
		clear(o.queue[o.head:])
		o.queue = o.queue[:o.head]
	}
	if o.writing {
		// A write in progress may wait for a client that does not read:
		// it gives up in time for last to be written.
		o.w.interruptWrite(time.Now().Add(lingerTimeout / 2))
	}
	if !o.writing {
		o.startLocked()
		return
	}
	o.mu.Unlock()
}

// startLocked starts the writer if it is not running, and unlocks o.mu.
//
// When what is queued is small (coalesceMax at most) and the wire can try
// a write that does not wait (TCP), it tries that first, on the caller's
// goroutine, all the chunks in one buffer: replies and events to a client
// that keeps up then cost one system call and no goroutine. Whatever the
// socket does not take at once goes to the writer.
func (o *outbox) startLocked() {
	if o.writing || o.finished {
		o.mu.Unlock()
		return
	}
	o.writing = true
	if tw, ok := o.w.(tryWriter); ok && o.ending == nil && o.head < len(o.queue) {
		var b []byte
		if pending := o.queue[o.head:]; len(pending) == 1 {
			b = pending[0].b
		} else if size := o.events + o.replies; size <= coalesceMax {
			b = make([]byte, 0, size)
			for _, c := range pending {
				b = append(b, c.b...)
			}
		}
		if b != nil {
			// Whoever appends meanwhile (the process, or the history
			// owner delivering a message) holds o.mu and finds writing
			// set: what it queues is left for the writer started below.
			// An end that drops the queue meanwhile leaves nothing for
			// consumedLocked to take.
			o.mu.Unlock()
			n := tw.tryWrite(b)
			o.mu.Lock()
			o.consumedLocked(n)
			if o.head == len(o.queue) && o.ending == nil {
				o.queue, o.head = o.queue[:0], 0
				o.writing = false
				o.mu.Unlock()
				return
			}
		}
	}
	o.mu.Unlock()
	go o.run()
}

// consumedLocked takes n bytes written from the front of the queue.
func (o *outbox) consumedLocked(n int) {
	for n > 0 && o.head < len(o.queue) {
		c := &o.queue[o.head]
		k := min(n, len(c.b))
		if c.event {
			o.events -= k
		} else {
			o.replies -= k
		}
		n -= k
		if k < len(c.b) {
			c.b = c.b[k:]
			return
		}
		*c = chunk{}
		o.head++
	}
}

// A tryWriter is a wire that can write without waiting: tryWrite writes
// what the socket takes at once, and returns how much that was.
type tryWriter interface {
	tryWrite(b []byte) int
}

// queued returns the bytes of replies and events queued or being written.
func (o *outbox) queued() (replies, events int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replies, o.events
}

// run is the writer: it writes what is queued, maxWrite bytes at a time,
// until the queue is empty (it then ends) or, once the connection is
// ending, until the wire is closed.
//
// It takes a batch from the front of the queue, queue[head:], and writes
// it without the lock while the process appends behind it; the queue's
// array is reused or compacted only here, between writes, when no batch is
// out.
func (o *outbox) run() {
	var bufs [][]byte
	for {
		o.mu.Lock()
		if o.head == len(o.queue) {
			clear(o.queue)
			o.queue, o.head = o.queue[:0], 0
			if e := o.ending; e != nil {
				o.finished = true
				o.mu.Unlock()
				o.w.finish(e.last, e.why, e.deadline)
				o.closed()
				return
			}
			o.writing = false
			o.mu.Unlock()
			return
		}
		if o.head > len(o.queue)/2 && o.head > 64 { // compact: the front is written
			n := copy(o.queue, o.queue[o.head:])
			clear(o.queue[n:])
			o.queue, o.head = o.queue[:n], 0
		}
		end, size := o.head, 0
		for end < len(o.queue) && (end == o.head || size+len(o.queue[end].b) <= maxWrite) {
			size += len(o.queue[end].b)
			end++
		}
		batch := o.queue[o.head:end:end]
		o.head = end
		deadline := time.Now().Add(o.timeout)
		if e := o.ending; e != nil && e.deadline.Before(deadline) {
			deadline = e.deadline
		}
		o.mu.Unlock()

		bufs = bufs[:0]
		for _, c := range batch {
			bufs = append(bufs, c.b)
		}
		n, err := o.w.write(bufs, deadline)
		clear(bufs)

		o.mu.Lock()
		for _, c := range batch {
			if c.event {
				o.events -= len(c.b)
			} else {
				o.replies -= len(c.b)
			}
		}
		ready := o.waiting && o.replies < o.roomLocked()
		if ready {
			o.waiting = false
		}
		if err != nil {
			o.finished = true
			e := o.ending
			last := restOfChunk(batch, n)
			clear(o.queue)
			o.queue, o.head = nil, 0
			o.mu.Unlock()
			if e != nil {
				// Ending (slow_consumer, or a stop while the client did not
				// read): the write was interrupted. Finish the line it was
				// in, so that the client's last line is whole, and say why.
				o.w.finish(append(last, e.last...), e.why, e.deadline)
			} else {
				o.w.finish(nil, "", time.Now())
				o.failed()
			}
			o.closed()
			return
		}
		clear(batch) // written: let the bytes go
		o.mu.Unlock()
		if ready {
			o.ready()
		}
	}
}

// restOfChunk returns what is left unwritten of the chunk in which the
// n-th byte of batch falls (nil if n ends on a chunk boundary).
func restOfChunk(batch []chunk, n int64) []byte {
	for _, c := range batch {
		if n < int64(len(c.b)) {
			if n == 0 {
				return nil
			}
			return bytes.Clone(c.b[n:])
		}
		n -= int64(len(c.b))
	}
	return nil
}
