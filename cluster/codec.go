package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// A Codec turns messages into bytes and back for the trip between nodes.
// It knows an explicit set of Go types: a message whose type (or the type
// held by any interface-typed field inside it) was not registered is
// refused at the sender with *UnregisteredTypeError, and a receiving node
// only ever decodes into registered types. Values are CBOR
// (github.com/fxamacker/cbor/v2).
//
// Registered out of the box: bool, string, []byte, every integer and float
// kind, []string, []any, map[string]any, time.Time, time.Duration,
// gotp.PID, gotp.Ref, gotp.Down, gotp.Exit, server.ReplyMessage,
// server.Request, server.CastMessage, server.StopRequest, and error values
// (see RegisterError).
//
// Types are identified on the wire by their registered name, so every node
// must register the same types under the same names; the order of
// registration does not matter. A Codec is safe for concurrent use;
// register types before the first message that needs them.
type Codec struct {
	mu     sync.Mutex // serialises registration
	tables atomic.Pointer[codecTables]

	encMode cbor.EncMode
	decMode cbor.DecMode
	tags    cbor.TagSet

	walkCache sync.Map // reflect.Type → bool: may hold interface values
}

type codecTables struct {
	byType map[reflect.Type]*typeEntry
	byID   map[uint32]*typeEntry
	errs   []sentinel // registered sentinel errors
	// nestable: registered types that keep their type inside interface
	// fields of CBOR-encoded values (basic types, and tagged named types).
	nestable map[reflect.Type]bool
}

type sentinel struct {
	name string
	err  error
}

type typeEntry struct {
	id   uint32
	name string
	typ  reflect.Type
	enc  func(c *Codec, b []byte, v any) ([]byte, error) // nil: CBOR
	dec  func(c *Codec, d *reader) (any, error)          // nil: CBOR
}

// UnregisteredTypeError is the error of sending a value whose type the
// codec does not know. Type is the Go type that was found, Path where
// inside the message it was (empty for the message itself).
type UnregisteredTypeError struct {
	Type string
	Path string
}

// Error names the type and where it was found.
func (e *UnregisteredTypeError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("cluster: message type %s is not registered with the codec", e.Type)
	}
	return fmt.Sprintf("cluster: type %s (at %s) is not registered with the codec", e.Type, e.Path)
}

// ErrTooLarge is returned (wrapped) when an encoded message is larger than
// Options.MaxMessageSize.
var ErrTooLarge = errors.New("cluster: message too large")

// ErrDecode is returned (wrapped) for wire data that cannot be decoded.
var ErrDecode = errors.New("cluster: malformed wire data")

// NewCodec returns a codec with the built-in types registered.
func NewCodec() *Codec {
	c := &Codec{tags: cbor.NewTagSet()}
	c.tables.Store(&codecTables{byType: map[reflect.Type]*typeEntry{}, byID: map[uint32]*typeEntry{}, nestable: map[reflect.Type]bool{}})
	c.rebuildModes()
	// Scalars have a compact form of their own as whole messages (they
	// are the usual call requests and replies); inside other values they
	// are CBOR like everything else.
	for _, t := range scalarForms() {
		if err := c.registerForm(t.name, t.typ, t.enc, t.dec, true); err != nil {
			panic(err) // built-in table is static: a failure is a bug here
		}
	}
	for _, t := range []struct {
		name string
		v    any
	}{
		{"[]string", []string(nil)}, {"[]any", []any(nil)}, {"map[string]any", map[string]any(nil)},
		{"time.Time", time.Time{}}, {"time.Duration", time.Duration(0)},
		{"gotp.PID", gotp.PID{}}, {"gotp.Ref", gotp.Ref{}},
	} {
		if err := c.register(t.name, reflect.TypeOf(t.v), nil, nil); err != nil {
			panic(err) // built-in table is static: a failure is a bug here
		}
	}
	builtins := []struct {
		name string
		v    any
		enc  func(*Codec, []byte, any) ([]byte, error)
		dec  func(*Codec, *reader) (any, error)
	}{
		{"gotp.Down", gotp.Down{}, encDown, decDown},
		{"gotp.Exit", gotp.Exit{}, encExit, decExit},
		{"server.ReplyMessage", server.ReplyMessage{}, encReply, decReply},
		{"server.Request", server.Request{}, encRequest, decRequest},
		{"server.CastMessage", server.CastMessage{}, encCast, decCast},
		{"server.StopRequest", server.StopRequest{}, encStop, decStop},
		{"gotp.error", (*RemoteError)(nil), encErrValue, decErrValue},
	}
	for _, b := range builtins {
		if err := c.register(b.name, reflect.TypeOf(b.v), b.enc, b.dec); err != nil {
			panic(err)
		}
	}
	for _, s := range []sentinel{
		{"shutdown", gotp.ErrShutdown}, {"kill", gotp.ErrKill}, {"killed", gotp.ErrKilled},
		{"noproc", gotp.ErrNoProc}, {"noconnection", gotp.ErrNoConnection},
		{"nodestopped", gotp.ErrNodeStopped}, {"server.unhandled", server.ErrUnhandled},
		{"cluster.nameconflict", ErrNameConflict},
	} {
		if err := c.RegisterError(s.name, s.err); err != nil {
			panic(err)
		}
	}
	return c
}

