package chat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzWireFormatsAgree checks that the line protocol and its JSON form are
// one protocol: a command written both ways is accepted by both parsers, as
// the same Command, or rejected by both.
//
// Only what a line can carry is compared: no "\n" anywhere, no space in a
// name (a line splits on it), valid UTF-8 (json.Marshal would replace the
// invalid bytes), and no "\r" at the end of a line (ParseLine drops it as
// part of a CRLF ending).
func FuzzWireFormatsAgree(f *testing.F) {
	for _, s := range []struct {
		verb       uint8
		name, text string
	}{
		{0, "ana", ""}, {1, "bob", "olá"}, {1, "bob", " two  spaces "}, {2, "ana", ""},
		{3, "lobby", ""}, {4, "lobby", ""}, {5, "lobby", "hi all"}, {6, "", ""}, {7, "", ""},
		{0, "", ""}, {1, "", "x"}, {1, "bob", ""}, {0, "a\x00b", ""}, {1, "bob", "a\rb"},
		{0, strings.Repeat("x", MaxName+1), ""}, {0, "João", ""}, {0, "\u00a0", ""},
	} {
		f.Add(s.verb, s.name, s.text)
	}
	verbs := []string{"connect", "send", "history", "join", "leave", "say", "who", "quit"}
	f.Fuzz(func(t *testing.T, v uint8, name, text string) {
		if !utf8.ValidString(name) || !utf8.ValidString(text) ||
			strings.ContainsAny(name, " \n") || strings.Contains(text, "\n") {
			t.Skip()
		}
		verb := verbs[int(v)%len(verbs)]
		var line string
		j := map[string]string{"cmd": verb}
		switch verb {
		case "connect", "history", "join", "leave":
			if strings.HasSuffix(name, "\r") {
				t.Skip()
			}
			line = strings.ToUpper(verb) + " " + name
			j[map[string]string{"connect": "name", "history": "with", "join": "room", "leave": "room"}[verb]] = name
		case "send", "say":
			if strings.HasSuffix(text, "\r") {
				t.Skip()
			}
			line = strings.ToUpper(verb) + " " + name + " " + text
			key := "to"
			if verb == "say" {
				key = "room"
			}
			j[key], j["text"] = name, text
		default:
			line = strings.ToUpper(verb)
		}
		data, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if len(line) > MaxLine || len(data) > MaxLine {
			t.Skip()
		}
		fromLine, lerr := ParseLine([]byte(line))
		fromJSON, jerr := ParseJSON(data)
		if (lerr == nil) != (jerr == nil) {
			t.Fatalf("line %q → %#v, %v; JSON %s → %#v, %v", line, fromLine, lerr, data, fromJSON, jerr)
		}
		if lerr == nil && !reflect.DeepEqual(fromLine, fromJSON) {
			t.Fatalf("line %q → %#v; JSON %s → %#v", line, fromLine, data, fromJSON)
		}
	})
}
