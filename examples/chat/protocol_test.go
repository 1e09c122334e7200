package chat

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseLine(t *testing.T) {
	long := strings.Repeat("a", MaxLine+1)
	tests := []struct {
		line string
		want Command
		err  Reason
	}{
		{"CONNECT ana", Connect{Name: "ana"}, ""},
		{"connect ana\r", Connect{Name: "ana"}, ""},
		{"CONNECT João", Connect{Name: "João"}, ""},
		{"CONNECT", nil, BadCommand},
		{"CONNECT ", nil, BadCommand},
		{"CONNECT ana bob", nil, BadName},
		{"CONNECT " + strings.Repeat("x", MaxName+1), nil, BadName},
		{"SEND bob hello there", Send{To: "bob", Text: "hello there"}, ""},
		{"SEND bob  two spaces", Send{To: "bob", Text: " two spaces"}, ""},
		{"SEND bob 你好 🌍", Send{To: "bob", Text: "你好 🌍"}, ""},
		{"SEND bob", nil, BadCommand},
		{"SEND bob ", nil, BadCommand},
		{"SEND  text", nil, BadName},
		{"HISTORY bob", History{With: "bob"}, ""},
		{"JOIN lobby", Join{Room: "lobby"}, ""},
		{"LEAVE lobby", Leave{Room: "lobby"}, ""},
		{"SAY lobby hi all", Say{Room: "lobby", Text: "hi all"}, ""},
		{"SAY lobby", nil, BadCommand},
		{"WHO", Who{}, ""},
		{"WHO me", nil, BadCommand},
		{"QUIT", Quit{}, ""},
		{"", nil, BadCommand},
		{"DANCE", nil, BadCommand},
		{"SEND bob \xff\xfe", nil, BadEncoding},
		{"CONNECT a\x00b", nil, BadName},
		{long, nil, LineTooLong},
	}
	for _, tt := range tests {
		got, err := ParseLine([]byte(tt.line))
		if tt.err != "" {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Reason != tt.err {
				t.Errorf("ParseLine(%.40q) error = %v, want %s", tt.line, err, tt.err)
			}
			if got != nil {
				t.Errorf("ParseLine(%.40q) = %#v with an error, want nil", tt.line, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseLine(%q) = %#v, %v; want %#v", tt.line, got, err, tt.want)
		}
	}
}

func TestFormatReply(t *testing.T) {
	tests := []struct {
		r    Reply
		want string
	}{
		{OK{}, "OK\n"},
		{Sent{To: "bob"}, "SENT bob\n"},
		{Error{Reason: NotConnected}, "ERROR not_connected\n"},
		{HistoryReply{Messages: []Message{{From: "ana", Text: "oi"}, {From: "bob", Text: "olá você"}}}, "HISTORY 2\nana oi\nbob olá você\n"},
		{HistoryReply{}, "HISTORY 0\n"},
		{Online{Names: []string{"ana", "bob"}}, "ONLINE 2 ana bob\n"},
		{Online{}, "ONLINE 0\n"},
		{Bye{}, "BYE\n"},
		{Msg{From: "ana", Text: "hi"}, "MSG ana hi\n"},
		{RoomMsg{Room: "lobby", From: "ana", Text: "hi"}, "ROOM lobby ana hi\n"},
	}
	for _, tt := range tests {
		if got := string(FormatReply(tt.r)); got != tt.want {
			t.Errorf("FormatReply(%#v) = %q, want %q", tt.r, got, tt.want)
		}
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		in   string
		want Command
		err  Reason
	}{
		{`{"cmd":"connect","name":"ana"}`, Connect{Name: "ana"}, ""},
		{`{"cmd":"send","to":"bob","text":"olá"}`, Send{To: "bob", Text: "olá"}, ""},
		{`{"cmd":"send","to":"bob","text":"two\nlines"}`, nil, BadCommand},
		{`{"cmd":"history","with":"bob"}`, History{With: "bob"}, ""},
		{`{"cmd":"say","room":"r","text":"x"}`, Say{Room: "r", Text: "x"}, ""},
		{`{"cmd":"who"}`, Who{}, ""},
		{`{"cmd":"nope"}`, nil, BadCommand},
		{`not json`, nil, BadCommand},
		{`{"cmd":"connect","name":""}`, nil, BadName},
		{"{\"cmd\":\"connect\",\"name\":\"\xff\"}", nil, BadEncoding},
	}
	for _, tt := range tests {
		got, err := ParseJSON([]byte(tt.in))
		if tt.err != "" {
			if ReasonOf(err) != tt.err {
				t.Errorf("ParseJSON(%q) error = %v, want %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseJSON(%q) = %#v, %v", tt.in, got, err)
		}
	}
	if got := string(FormatJSON(Sent{To: "bob"})); got != `{"type":"sent","to":"bob"}` {
		t.Errorf("FormatJSON(Sent) = %s", got)
	}
}

// FuzzParseLine checks that no input crashes the parser, that every error
// is a *ProtocolError, and that a parsed command formats back to a line
// that parses to the same command.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"CONNECT ana", "SEND bob hi", "HISTORY x", "JOIN r", "SAY r hi", "WHO", "QUIT", "", "\xff", "SEND  x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := ParseLine(line)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a ProtocolError", err)
			}
			return
		}
		if !utf8.Valid(line) {
			t.Fatalf("accepted invalid UTF-8 %q", line)
		}
		again, err := ParseLine([]byte(formatCommand(c)))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip of %#v: %#v, %v", c, again, err)
		}
	})
}

func formatCommand(c Command) string {
	switch c := c.(type) {
	case Connect:
		return "CONNECT " + c.Name
	case Send:
		return "SEND " + c.To + " " + c.Text
	case History:
		return "HISTORY " + c.With
	case Join:
		return "JOIN " + c.Room
	case Leave:
		return "LEAVE " + c.Room
	case Say:
		return "SAY " + c.Room + " " + c.Text
	case Who:
		return "WHO"
	case Quit:
		return "QUIT"
	}
	return ""
}

func FuzzParseJSON(f *testing.F) {
	f.Add([]byte(`{"cmd":"send","to":"bob","text":"hi"}`))
	f.Add([]byte(`{"cmd":"connect","name":"a"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseJSON(data)
		if err != nil {
			if !bytes.Contains([]byte(err.Error()), []byte("chat:")) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if Validate(c) != nil {
			t.Fatalf("accepted invalid %#v", c)
		}
	})
}
