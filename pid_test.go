package gotp_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestPIDStringParseRoundTrip(t *testing.T) {
	for _, pid := range []gotp.PID{
		gotp.NewPID("chat", 3, 42),
		gotp.NewPID("chat@host.example.com", 4294967295, 18446744073709551615),
		gotp.NewPID("a.b.c", 0, 1),
		gotp.NewPID("..", 7, 9),
		gotp.NewPID("ünïcødé node", 1, 2),
		{},
	} {
		s := pid.String()
		got, err := gotp.ParsePID(s)
		if err != nil {
			t.Errorf("ParsePID(%q): %v", s, err)
			continue
		}
		if got != pid {
			t.Errorf("ParsePID(%q) = %#v, want %#v", s, got, pid)
		}
	}
	if got := gotp.NewPID("chat", 3, 42).String(); got != "<chat.3.42>" {
		t.Errorf("String = %q, want <chat.3.42>", got)
	}
	if got := (gotp.PID{}).String(); got != "<0>" {
		t.Errorf("zero String = %q, want <0>", got)
	}
}

func TestPIDOfSpawnedProcessRoundTrips(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "node.with.dots"})
	defer n.Stop(t.Context())
	release := make(chan struct{})
	defer close(release)
	pid := blocker(t, n, release)
	got, err := gotp.ParsePID(pid.String())
	if err != nil || got != pid {
		t.Fatalf("ParsePID(%q) = %v, %v; want %v", pid, got, err, pid)
	}
	if pid.Node() != "node.with.dots" || pid.Creation() != n.Creation() || pid.ID() == 0 {
		t.Errorf("parts = %q %d %d", pid.Node(), pid.Creation(), pid.ID())
	}
}

func TestParsePIDMalformed(t *testing.T) {
	for _, s := range []string{
		"", "<", "<>", "<0", "0>", "chat.1.2", "<chat.1.2", "chat.1.2>",
		"<chat>", "<chat.1>", "<.1.2>", "<chat.1.0>", "<chat.x.2>", "<chat.1.y>",
		"<chat.-1.2>", "<chat.1.-2>", "<chat.4294967296.1>", "<chat.1.18446744073709551616>",
		"<chat.1.2>x", " <chat.1.2>", "<chat..2>", "<chat.1.>", "<1.2>", "<00>",
	} {
		pid, err := gotp.ParsePID(s)
		if err == nil {
			t.Errorf("ParsePID(%q) = %v, want an error", s, pid)
			continue
		}
		if !errors.Is(err, gotp.ErrBadPID) {
			t.Errorf("ParsePID(%q) error %v does not wrap ErrBadPID", s, err)
		}
	}
}

func TestPIDComparableMapKey(t *testing.T) {
	a, a2 := gotp.NewPID("n", 1, 1), gotp.NewPID("n", 1, 1)
	others := []gotp.PID{gotp.NewPID("n", 1, 2), gotp.NewPID("n", 2, 1), gotp.NewPID("m", 1, 1)}
	if a != a2 {
		t.Fatal("equal PIDs compare unequal")
	}
	m := map[gotp.PID]int{a: 1}
	m[a2]++
	for i, o := range others {
		if o == a {
			t.Errorf("%v == %v", o, a)
		}
		m[o] = 10 + i
	}
	if len(m) != 4 || m[a] != 2 {
		t.Errorf("map = %v, want 4 keys with m[a] == 2", m)
	}
	if !(gotp.PID{}).IsZero() || a.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestPIDText(t *testing.T) {
	pid := gotp.NewPID("chat.eu", 9, 77)
	b, err := pid.MarshalText()
	if err != nil || string(b) != pid.String() {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	var got gotp.PID
	if err := got.UnmarshalText(b); err != nil || got != pid {
		t.Fatalf("UnmarshalText = %v, %v", got, err)
	}
	bad := gotp.NewPID("keep", 1, 1)
	if err := bad.UnmarshalText([]byte("<nope>")); err == nil || bad != gotp.NewPID("keep", 1, 1) {
		t.Errorf("UnmarshalText of bad text: err %v, pid %v (must be unchanged)", err, bad)
	}

	// As a map key and a field in JSON.
	type doc struct {
		Owner gotp.PID
		Seen  map[gotp.PID]int
	}
	in := doc{Owner: pid, Seen: map[gotp.PID]int{pid: 3, {}: 1}}
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `chat.eu.9.77\u003e"`) { // json escapes < and >
		t.Errorf("JSON %s lacks the PID text", js)
	}
	var out doc
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatal(err)
	}
	if out.Owner != pid || out.Seen[pid] != 3 || out.Seen[gotp.PID{}] != 1 {
		t.Errorf("JSON round trip = %+v, want %+v", out, in)
	}
}

func TestRefComparableAndUnique(t *testing.T) {
	n := gotptest.NewNode(t)
	seen := make(map[gotp.Ref]bool)
	for range 1000 {
		r := n.MakeRef()
		if seen[r] || r.IsZero() {
			t.Fatalf("MakeRef returned %v twice or zero", r)
		}
		seen[r] = true
	}
}

func FuzzParsePID(f *testing.F) {
	for _, s := range []string{"<0>", "<chat.3.42>", "<a.b.c.0.1>", "<.1.1>", "<x.01.002>", "<<>>", "<a.4294967295.18446744073709551615>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pid, err := gotp.ParsePID(s)
		if err != nil {
			if !errors.Is(err, gotp.ErrBadPID) {
				t.Fatalf("ParsePID(%q) error %v does not wrap ErrBadPID", s, err)
			}
			if !pid.IsZero() {
				t.Fatalf("ParsePID(%q) failed but returned %v", s, pid)
			}
			return
		}
		s2 := pid.String()
		pid2, err := gotp.ParsePID(s2)
		if err != nil {
			t.Fatalf("ParsePID(%q) = %#v, whose String %q does not parse: %v", s, pid, s2, err)
		}
		if pid2 != pid {
			t.Fatalf("round trip of %q: %#v then %#v", s, pid, pid2)
		}
		if pid2.String() != s2 {
			t.Fatalf("String not stable: %q then %q", s2, pid2.String())
		}
	})
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"#Ref<0>", "#Ref<chat.3.42>", "#Ref<a.b.0.1>", "#Ref<.1.1>", "#Ref", "<a.1.2>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := gotp.ParseRef(s)
		if err != nil {
			if !errors.Is(err, gotp.ErrBadRef) || !r.IsZero() {
				t.Fatalf("ParseRef(%q) = %v, %v", s, r, err)
			}
			return
		}
		b, err := r.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var r2 gotp.Ref
		if err := r2.UnmarshalText(b); err != nil || r2 != r {
			t.Fatalf("round trip of %q: %v, then %q gives %v, %v", s, r, b, r2, err)
		}
	})
}
