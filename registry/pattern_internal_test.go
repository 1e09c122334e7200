package registry

import "testing"

type inner struct {
	X int
	y string
}

type outer struct {
	A  int
	In *inner
	L  []int
	I  any
}

func TestPatterns(t *testing.T) {
	o := outer{A: 1, In: &inner{X: 2, y: "s"}, L: []int{3, 4}, I: int64(5)}
	cases := []struct {
		name string
		v    any
		p    Pattern
		want bool
	}{
		{"any", o, Any(), true},
		{"eq struct", o, Eq(o), true}, // not comparable (slice): DeepEqual
		{"eq struct differs", o, Eq(outer{A: 2}), false},
		{"tuple of struct", o, Tuple(Eq(1), Any(), Any(), Any()), true},
		{"tuple arity", o, Tuple(Eq(1), Any()), false},
		{"nil pattern inside", o, Tuple(nil, Any(), Any(), Any()), false},
		{"through pointer", o, Tuple(Any(), Tuple(Eq(2), Eq("s")), Any(), Any()), true},
		{"unexported field by name", o, Field("In", Field("y", Eq("s"))), true},
		{"unexported field, where cannot see it", o, Field("In", Field("y", Where(func(any) bool { return true }))), false},
		{"slice tuple", o, Field("L", Tuple(Eq(3), Eq(4))), true},
		{"slice tuple wrong", o, Field("L", Tuple(Eq(4), Eq(3))), false},
		{"slice tuple arity", o, Field("L", Tuple(Eq(3))), false},
		{"array", [2]string{"a", "b"}, Tuple(Var("x"), Var("y")), true},
		{"array repeated var", [2]string{"a", "b"}, Tuple(Var("x"), Var("x")), false},
		{"array repeated var equal", [2]string{"a", "a"}, Tuple(Var("x"), Var("x")), true},
		{"interface field, int64 vs int literal", o, Field("I", Eq(5)), true},
		{"int vs uint", uint8(7), Eq(7), true},
		{"negative int vs uint", uint64(1<<63 + 1), Eq(-1), false},
		{"uint vs negative int", -1, Eq(uint(1)), false},
		{"float vs int", 1.5, Eq(1), false},
		{"float equal to int", 2.0, Eq(2), true},
		{"string vs int", "1", Eq(1), false},
		{"nil pointer field", outer{}, Field("In", Tuple(Any(), Any())), false},
		{"nil value vs Eq(nil)", outer{}, Field("I", Eq(nil)), true},
		{"field on non-struct", 3, Field("A", Any()), false},
		{"tuple on non-struct", 3, Tuple(Any()), false},
		{"and", o, And(Field("A", Eq(1)), Field("L", Tuple(Any(), Eq(4)))), true},
		{"and fails", o, And(Field("A", Eq(1)), Field("A", Eq(2))), false},
		{"and with nil", o, And(nil), false},
		{"var across fields", outer{A: 4, L: []int{1, 4}}, And(Field("A", Var("v")), Field("L", Tuple(Any(), Var("v")))), true},
		{"var across fields differs", outer{A: 5, L: []int{1, 4}}, And(Field("A", Var("v")), Field("L", Tuple(Any(), Var("v")))), false},
		{"where", o, Where(func(v any) bool { return v.(outer).A == 1 }), true},
		{"where nil func", o, Where(nil), false},
		{"field nil pattern", o, Field("A", nil), false},
	}
	for _, c := range cases {
		if got := matchValue(c.p, c.v); got != c.want {
			t.Errorf("%s: match = %v, want %v", c.name, got, c.want)
		}
	}
}
