package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Wire format. Signals travel as frames, in order, on one connection per
// pair of nodes: a direct link (a TCP connection, see link.go) or NATS.
// On a direct link the stream after the handshake is frame*. Over NATS
// every message is a batch:
//
//	batch  = magic(0x67) version(2) str(node) uvarint(creation) uvarint(start) uvarint(conn) frame*
//	frame  = uvarint(len) body            (len bytes)
//	body   = kind(1) fields...
//
// conn is the receiver's id of the connection the batch belongs to, or 0
// for a control batch (discovery heartbeats and handshakes), which is
// outside any connection. A batch for a connection that is not the
// receiver's current one was sent before a nodedown and is dropped unread.
//
// str is uvarint(len) bytes. A PID or Ref of the sending node is written
// as uvarint(creation) uvarint(id) (the node is the connection's); one of
// the receiving node likewise. Reasons and values are described at
// appendReason and Codec.AppendValue. The decoder never trusts a length:
// every read is bounds-checked and fails with ErrDecode.
const (
	wireMagic   = 0x67
	wireVersion = 2
)

// frame kinds
const (
	kSend      = 1  // from(local pid) to(remote pid) value
	kExit      = 2  // from to reason viaLink(1)
	kLink      = 3  // from to
	kUnlink    = 4  // from to
	kMonitor   = 5  // ref(sender's) watcher(sender's) target(receiver's)
	kDemonitor = 6  // ref(sender's) target(receiver's)
	kDown      = 7  // ref(receiver's) target(sender's) reason
	kHeartbeat = 8  // control: flags(1) uvarint(n) n*str(direct address)
	kPG        = 9  // pg replication: op(1) ...
	kSendNamed = 10 // str(name) value: to the process registered under name
	kHello     = 11 // control: phase(1) uvarint(receiver's creation) uvarint(sender's conn) uvarint(receiver's conn, or 0)
	kTick      = 12 // nothing: the connection is alive
	kBye       = 13 // flags(1): the sender drops the connection (byeLeaving: and leaves for good)
	kCall      = 14 // ref(sender's) to(1: pid | 2: name) [shortPID | str] value: a call with its monitor
	kReply     = 15 // ref(receiver's) value: the reply to kCall; the server's node has dropped the monitor
	kCancel    = 16 // ref(sender's): the caller gave up on kCall
	kWhereis   = 17 // ref(sender's) str(name): which process holds name there (answered with kReply)
	kNames     = 18 // cluster-wide names: op(1) ...
)

// handshake phases of kHello over NATS
const (
	helloAsk     = 1 // initiator to responder: sender's conn
	helloAck     = 2 // responder to initiator: sender's conn, echo of the initiator's
	helloConfirm = 3 // initiator, first frame on the connection
)

// kBye flags
const byeLeaving = 1

// reader is a bounds-checked cursor over wire bytes. The first error
// sticks; later reads return zero values.
type reader struct {
	b    []byte
	err  error
	nest int // depth of nested values
}

func (d *reader) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrDecode, what)
	}
	d.b = nil
}

func (d *reader) byte1() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail("short byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *reader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) u32() uint32 {
	v := d.uvarint()
	if v > 0xffffffff {
		d.fail("value out of range")
		return 0
	}
	return uint32(v)
}

func (d *reader) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length past end")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *reader) str() string { return string(d.bytes()) }

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendPID writes a full PID (node, creation, id).
func appendPID(b []byte, p gotp.PID) []byte {
	b = appendStr(b, p.Node())
	b = binary.AppendUvarint(b, uint64(p.Creation()))
	return binary.AppendUvarint(b, p.ID())
}

func (d *reader) pid() gotp.PID {
	node := d.str()
	cr := d.u32()
	id := d.uvarint()
	if d.err != nil || (node == "" && (cr != 0 || id != 0)) {
		if d.err == nil {
			d.fail("pid without node")
		}
		return gotp.PID{}
	}
	return gotp.NewPID(node, cr, id)
}

