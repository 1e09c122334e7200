package cluster

import (
	"encoding/binary"
	"math"
	"reflect"
)

// Compact wire forms of the scalar types, as whole messages:
//
//	bool      1 byte (0 or 1)
//	ints      zig-zag varint
//	uints     uvarint
//	float32   4 bytes, float64 8 bytes (IEEE 754, little endian)
//	string    uvarint(len) bytes
//	[]byte    uvarint(len) bytes
type scalarForm struct {
	name string
	typ  reflect.Type
	enc  func(*Codec, []byte, any) ([]byte, error)
	dec  func(*Codec, *reader) (any, error)
}

func scalarForms() []scalarForm {
	return []scalarForm{
		{"bool", reflect.TypeFor[bool](), encBool, decBool},
		{"string", reflect.TypeFor[string](), encString, decString},
		{"[]byte", reflect.TypeFor[[]byte](), encBytes, decBytes},
		intForm[int]("int"), intForm[int8]("int8"), intForm[int16]("int16"), intForm[int32]("int32"), intForm[int64]("int64"),
		uintForm[uint]("uint"), uintForm[uint8]("uint8"), uintForm[uint16]("uint16"), uintForm[uint32]("uint32"), uintForm[uint64]("uint64"),
		{"float32", reflect.TypeFor[float32](), encFloat32, decFloat32},
		{"float64", reflect.TypeFor[float64](), encFloat64, decFloat64},
	}
}

func encBool(_ *Codec, b []byte, v any) ([]byte, error) {
	if v.(bool) {
		return append(b, 1), nil
	}
	return append(b, 0), nil
}

func decBool(_ *Codec, d *reader) (any, error) {
	switch d.byte1() {
	case 0:
		return false, d.err
	case 1:
		return true, nil
	}
	d.fail("bad bool")
	return nil, d.err
}

func encString(_ *Codec, b []byte, v any) ([]byte, error) { return appendStr(b, v.(string)), nil }

func decString(_ *Codec, d *reader) (any, error) {
	s := d.str()
	return s, d.err
}

func encBytes(_ *Codec, b []byte, v any) ([]byte, error) {
	x := v.([]byte)
	b = binary.AppendUvarint(b, uint64(len(x)))
	return append(b, x...), nil
}

func decBytes(_ *Codec, d *reader) (any, error) {
	x := d.bytes()
	if d.err != nil {
		return nil, d.err
	}
	return append([]byte{}, x...), nil
}

func intForm[T int | int8 | int16 | int32 | int64](name string) scalarForm {
	return scalarForm{name, reflect.TypeFor[T](),
		func(_ *Codec, b []byte, v any) ([]byte, error) { return binary.AppendVarint(b, int64(v.(T))), nil },
		func(_ *Codec, d *reader) (any, error) {
			x := d.varint()
			if d.err != nil {
				return nil, d.err
			}
			if int64(T(x)) != x {
				d.fail("integer out of range")
				return nil, d.err
			}
			return T(x), nil
		}}
}

func uintForm[T uint | uint8 | uint16 | uint32 | uint64](name string) scalarForm {
	return scalarForm{name, reflect.TypeFor[T](),
		func(_ *Codec, b []byte, v any) ([]byte, error) { return binary.AppendUvarint(b, uint64(v.(T))), nil },
		func(_ *Codec, d *reader) (any, error) {
			x := d.uvarint()
			if d.err != nil {
				return nil, d.err
			}
			if uint64(T(x)) != x {
				d.fail("integer out of range")
				return nil, d.err
			}
			return T(x), nil
		}}
}

func encFloat32(_ *Codec, b []byte, v any) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(v.(float32))), nil
}

func decFloat32(_ *Codec, d *reader) (any, error) {
	if d.err != nil || len(d.b) < 4 {
		d.fail("short float32")
		return nil, d.err
	}
	x := math.Float32frombits(binary.LittleEndian.Uint32(d.b))
	d.b = d.b[4:]
	return x, nil
}

func encFloat64(_ *Codec, b []byte, v any) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v.(float64))), nil
}

func decFloat64(_ *Codec, d *reader) (any, error) {
	if d.err != nil || len(d.b) < 8 {
		d.fail("short float64")
		return nil, d.err
	}
	x := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return x, nil
}
