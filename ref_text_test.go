package gotp

import "testing"

func TestRefTextRoundTrip(t *testing.T) {
	for _, r := range []Ref{{}, NewRef("a@host.example", 3, 9), NewRef("n", 0, 1)} {
		b, err := r.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var q Ref
		if err := q.UnmarshalText(b); err != nil || q != r {
			t.Fatalf("%v: got %v, %v", r, q, err)
		}
	}
	for _, bad := range []string{"", "#Ref", "#Ref<a.1>", "<a.1.2>", "#Ref<a.x.2>"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) succeeded", bad)
		}
	}
}