func (c *Codec) rebuildModes() {
	em, err := cbor.EncOptions{
		Sort:          cbor.SortNone,
		Time:          cbor.TimeRFC3339Nano,
		TimeTag:       cbor.EncTagRequired,
		TextMarshaler: cbor.TextMarshalerTextString,
	}.EncModeWithSharedTags(c.tags)
	if err != nil {
		panic(err)
	}
	dm, err := cbor.DecOptions{
		MaxNestedLevels:  64,
		MaxArrayElements: 1 << 20,
		MaxMapPairs:      1 << 20,
		TextUnmarshaler:  cbor.TextUnmarshalerTextString,
	}.DecModeWithSharedTags(c.tags)
	if err != nil {
		panic(err)
	}
	c.encMode, c.decMode = em, dm
}

// Register adds T to the codec under name (which must be the same on every
// node). Named types (type Ping struct{...}) may also travel inside
// interface-typed fields of other messages. It fails if the name or the
// type is taken.
func Register[T any](c *Codec, name string) error {
	var zero T
	t := reflect.TypeOf(&zero).Elem()
	if t.Kind() == reflect.Interface {
		return fmt.Errorf("cluster: cannot register interface type %s", t)
	}
	return c.register(name, t, nil, nil)
}

// RegisterError makes the sentinel error err travel by name: a reason or
// reply that is err, or wraps it, arrives so that errors.Is(got, err) holds
// on the receiving node (which must register the same sentinel under the
// same name). gotp's sentinels (ErrShutdown, ErrKill, ErrKilled, ErrNoProc,
// ErrNoConnection, ErrNodeStopped) and server.ErrUnhandled are registered
// by NewCodec.
func (c *Codec) RegisterError(name string, err error) error {
	if err == nil || name == "" {
		return errors.New("cluster: RegisterError needs a name and a non-nil error")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.tables.Load()
	for _, s := range old.errs {
		if s.name == name || s.err == err {
			return fmt.Errorf("cluster: error %q already registered", name)
		}
	}
	nt := *old
	nt.errs = append(append([]sentinel(nil), old.errs...), sentinel{name, err})
	c.tables.Store(&nt)
	return nil
}

func typeID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	id := h.Sum32()
	if id < 64 {
		id += 64
	}
	return id
}

func (c *Codec) register(name string, t reflect.Type, enc func(*Codec, []byte, any) ([]byte, error), dec func(*Codec, *reader) (any, error)) error {
	return c.registerForm(name, t, enc, dec, false)
}

