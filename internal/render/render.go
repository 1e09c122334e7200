// Package render writes any Go value as bounded, Go-like text, for crash
// reports and the observer: what a process was handling, its state, the
// head of its mailbox.
//
// Unlike fmt's %+v it stops as soon as it has written its budget, so a
// state of a million entries costs a few hundred bytes and as little time,
// and it never reads the inside of the sync and sync/atomic types (a lock
// that another goroutine takes would otherwise be a data race). Like fmt,
// it follows a pointer only at the top: a pointer inside the value is
// shown as its address, since what it points to (a service, a node) is
// often shared with goroutines that write it. It calls Error and String
// methods where it may (exported values only; a panic in one is caught
// and shown), and writes maps in their iteration order, so the entries a
// long map shows vary from call to call.
package render

import (
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// DefaultMax is the budget callers use when they have no better one.
const DefaultMax = 1024

// maxDepth bounds how deep pointers, structs and collections are followed.
const maxDepth = 6

// Value returns v as text of at most max bytes (plus an ellipsis when it
// was cut). A max of zero or less means DefaultMax.
func Value(v any, max int) string {
	if max <= 0 {
		max = DefaultMax
	}
	w := &writer{max: max}
	w.value(reflect.ValueOf(v), 0)
	if w.cut {
		return string(w.buf) + "…"
	}
	return string(w.buf)
}

type writer struct {
	buf []byte
	max int
	cut bool // the budget ran out: nothing more is written
}

// full reports whether the budget is spent.
func (w *writer) full() bool { return w.cut }

func (w *writer) str(s string) {
	if w.cut {
		return
	}
	if room := w.max - len(w.buf); len(s) > room {
		// Cut on a rune boundary.
		for room > 0 && !utf8.RuneStart(s[room]) {
			room--
		}
		w.buf = append(w.buf, s[:room]...)
		w.cut = true
		return
	}
	w.buf = append(w.buf, s...)
}

var (
	errorType    = reflect.TypeFor[error]()
	stringerType = reflect.TypeFor[fmt.Stringer]()
)

// method calls the Error or String method of v, if it has one and may be
// called; ok is false otherwise.
func method(v reflect.Value) (s string, ok bool) {
	if !v.CanInterface() {
		return "", false
	}
	t := v.Type()
	if !t.Implements(errorType) && !t.Implements(stringerType) {
		return "", false
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return "", false
	}
	defer func() {
		if r := recover(); r != nil {
			s, ok = fmt.Sprintf("(%s method panicked: %v)", t, r), true
		}
	}()
	switch x := v.Interface().(type) {
	case error:
		return x.Error(), true
	case fmt.Stringer:
		return x.String(), true
	}
	return "", false
}

func (w *writer) value(v reflect.Value, depth int) {
	if w.full() {
		return
	}
	if !v.IsValid() {
		w.str("nil")
		return
	}
	if s, ok := method(v); ok {
		w.str(s)
		return
	}
	t := v.Type()
	switch t.PkgPath() {
	case "sync", "sync/atomic":
		w.str(t.String() + "{…}")
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		w.str(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.str(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		w.str(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		w.str(strconv.FormatFloat(v.Float(), 'g', -1, t.Bits()))
	case reflect.Complex64, reflect.Complex128:
		w.str(strconv.FormatComplex(v.Complex(), 'g', -1, t.Bits()))
	case reflect.String:
		w.quoted(v.String())
	case reflect.Interface:
		if v.IsNil() {
			w.str("nil")
			return
		}
		w.value(v.Elem(), depth)
	case reflect.Pointer:
		switch {
		case v.IsNil():
			w.str("nil")
		case depth > 0:
			// Only the value itself is followed, as fmt does: what a
			// field points to is often shared with other goroutines
			// (a service, a node), and reading it would race with them.
			w.str("(" + t.String() + ")(0x" + strconv.FormatUint(uint64(v.Pointer()), 16) + ")")
		default:
			w.str("&")
			w.value(v.Elem(), depth+1)
		}
	case reflect.Struct:
		w.str(t.String() + "{")
		if depth >= maxDepth {
			w.str("…}")
			return
		}
		for i := range t.NumField() {
			if i > 0 {
				w.str(", ")
			}
			w.str(t.Field(i).Name + ": ")
			w.value(v.Field(i), depth+1)
			if w.full() {
				return
			}
		}
		w.str("}")
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			w.str(t.String() + "(nil)")
			return
		}
		if t.Elem().Kind() == reflect.Uint8 && v.Kind() == reflect.Slice {
			w.quoted(string(v.Bytes()[:min(v.Len(), w.max)]))
			return
		}
		w.str(t.String() + "{")
		if depth >= maxDepth && v.Len() > 0 {
			w.str("…" + strconv.Itoa(v.Len()) + " elements}")
			return
		}
		for i := range v.Len() {
			if i > 0 {
				w.str(", ")
			}
			w.value(v.Index(i), depth+1)
			if w.full() {
				return
			}
		}
		w.str("}")
	case reflect.Map:
		if v.IsNil() {
			w.str(t.String() + "(nil)")
			return
		}
		w.str(t.String() + "{")
		if depth >= maxDepth && v.Len() > 0 {
			w.str("…" + strconv.Itoa(v.Len()) + " entries}")
			return
		}
		first := true
		for it := v.MapRange(); it.Next(); {
			if !first {
				w.str(", ")
			}
			first = false
			w.value(it.Key(), depth+1)
			w.str(": ")
			w.value(it.Value(), depth+1)
			if w.full() {
				return
			}
		}
		w.str("}")
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		if v.IsNil() {
			w.str(t.String() + "(nil)")
		} else {
			w.str(t.String() + "(" + strconv.FormatUint(uint64(v.Pointer()), 16) + ")")
		}
	default:
		w.str(t.String())
	}
}

// quoted writes s as a Go string literal, cut to the budget without
// quoting more of s than can be shown.
func (w *writer) quoted(s string) {
	room := w.max - len(w.buf)
	if len(s) > room {
		s = s[:max(room, 0)]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		w.str(strconv.Quote(s))
		w.cut = true
		return
	}
	w.str(strconv.Quote(s))
}
