package cluster

import (
	"encoding/binary"
	"fmt"

	"github.com/gotp/gotp"
)

// frame is one decoded signal.
type frame struct {
	kind     byte
	from, to gotp.PID // also watcher (from) and target (to)
	ref      gotp.Ref
	reason   error
	viaLink  bool
	value    any
	flags    byte
	name     string // kSendNamed, kCall by name, kWhereis
}

// call targets in kCall
const (
	callPID  = 1
	callName = 2
)

// decodeFrame decodes one frame sent by node sender to node self. pg and
// name frames are returned undecoded in d.
func decodeFrame(codec *Codec, sender, self string, d *reader) (f frame, err error) {
	f.kind = d.byte1()
	switch f.kind {
	case kSend:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kExit:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
		f.reason = codec.readReason(d, 0)
		f.viaLink = d.byte1() == 1
	case kLink, kUnlink:
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
	case kMonitor:
		f.ref = d.shortRef(sender)
		f.from = d.shortPID(sender)
		f.to = d.shortPID(self)
	case kDemonitor:
		f.ref = d.shortRef(sender)
		f.to = d.shortPID(self)
	case kDown:
		f.ref = d.shortRef(self)
		f.from = d.shortPID(sender)
		f.reason = codec.readReason(d, 0)
	case kSendNamed:
		f.name = d.str()
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kTick:
	case kBye:
		f.flags = d.byte1()
	case kHello:
		// Only helloConfirm travels on a connection; the other phases
		// are control frames (decodeControl).
		if d.byte1() != helloConfirm {
			d.fail("handshake frame on a connection")
		}
	case kCall:
		f.ref = d.shortRef(sender)
		switch f.flags = d.byte1(); f.flags {
		case callPID:
			f.to = d.shortPID(self)
		case callName:
			f.name = d.str()
		default:
			d.fail("bad call target")
		}
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kReply:
		f.ref = d.shortRef(self)
		if d.err == nil {
			f.value, err = codec.decodeValue(d)
		}
	case kCancel:
		f.ref = d.shortRef(sender)
	case kWhereis:
		f.ref = d.shortRef(sender)
		f.name = d.str()
	case kPG, kNames:
		return f, d.err
	default:
		return f, fmt.Errorf("%w: frame kind %d", ErrDecode, f.kind)
	}
	if err == nil {
		err = d.err
	}
	if err == nil && len(d.b) != 0 {
		err = fmt.Errorf("%w: trailing bytes in frame", ErrDecode)
	}
	return f, err
}

// handleFrame acts on one frame from the connected peer p.
func (c *Cluster) handleFrame(p *peer, body []byte) error {
	c.stats.msgsIn.Add(1)
	p.msgsIn.Add(1)
	d := &reader{b: body}
	f, err := decodeFrame(c.codec, p.name, c.name, d)
	if err != nil {
		return err
	}
	gw := c.gateway()
	switch f.kind {
	case kSend:
		gw.Send(f.from, f.to, f.value)
	case kSendNamed:
		if pid, ok := c.n.Whereis(f.name); ok {
			gw.Send(gotp.PID{}, pid, f.value)
		}
	case kExit:
		gw.Exit(f.from, f.to, f.reason, f.viaLink)
	case kLink:
		gw.Link(f.from, f.to)
	case kUnlink:
		gw.Unlink(f.from, f.to)
	case kMonitor:
		gw.Monitor(f.ref, f.from, f.to)
	case kDemonitor:
		gw.Demonitor(f.ref, f.to)
	case kDown:
		if !c.calls.down(f.ref, f.reason) {
			gw.Down(f.ref, f.from, f.reason)
		}
	case kBye:
		c.dropConn(p, f.flags&byeLeaving != 0, true)
	case kCall:
		c.serveCall(p, f)
	case kReply:
		c.calls.reply(f.ref, f.value)
	case kCancel:
		c.cancelCall(p, f.ref)
	case kWhereis:
		c.answerWhereis(p, f.ref, f.name)
	case kPG:
		return c.pgFrame(p, d)
	case kNames:
		return c.namesFrame(p, d)
	}
	return nil
}

func (d *reader) shortRef(node string) gotp.Ref {
	cr := d.u32()
	id := d.uvarint()
	return gotp.NewRef(node, cr, id)
}

func appendShortRef(b []byte, r gotp.Ref) []byte {
	b = binary.AppendUvarint(b, uint64(r.Creation()))
	return binary.AppendUvarint(b, r.ID())
}

// parseHeader reads a NATS batch header.
func parseHeader(d *reader) (inc incarnation, start int64, conn uint64) {
	if d.byte1() != wireMagic || d.byte1() != wireVersion {
		d.fail("not a gotp batch of this version")
		return
	}
	inc.name = d.str()
	inc.creation = d.u32()
	start = int64(d.uvarint())
	conn = d.uvarint()
	if d.err == nil && (inc.name == "" || inc.creation == 0) {
		d.fail("batch without sender")
	}
	return
}

// control is a decoded control frame: a discovery heartbeat or a
// handshake step over NATS.
type control struct {
	kind   byte
	flags  byte     // kHeartbeat
	addrs  []string // kHeartbeat: where to dial the sender's direct links
	phase  byte     // kHello
	target uint32   // kHello: the receiver's creation it is meant for
	conn   uint64   // kHello: the sender's id of the connection
	echo   uint64   // kHello: the receiver's id, in an ack
}

const maxAddrs = 64

func decodeControl(d *reader) (f control, err error) {
	f.kind = d.byte1()
	switch f.kind {
	case kHeartbeat:
		f.flags = d.byte1()
		n := d.uvarint()
		if n > maxAddrs {
			d.fail("too many addresses")
			break
		}
		for range n {
			if a := d.str(); d.err == nil {
				f.addrs = append(f.addrs, a)
			}
		}
	case kHello:
		f.phase = d.byte1()
		f.target = d.u32()
		f.conn = d.uvarint()
		f.echo = d.uvarint()
		if d.err == nil && (f.phase != helloAsk && f.phase != helloAck || f.conn == 0) {
			d.fail("bad handshake")
		}
	default:
		d.fail(fmt.Sprintf("bad control frame kind %d", f.kind))
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes in control frame")
	}
	return f, d.err
}

func appendHeartbeat(b []byte, addrs []string) []byte {
	b = append(b, kHeartbeat, 0)
	b = binary.AppendUvarint(b, uint64(len(addrs)))
	for _, a := range addrs {
		b = appendStr(b, a)
	}
	return b
}

func appendHello(b []byte, phase byte, target uint32, conn, echo uint64) []byte {
	b = append(b, kHello, phase)
	b = binary.AppendUvarint(b, uint64(target))
	b = binary.AppendUvarint(b, conn)
	return binary.AppendUvarint(b, echo)
}