// registerForm registers t; scalar marks a basic type with a hand-written
// form that may still travel inside interface fields (as CBOR).
func (c *Codec) registerForm(name string, t reflect.Type, enc func(*Codec, []byte, any) ([]byte, error), dec func(*Codec, *reader) (any, error), scalar bool) error {
	tag := !scalar && enc == nil
	if name == "" {
		return errors.New("cluster: empty type name")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.tables.Load()
	if e, ok := old.byType[t]; ok {
		return fmt.Errorf("cluster: type %s already registered as %q", t, e.name)
	}
	id := typeID(name)
	if e, ok := old.byID[id]; ok {
		return fmt.Errorf("cluster: type name %q collides with %q", name, e.name)
	}
	nestable := false
	switch {
	case scalar:
		nestable = true
	case enc != nil:
	case t == reflect.TypeOf(time.Time{}):
		nestable = true
	case tag && t.PkgPath() != "" && t.Name() != "" && t.Kind() != reflect.Pointer:
		if err := c.tags.Add(cbor.TagOptions{EncTag: cbor.EncTagRequired, DecTag: cbor.DecTagOptional}, t, 0x67740000_00000000|uint64(id)); err != nil {
			return fmt.Errorf("cluster: register %s: %w", t, err)
		}
		nestable = true
	case t.PkgPath() == "":
		nestable = true
	}
	e := &typeEntry{id: id, name: name, typ: t, enc: enc, dec: dec}
	nt := &codecTables{
		byType:   make(map[reflect.Type]*typeEntry, len(old.byType)+1),
		byID:     make(map[uint32]*typeEntry, len(old.byID)+1),
		nestable: make(map[reflect.Type]bool, len(old.nestable)+1),
		errs:     old.errs,
	}
	for k, v := range old.byType {
		nt.byType[k] = v
	}
	for k, v := range old.byID {
		nt.byID[k] = v
	}
	for k, v := range old.nestable {
		nt.nestable[k] = v
	}
	nt.byType[t] = e
	nt.byID[id] = e
	if nestable {
		nt.nestable[t] = true
	}
	c.tables.Store(nt)
	return nil
}

// Check reports whether v can be sent: nil, or *UnregisteredTypeError.
func (c *Codec) Check(v any) error {
	_, err := c.AppendValue(nil, v)
	return err
}

// AppendValue appends the wire form of v to b. It fails with
// *UnregisteredTypeError for a type the codec does not know.
func (c *Codec) AppendValue(b []byte, v any) ([]byte, error) {
	if v == nil {
		return append(b, 0), nil // type id 0: nil
	}
	tb := c.tables.Load()
	t := reflect.TypeOf(v)
	e, ok := tb.byType[t]
	if !ok {
		if err, isErr := v.(error); isErr {
			e = tb.byType[reflect.TypeOf((*RemoteError)(nil))]
			v = err
		} else {
			return b, &UnregisteredTypeError{Type: t.String()}
		}
	}
	b = binary.AppendUvarint(b, uint64(e.id))
	if e.enc != nil {
		return e.enc(c, b, v)
	}
	if err := c.checkNested(tb, reflect.ValueOf(v), ""); err != nil {
		return b, err
	}
	data, err := c.encMode.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("cluster: encode %s: %w", t, err)
	}
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...), nil
}

// decodeValue reads a value written by AppendValue.
func (c *Codec) decodeValue(d *reader) (any, error) {
	id := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if id == 0 {
		return nil, nil
	}
	tb := c.tables.Load()
	e, ok := tb.byID[uint32(id)]
	if !ok || id > 0xffffffff {
		return nil, fmt.Errorf("%w: unknown type id %d", ErrDecode, id)
	}
	if e.dec != nil {
		return e.dec(c, d)
	}
	data := d.bytes()
	if d.err != nil {
		return nil, d.err
	}
	p := reflect.New(e.typ)
	if err := c.decMode.Unmarshal(data, p.Interface()); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDecode, e.name, err)
	}
	return p.Elem().Interface(), nil
}

// mayHoldInterface reports whether values of t can contain interface
// values (which must then be checked one by one).
func (c *Codec) mayHoldInterface(t reflect.Type) bool {
	if v, ok := c.walkCache.Load(t); ok {
		return v.(bool)
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type) bool
	walk = func(t reflect.Type) bool {
		if seen[t] {
			return false
		}
		seen[t] = true
		switch t.Kind() {
		case reflect.Interface:
			return true
		case reflect.Pointer, reflect.Slice, reflect.Array:
			return walk(t.Elem())
		case reflect.Map:
			return walk(t.Key()) || walk(t.Elem())
		case reflect.Struct:
			for i := range t.NumField() {
				if f := t.Field(i); f.IsExported() && walk(f.Type) {
					return true
				}
			}
		}
		return false
	}
	r := walk(t)
	c.walkCache.Store(t, r)
	return r
}

// checkNested refuses values held in interface-typed fields whose dynamic
// type is not registered (CBOR would encode them, but the receiver could
// not give them their type back).
func (c *Codec) checkNested(tb *codecTables, v reflect.Value, path string) error {
	if !v.IsValid() || !c.mayHoldInterface(v.Type()) {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		e := v.Elem()
		t := e.Type()
		if t.Kind() == reflect.Pointer && !e.IsNil() {
			t = t.Elem()
		}
		if _, ok := tb.byType[t]; !ok {
			return &UnregisteredTypeError{Type: e.Type().String(), Path: path}
		}
		if !tb.nestable[t] {
			return &UnregisteredTypeError{Type: e.Type().String() + " (allowed only as a whole message, not inside a field)", Path: path}
		}
		return c.checkNested(tb, e, path)
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return c.checkNested(tb, v.Elem(), path)
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := c.checkNested(tb, v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := c.checkNested(tb, it.Key(), path+"{key}"); err != nil {
				return err
			}
			if err := c.checkNested(tb, it.Value(), fmt.Sprintf("%s[%v]", path, it.Key())); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				if err := c.checkNested(tb, v.Field(i), path+"."+f.Name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
