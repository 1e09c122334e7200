package render

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"
)

type point struct {
	X, Y int
	tag  string
}

type node struct {
	Next *node
	Val  int
}

type lockedCounter struct {
	mu sync.Mutex //lint:ignore U1000 rendered, never locked
	n  int
}

type badStringer struct{}

func (*badStringer) String() string { panic("no") }

func TestValue(t *testing.T) {
	cyc := &node{Val: 1}
	cyc.Next = cyc
	var nilStringer *badStringer
	for _, tc := range []struct {
		v    any
		want string
	}{
		{nil, "nil"},
		{42, "42"},
		{"hi\n", `"hi\n"`},
		{[]byte("raw"), `"raw"`},
		{point{1, 2, "p"}, `render.point{X: 1, Y: 2, tag: "p"}`},
		{&point{X: 3}, `&render.point{X: 3, Y: 0, tag: ""}`},
		{[]int{1, 2}, "[]int{1, 2}"},
		{[]int(nil), "[]int(nil)"},
		{map[string]int{"a": 1}, `map[string]int{"a": 1}`},
		{errors.New("boom"), "boom"},
		{time.Duration(1500) * time.Millisecond, "1.5s"},
		{lockedCounter{n: 3}, "render.lockedCounter{mu: sync.Mutex{…}, n: 3}"},
		{nilStringer, "nil"},
		{&badStringer{}, "(*render.badStringer method panicked: no)"},
		{[2]bool{true, false}, "[2]bool{true, false}"},
		{struct{ F func() }{}, "struct { F func() }{F: func()(nil)}"},
	} {
		if got := Value(tc.v, 200); got != tc.want {
			t.Errorf("Value(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
	// A pointer inside the value is an address: a cycle ends there.
	if got := Value(cyc, 1000); !strings.HasPrefix(got, "&render.node{Next: (*render.node)(0x") || !strings.HasSuffix(got, "), Val: 1}") {
		t.Errorf("cycle: %q", got)
	}
	deep := [][][][][][][]int{{{{{{{7}}}}}}}
	if got := Value(deep, 1000); !strings.Contains(got, "…1 elements") {
		t.Errorf("depth limit: %q", got)
	}
}

func TestValueBudget(t *testing.T) {
	big := make(map[int][]string, 100_000)
	for i := range 100_000 {
		big[i] = []string{"some", "text"}
	}
	got := Value(big, 100)
	if len(got) > 100+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("%d bytes: %q", len(got), got)
	}
	if got := Value(strings.Repeat("é", 100), 11); !utf8.ValidString(got) || len(got) > 11+len("…") {
		t.Errorf("cut string %q", got)
	}
}

// TestValueBounded: whatever the value, the text stays within its budget
// and is valid UTF-8 (of valid input).
func TestValueBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 300).Draw(t, "limit")
		v := rapid.OneOf(
			rapid.Map(rapid.SliceOf(rapid.String()), func(s []string) any { return s }),
			rapid.Map(rapid.MapOf(rapid.Int(), rapid.String()), func(m map[int]string) any { return m }),
			rapid.Map(rapid.String(), func(s string) any { return point{X: len(s), tag: s} }),
		).Draw(t, "v")
		got := Value(v, limit)
		if len(got) > limit+len("…") {
			t.Fatalf("%d bytes for a budget of %d: %q", len(got), limit, got)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
	})
}