// appendShortPID writes a PID whose node is known from context.
func appendShortPID(b []byte, p gotp.PID) []byte {
	b = binary.AppendUvarint(b, uint64(p.Creation()))
	return binary.AppendUvarint(b, p.ID())
}

func (d *reader) shortPID(node string) gotp.PID {
	cr := d.u32()
	id := d.uvarint()
	if d.err != nil || (cr == 0 && id == 0) {
		return gotp.PID{}
	}
	return gotp.NewPID(node, cr, id)
}

func appendRef(b []byte, r gotp.Ref) []byte {
	b = appendStr(b, r.Node())
	b = binary.AppendUvarint(b, uint64(r.Creation()))
	return binary.AppendUvarint(b, r.ID())
}

func (d *reader) ref() gotp.Ref {
	node := d.str()
	cr := d.u32()
	id := d.uvarint()
	if d.err != nil {
		return gotp.Ref{}
	}
	return gotp.NewRef(node, cr, id)
}

// RemoteError is an error that crossed nodes: its message, and the
// registered sentinels it wrapped (so errors.Is keeps working). A reason
// that was exactly a registered sentinel arrives as that sentinel itself.
type RemoteError struct {
	Msg  string
	Errs []error // registered sentinels the original wrapped
}

// Error returns the original error's message.
func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the sentinels the original error wrapped.
func (e *RemoteError) Unwrap() []error { return e.Errs }

// reason kinds
const (
	rNil      = 0
	rSentinel = 1 // str(name)
	rRemote   = 2 // str(msg) uvarint(n) n*str(name)
	rPanic    = 3 // reason(value, when an error) or str(value) ; bytes(stack)
	rUnknown  = 4 // sentinel name this node does not know: str(name) str(msg)
)

const maxStack = 16 << 10

// appendReason writes an exit reason or error value.
func (c *Codec) appendReason(b []byte, err error) []byte {
	if err == nil {
		return append(b, rNil)
	}
	tb := c.tables.Load()
	for _, s := range tb.errs {
		if s.err == err {
			b = append(b, rSentinel)
			return appendStr(b, s.name)
		}
	}
	if pe, ok := err.(*gotp.PanicError); ok {
		b = append(b, rPanic)
		if ve, isErr := pe.Value.(error); isErr {
			b = append(b, 1)
			b = c.appendReason(b, ve)
		} else {
			b = append(b, 0)
			b = appendStr(b, fmt.Sprint(pe.Value))
		}
		st := pe.Stack
		if len(st) > maxStack {
			st = st[:maxStack]
		}
		return appendStr(b, string(st))
	}
	if re, ok := err.(*RemoteError); ok && len(re.Errs) == 0 {
		b = append(b, rRemote)
		b = appendStr(b, re.Msg)
		return append(b, 0)
	}
	var names []string
	for _, s := range tb.errs {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	b = append(b, rRemote)
	b = appendStr(b, err.Error())
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendStr(b, n)
	}
	return b
}

func (c *Codec) sentinelByName(name string) error {
	for _, s := range c.tables.Load().errs {
		if s.name == name {
			return s.err
		}
	}
	return nil
}

func (c *Codec) readReason(d *reader, depth int) error {
	if depth > 8 {
		d.fail("reason nested too deep")
		return nil
	}
	switch k := d.byte1(); k {
	case rNil:
		return nil
	case rSentinel:
		name := d.str()
		if d.err != nil {
			return nil
		}
		if e := c.sentinelByName(name); e != nil {
			return e
		}
		return &RemoteError{Msg: name}
	case rRemote:
		msg := d.str()
		n := d.uvarint()
		if n > 64 {
			d.fail("too many wrapped errors")
			return nil
		}
		re := &RemoteError{Msg: msg}
		for range n {
			if e := c.sentinelByName(d.str()); e != nil {
				re.Errs = append(re.Errs, e)
			}
		}
		if d.err != nil {
			return nil
		}
		return re
	case rPanic:
		pe := &gotp.PanicError{}
		switch d.byte1() {
		case 1:
			pe.Value = c.readReason(d, depth+1)
		case 0:
			pe.Value = d.str()
		default:
			d.fail("bad panic value")
		}
		if st := d.bytes(); len(st) > 0 {
			pe.Stack = append([]byte(nil), st...)
		}
		if d.err != nil {
			return nil
		}
		return pe
	default:
		d.fail(fmt.Sprintf("bad reason kind %d", k))
		return nil
	}
}

