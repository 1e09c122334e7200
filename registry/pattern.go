package registry

import (
	"reflect"
)

// A Pattern matches registered values by their shape, as Elixir's match
// patterns do. Build one from:
//
//   - Any(): matches anything (Elixir's :_);
//   - Eq(v): matches a value equal to v;
//   - Var(name): matches anything the first time name appears in the
//     pattern, and then only values equal to that first one (Elixir's
//     :"$1" repeated);
//   - Tuple(p1, p2, ...): matches a struct whose fields (all of them, in
//     declaration order), or an array or slice whose elements, match p1,
//     p2, ... one for one;
//   - Field(name, p): matches a struct whose field name matches p;
//   - And(p1, p2, ...): matches what every pi matches;
//   - Where(f): matches the values for which f returns true.
//
// Pointers and interfaces are looked through: Tuple and Field see the
// struct a pointer points to. Equality is Go's == when the values are
// comparable, reflect.DeepEqual otherwise. Eq(v) and Var compare numbers
// of different types by value (Eq(1) matches an int64 or a float64 field
// holding 1), as Elixir's == does in a guard, where an Elixir match
// pattern would not match 1.0 with 1; other values must have the same
// type. A value that does not have the pattern's shape (a Tuple of the
// wrong length, a missing field) does not match; patterns never panic,
// but the function of a Where may.
//
// The examples of Elixir's Registry.match/4, for values of type struct{ A int; B string; C int }:
//
//	Tuple(Eq(1), Any(), Any())        // {1, :_, :_}
//	Tuple(Any(), Eq("atom"), Any())   // {:_, :atom, :_}
//	Tuple(Var("x"), Any(), Var("x"))  // {:"$1", :_, :"$1"}
//
// Patterns are immutable and safe to share between goroutines.
type Pattern interface {
	match(v reflect.Value, b *bindings) bool
}

type bindings struct {
	names []string
	vals  []reflect.Value
}

func (b *bindings) get(name string) (reflect.Value, bool) {
	for i, n := range b.names {
		if n == name {
			return b.vals[i], true
		}
	}
	return reflect.Value{}, false
}

// matchValue reports whether pattern matches v.
func matchValue[V any](pattern Pattern, v V) bool {
	var b bindings
	return pattern.match(reflect.ValueOf(&v).Elem(), &b)
}

// Any returns the pattern that matches every value.
func Any() Pattern { return anyPattern{} }

type anyPattern struct{}

func (anyPattern) match(reflect.Value, *bindings) bool { return true }

// Eq returns a pattern that matches values equal to v.
func Eq(v any) Pattern { return eqPattern{reflect.ValueOf(v)} }

type eqPattern struct{ v reflect.Value }

func (p eqPattern) match(v reflect.Value, _ *bindings) bool { return equal(p.v, v) }

// Var returns a pattern variable: its first occurrence in a match binds
// the value there, and later occurrences match only equal values.
func Var(name string) Pattern { return varPattern{name} }

type varPattern struct{ name string }

func (p varPattern) match(v reflect.Value, b *bindings) bool {
	if bound, ok := b.get(p.name); ok {
		return equal(bound, v)
	}
	b.names = append(b.names, p.name)
	b.vals = append(b.vals, v)
	return true
}

// Tuple returns a pattern that matches a struct with len(ps) fields, or an
// array or slice with len(ps) elements, whose fields or elements match ps
// in order.
func Tuple(ps ...Pattern) Pattern { return tuplePattern(append([]Pattern(nil), ps...)) }

type tuplePattern []Pattern

func (p tuplePattern) match(v reflect.Value, b *bindings) bool {
	v = indirect(v)
	if !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.NumField() != len(p) {
			return false
		}
		for i, q := range p {
			if q == nil || !q.match(v.Field(i), b) {
				return false
			}
		}
		return true
	case reflect.Array, reflect.Slice:
		if v.Len() != len(p) {
			return false
		}
		for i, q := range p {
			if q == nil || !q.match(v.Index(i), b) {
				return false
			}
		}
		return true
	}
	return false
}

// Field returns a pattern that matches a struct whose field called name
// (exported or not) matches p.
func Field(name string, p Pattern) Pattern { return fieldPattern{name, p} }

type fieldPattern struct {
	name string
	p    Pattern
}

func (p fieldPattern) match(v reflect.Value, b *bindings) bool {
	v = indirect(v)
	if !v.IsValid() || v.Kind() != reflect.Struct || p.p == nil {
		return false
	}
	f := v.FieldByName(p.name)
	return f.IsValid() && p.p.match(f, b)
}

// And returns a pattern that matches the values every one of ps matches.
func And(ps ...Pattern) Pattern { return andPattern(append([]Pattern(nil), ps...)) }

type andPattern []Pattern

func (p andPattern) match(v reflect.Value, b *bindings) bool {
	for _, q := range p {
		if q == nil || !q.match(v, b) {
			return false
		}
	}
	return true
}

// Where returns a pattern that matches the values for which f returns
// true. f receives the value (or the field or element the pattern is
// applied to) as an any; values of unexported fields do not match.
func Where(f func(v any) bool) Pattern { return wherePattern{f} }

type wherePattern struct{ f func(any) bool }

func (p wherePattern) match(v reflect.Value, _ *bindings) bool {
	if p.f == nil || !v.IsValid() || !v.CanInterface() {
		return false
	}
	return p.f(v.Interface())
}

// indirect looks through interfaces and pointers; it returns the invalid
// Value for nil.
func indirect(v reflect.Value) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

func isNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Float64
}

// equal compares a and b (see Pattern for the rules).
func equal(a, b reflect.Value) bool {
	for a.IsValid() && a.Kind() == reflect.Interface {
		a = a.Elem()
	}
	for b.IsValid() && b.Kind() == reflect.Interface {
		b = b.Elem()
	}
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		if !isNumber(a.Kind()) || !isNumber(b.Kind()) {
			return false
		}
		return numEqual(a, b)
	}
	if a.Comparable() && b.Comparable() {
		return a.Equal(b)
	}
	if a.CanInterface() && b.CanInterface() {
		return reflect.DeepEqual(a.Interface(), b.Interface())
	}
	return false
}

func numEqual(a, b reflect.Value) bool {
	switch {
	case a.CanInt() && b.CanInt():
		return a.Int() == b.Int()
	case a.CanUint() && b.CanUint():
		return a.Uint() == b.Uint()
	case a.CanInt() && b.CanUint():
		return a.Int() >= 0 && uint64(a.Int()) == b.Uint()
	case a.CanUint() && b.CanInt():
		return b.Int() >= 0 && uint64(b.Int()) == a.Uint()
	}
	return toFloat(a) == toFloat(b)
}

func toFloat(v reflect.Value) float64 {
	switch {
	case v.CanInt():
		return float64(v.Int())
	case v.CanUint():
		return float64(v.Uint())
	case v.CanFloat():
		return v.Float()
	}
	return 0
}
