package gotp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// PID names one process: the node it lives on, the incarnation (creation) of
// that node, and a number unique within that incarnation. PIDs are small
// comparable values: use them as map keys, compare them with ==, send them
// to other processes and other nodes. The zero PID names no process; sending
// to it is a no-op.
//
// A PID is never reused by a node incarnation, so a PID of an exited
// process stays dead: messages to it are dropped, monitors of it report
// [ErrNoProc].
type PID struct {
	node     string
	creation uint32
	id       uint64
}

// NewPID builds a PID from its parts. It is meant for transports and
// decoders that carry PIDs between nodes; programs get PIDs from Spawn.
func NewPID(node string, creation uint32, id uint64) PID {
	return PID{node: node, creation: creation, id: id}
}

// Node returns the name of the node the process lives on.
func (p PID) Node() string { return p.node }

// Creation returns the incarnation of the node that spawned the process.
func (p PID) Creation() uint32 { return p.creation }

// ID returns the process number, unique within its node incarnation.
func (p PID) ID() uint64 { return p.id }

// IsZero reports whether p is the zero PID, which names no process.
func (p PID) IsZero() bool { return p == PID{} }

// String formats p as <node.creation.id>, for example <chat.3.42>. The zero
// PID formats as <0>. [ParsePID] reads this form back.
func (p PID) String() string {
	if p.IsZero() {
		return "<0>"
	}
	var b strings.Builder
	b.Grow(len(p.node) + 24)
	b.WriteByte('<')
	b.WriteString(p.node)
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(uint64(p.creation), 10))
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(p.id, 10))
	b.WriteByte('>')
	return b.String()
}

// ErrBadPID is returned (wrapped) by [ParsePID] for text that is not a PID.
var ErrBadPID = errors.New("gotp: malformed pid")

// ParsePID parses the form written by [PID.String]. The node name may itself
// contain dots; the last two dot-separated fields are the creation and the
// process number.
func ParsePID(s string) (PID, error) {
	if s == "<0>" {
		return PID{}, nil
	}
	if len(s) < 7 || s[0] != '<' || s[len(s)-1] != '>' {
		return PID{}, fmt.Errorf("%w: %q", ErrBadPID, s)
	}
	body := s[1 : len(s)-1]
	i := strings.LastIndexByte(body, '.')
	if i <= 0 {
		return PID{}, fmt.Errorf("%w: %q", ErrBadPID, s)
	}
	id, err := strconv.ParseUint(body[i+1:], 10, 64)
	if err != nil || id == 0 {
		return PID{}, fmt.Errorf("%w: %q: bad process number", ErrBadPID, s)
	}
	body = body[:i]
	j := strings.LastIndexByte(body, '.')
	if j <= 0 {
		return PID{}, fmt.Errorf("%w: %q", ErrBadPID, s)
	}
	cr, err := strconv.ParseUint(body[j+1:], 10, 32)
	if err != nil {
		return PID{}, fmt.Errorf("%w: %q: bad creation", ErrBadPID, s)
	}
	return PID{node: body[:j], creation: uint32(cr), id: id}, nil
}

// MarshalText implements encoding.TextMarshaler with the form of String.
func (p PID) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePID.
func (p *PID) UnmarshalText(b []byte) error {
	q, err := ParsePID(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Ref is a reference unique among all references made by a node
// incarnation: it names a monitor, a timer or a call. Refs are comparable.
type Ref struct {
	node     string
	creation uint32
	id       uint64
}

// NewRef builds a Ref from its parts, for transports and decoders.
func NewRef(node string, creation uint32, id uint64) Ref {
	return Ref{node: node, creation: creation, id: id}
}

// Node returns the name of the node that made the reference.
func (r Ref) Node() string { return r.node }

// Creation returns the incarnation of the node that made the reference.
func (r Ref) Creation() uint32 { return r.creation }

// ID returns the reference number.
func (r Ref) ID() uint64 { return r.id }

// IsZero reports whether r is the zero Ref.
func (r Ref) IsZero() bool { return r == Ref{} }

// String formats r as #Ref<node.creation.id>.
func (r Ref) String() string {
	return "#Ref<" + r.node + "." + strconv.FormatUint(uint64(r.creation), 10) + "." + strconv.FormatUint(r.id, 10) + ">"
}

// ErrBadRef is returned (wrapped) by [ParseRef] for text that is not a Ref.
var ErrBadRef = errors.New("gotp: malformed ref")

// ParseRef parses the form written by [Ref.String]. The zero Ref has no
// text form of its own and is written as "#Ref<0>".
func ParseRef(s string) (Ref, error) {
	if s == "#Ref<0>" {
		return Ref{}, nil
	}
	if !strings.HasPrefix(s, "#Ref") {
		return Ref{}, fmt.Errorf("%w: %q", ErrBadRef, s)
	}
	p, err := ParsePID(s[4:])
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %q", ErrBadRef, s)
	}
	return Ref(p), nil
}

// MarshalText implements encoding.TextMarshaler with the form of String
// ("#Ref<0>" for the zero Ref), so that codecs can carry Refs.
func (r Ref) MarshalText() ([]byte, error) {
	if r.IsZero() {
		return []byte("#Ref<0>"), nil
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRef.
func (r *Ref) UnmarshalText(b []byte) error {
	q, err := ParseRef(string(b))
	if err != nil {
		return err
	}
	*r = q
	return nil
}
