package gotp

import (
	"strings"
	"testing"
)

// FuzzFindLabelled: any goroutine profile text, however malformed, gives
// an answer (found or not) without a panic, and a record is found only by
// a label it has.
func FuzzFindLabelled(f *testing.F) {
	f.Add("goroutine profile: total 1\n1 @ 0x1\n# labels: {\"gotp_pid\":\"<a.1.2>\"}\n#\t0x1\tmain.f+0x1\t\t/x.go:1\n\n", `"gotp_pid":"<a.1.2>"`)
	f.Add("#\t\t\t\n\n\n# labels: ", "")
	f.Fuzz(func(t *testing.T, profile, label string) {
		got, ok := findLabelled([]byte(profile), label)
		if ok && !strings.Contains(profile, label) {
			t.Fatalf("found %q by a label the profile lacks", got)
		}
	})
}
