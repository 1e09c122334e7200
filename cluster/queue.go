package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gotp/gotp"
)

var errQueueFull = errors.New("cluster: send queue full")

// enqueue appends one frame to p's queue and wakes its writer (the link's,
// or the NATS writer). The queue holds at most Options.MaxPending bytes;
// beyond that the frame is dropped and counted.
func (c *Cluster) enqueue(p *peer, frame []byte) error { return c.enqueueNow(p, frame, false) }

// enqueueNow is enqueue; with now, a direct link's frame is written on
// this goroutine if nothing is being written, however recent the last
// write (see kick).
func (c *Cluster) enqueueNow(p *peer, frame []byte, now bool) error {
	if len(frame) > c.opts.MaxMessageSize {
		c.stats.encodeErrors.Add(1)
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, len(frame), c.opts.MaxMessageSize)
	}
	limit := c.batchLimit
	p.mu.Lock()
	if p.down.Load() || c.closed.Load() {
		p.mu.Unlock()
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %s: %w", p.name, gotp.ErrNoConnection)
	}
	if p.pending+len(frame) > c.opts.MaxPending {
		p.mu.Unlock()
		c.stats.dropped.Add(1)
		return errQueueFull
	}
	if len(p.buf)+len(frame)+binary.MaxVarintLen32 > limit && len(p.buf) > len(p.hdr) {
		p.full = append(p.full, p.buf)
		p.buf = nil
	}
	if p.buf == nil {
		b := p.spare
		p.spare = nil
		if b == nil {
			b = c.getBatch()
		}
		p.buf = append(b, p.hdr...)
		p.pending += len(p.hdr)
	}
	n := len(p.buf)
	p.buf = binary.AppendUvarint(p.buf, uint64(len(frame)))
	p.buf = append(p.buf, frame...)
	p.pending += len(p.buf) - n
	p.msgsOut++
	c.stats.msgsOut.Add(1)
	if l := p.link; l != nil {
		l.kick(p, now) // releases p.mu
		return nil
	}
	sched := !p.scheduled
	p.scheduled = true
	p.mu.Unlock()
	if sched {
		c.readyMu.Lock()
		c.ready = append(c.ready, p)
		c.readyMu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// getBatch returns an empty batch buffer, reused when one is free.
func (c *Cluster) getBatch() []byte {
	if b, ok := c.batches.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4096)
}

func (c *Cluster) putBatch(b []byte) {
	if cap(b) > 1<<20 || cap(b) == 0 {
		return // do not keep a burst's buffer
	}
	c.batches.Put(&b)
}

// recycle keeps b, written, as p's next batch buffer (or in the pool).
func (c *Cluster) recycle(p *peer, b []byte) {
	if cap(b) > 1<<20 || cap(b) == 0 {
		return
	}
	p.mu.Lock()
	if p.spare == nil {
		p.spare = b[:0]
		b = nil
	}
	p.mu.Unlock()
	if b != nil {
		c.putBatch(b)
	}
}

func (c *Cluster) getBuf() *[]byte {
	if b, ok := c.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 256)
	return &b
}

func (c *Cluster) putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	c.bufs.Put(b)
}