// Hand-written value forms of the built-in types that hold any or error.

func encErrValue(c *Codec, b []byte, v any) ([]byte, error) {
	return c.appendReason(b, v.(error)), nil
}

func decErrValue(c *Codec, d *reader) (any, error) {
	e := c.readReason(d, 0)
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

func encDown(c *Codec, b []byte, v any) ([]byte, error) {
	m := v.(gotp.Down)
	b = appendRef(b, m.Ref)
	b = appendPID(b, m.PID)
	return c.appendReason(b, m.Reason), nil
}

func decDown(c *Codec, d *reader) (any, error) {
	m := gotp.Down{Ref: d.ref(), PID: d.pid()}
	m.Reason = c.readReason(d, 0)
	return m, d.err
}

func encExit(c *Codec, b []byte, v any) ([]byte, error) {
	m := v.(gotp.Exit)
	b = appendPID(b, m.From)
	return c.appendReason(b, m.Reason), nil
}

func decExit(c *Codec, d *reader) (any, error) {
	m := gotp.Exit{From: d.pid()}
	m.Reason = c.readReason(d, 0)
	return m, d.err
}

func encReply(c *Codec, b []byte, v any) ([]byte, error) {
	m := v.(server.ReplyMessage)
	b = appendRef(b, m.Ref)
	return c.appendNested(b, m.Value)
}

func decReply(c *Codec, d *reader) (any, error) {
	m := server.ReplyMessage{Ref: d.ref()}
	var err error
	m.Value, err = c.readNested(d)
	return m, err
}

func encRequest(c *Codec, b []byte, v any) ([]byte, error) {
	m := v.(server.Request)
	b = appendPID(b, m.Caller)
	b = appendRef(b, m.Ref)
	return c.appendNested(b, m.Body)
}

func decRequest(c *Codec, d *reader) (any, error) {
	m := server.Request{Caller: d.pid(), Ref: d.ref()}
	var err error
	m.Body, err = c.readNested(d)
	return m, err
}

func encCast(c *Codec, b []byte, v any) ([]byte, error) {
	return c.appendNested(b, v.(server.CastMessage).Body)
}

func decCast(c *Codec, d *reader) (any, error) {
	body, err := c.readNested(d)
	return server.CastMessage{Body: body}, err
}

func encStop(c *Codec, b []byte, v any) ([]byte, error) {
	return c.appendReason(b, v.(server.StopRequest).Reason), nil
}

func decStop(c *Codec, d *reader) (any, error) {
	r := c.readReason(d, 0)
	return server.StopRequest{Reason: r}, d.err
}

// appendNested writes a value inside a hand-written form: length-prefixed
// so that the reader can bound it.
func (c *Codec) appendNested(b []byte, v any) ([]byte, error) {
	inner, err := c.AppendValue(nil, v)
	if err != nil {
		return b, err
	}
	b = binary.AppendUvarint(b, uint64(len(inner)))
	return append(b, inner...), nil
}

func (c *Codec) readNested(d *reader) (any, error) {
	inner := d.bytes()
	if d.err != nil {
		return nil, d.err
	}
	d2 := &reader{b: inner, nest: d.nest + 1}
	if d2.nest > 16 {
		return nil, fmt.Errorf("%w: values nested too deep", ErrDecode)
	}
	v, err := c.decodeValue(d2)
	if err == nil && len(d2.b) != 0 {
		err = fmt.Errorf("%w: trailing bytes in value", ErrDecode)
	}
	return v, err
}
