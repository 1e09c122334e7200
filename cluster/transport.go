package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Send sends msg to the process to, like Node.Send, but reports what
// Node.Send cannot: a message the codec refuses (*UnregisteredTypeError,
// ErrTooLarge), a node that is not connected (gotp.ErrNoConnection), or a
// queue over Options.MaxPending. A nil error means the message was queued
// for the connection, not that it arrived. A local PID is sent to
// directly.
func (c *Cluster) Send(to gotp.PID, msg any) error {
	if to.Node() == c.name {
		c.n.Send(to, msg)
		return nil
	}
	return c.sendFrom(gotp.PID{}, to, msg)
}

// SendNamed sends msg to the process registered under name on node (Erlang's
// {Name, Node} ! Msg); the name is looked up there when the message
// arrives, and the message is dropped if nobody holds it. Errors are those
// of Send. node may be this node's own name.
func (c *Cluster) SendNamed(node, name string, msg any) error {
	if node == c.name {
		c.n.SendTo(gotp.Name(name), msg)
		return nil
	}
	p := c.peers()[node]
	if p == nil {
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %s on %s: %w", name, node, gotp.ErrNoConnection)
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kSendNamed)
	*b = appendStr(*b, name)
	return c.enqueueValue(p, b, msg)
}

// enqueueValue appends msg, encoded, to the pooled frame *b and queues it
// for p.
func (c *Cluster) enqueueValue(p *peer, b *[]byte, msg any) error {
	var err error
	*b, err = c.codec.AppendValue(*b, msg)
	if err != nil {
		c.stats.encodeErrors.Add(1)
		return err
	}
	return c.enqueue(p, *b)
}

func (c *Cluster) sendFrom(from, to gotp.PID, msg any) error {
	p := c.peerFor(to)
	if p == nil {
		c.stats.dropped.Add(1)
		return fmt.Errorf("cluster: send to %v: %w", to, gotp.ErrNoConnection)
	}
	b := c.getBuf()
	defer c.putBuf(b)
	*b = append(*b, kSend)
	*b = appendShortPID(*b, from)
	*b = appendShortPID(*b, to)
	return c.enqueueValue(p, b, msg)
}

// peerFor returns the peer that owns pid, if connected and of the right
// incarnation.
func (c *Cluster) peerFor(pid gotp.PID) *peer {
	p := c.peers()[pid.Node()]
	if p == nil || p.creation != pid.Creation() {
		return nil
	}
	return p
}

// transport is the gotp.Transport of a cluster.
type transport struct{ c *Cluster }

func (t transport) Send(from, to gotp.PID, msg any) {
	c := t.c
	var err error
	if to.ID() == sinkID {
		if rm, ok := msg.(server.ReplyMessage); ok {
			err = c.sendReply(to, rm)
		}
	} else {
		err = c.sendFrom(from, to, msg)
	}
	if err == nil || errors.Is(err, gotp.ErrNoConnection) || err == errQueueFull {
		return
	}
	key := fmt.Sprintf("%T", msg)
	if _, seen := c.logged.LoadOrStore(key, true); !seen {
		c.log.Warn("cluster: message not sent (logged once per type)", "to", to, "type", key, "err", err)
	}
}

// signal queues a frame for the node of to, or reports why it cannot:
// the node is not connected (noconnection) or to is of an old incarnation
// (noproc).
func (c *Cluster) signal(to gotp.PID, build func(b []byte) []byte) error {
	p := c.peers()[to.Node()]
	if p == nil {
		c.stats.dropped.Add(1)
		return gotp.ErrNoConnection
	}
	if p.creation != to.Creation() {
		c.stats.dropped.Add(1)
		return gotp.ErrNoProc
	}
	b := c.getBuf()
	*b = build(*b)
	err := c.enqueue(p, *b)
	c.putBuf(b)
	if err != nil && errors.Is(err, gotp.ErrNoConnection) {
		return gotp.ErrNoConnection
	}
	return nil
}

func (t transport) Exit(from, to gotp.PID, reason error, viaLink bool) {
	c := t.c
	_ = c.signal(to, func(b []byte) []byte {
		b = append(b, kExit)
		b = appendShortPID(b, from)
		b = appendShortPID(b, to)
		b = c.codec.appendReason(b, reason)
		if viaLink {
			return append(b, 1)
		}
		return append(b, 0)
	})
}

func (t transport) Link(from, to gotp.PID) {
	c := t.c
	err := c.signal(to, func(b []byte) []byte {
		b = append(b, kLink)
		b = appendShortPID(b, from)
		return appendShortPID(b, to)
	})
	if err != nil {
		c.gateway().Exit(to, from, err, true)
	}
}

func (t transport) Unlink(from, to gotp.PID) {
	_ = t.c.signal(to, func(b []byte) []byte {
		b = append(b, kUnlink)
		b = appendShortPID(b, from)
		return appendShortPID(b, to)
	})
}

func (t transport) Monitor(ref gotp.Ref, watcher, target gotp.PID) {
	c := t.c
	err := c.signal(target, func(b []byte) []byte {
		b = append(b, kMonitor)
		b = appendShortRef(b, ref)
		b = appendShortPID(b, watcher)
		return appendShortPID(b, target)
	})
	if err != nil {
		c.gateway().Down(ref, target, err)
	}
}

func (t transport) Demonitor(ref gotp.Ref, target gotp.PID) {
	_ = t.c.signal(target, func(b []byte) []byte {
		b = append(b, kDemonitor)
		b = appendShortRef(b, ref)
		return appendShortPID(b, target)
	})
}

func (t transport) Down(ref gotp.Ref, watcher, target gotp.PID, reason error) {
	c := t.c
	p := c.peers()[ref.Node()]
	if p == nil || p.creation != ref.Creation() {
		c.stats.dropped.Add(1)
		return
	}
	p.takeInCall(ref) // the monitor of a call: the call is over
	b := c.getBuf()
	*b = append(*b, kDown)
	*b = appendShortRef(*b, ref)
	*b = appendShortPID(*b, target)
	*b = c.codec.appendReason(*b, reason)
	_ = c.enqueue(p, *b)
	c.putBuf(b)
}

func (t transport) Close() { _ = t.c.Close() }

// CallRemote implements server.RemoteCaller (see call.go).
func (t transport) CallRemote(ctx context.Context, to gotp.Dest, req any, timeout time.Duration) (any, bool, error) {
	return t.c.callRemote(ctx, to, req, timeout)
}
