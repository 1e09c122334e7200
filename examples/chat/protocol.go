package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxLine is the longest command line the TCP protocol accepts, in bytes,
// without its line ending. A longer line gets ERROR line_too_long and the
// connection is closed.
const MaxLine = 64 << 10

// MaxName is the longest user or room name, in runes.
const MaxName = 64

// A Command is what a client asks of its connection. The concrete types
// are Connect, Send, History, Join, Leave, Say, Who, Help and Quit.
type Command interface{ command() }

// Connect names the user of this connection; it must come first.
type Connect struct{ Name string }

// Send sends Text to the online user To.
type Send struct{ To, Text string }

// History asks for the messages between the caller and With, oldest first.
type History struct{ With string }

// Join makes the caller a member of Room.
type Join struct{ Room string }

// Leave ends the caller's membership of Room.
type Leave struct{ Room string }

// Say sends Text to every member of Room, on every node. The caller must
// have joined Room.
type Say struct{ Room, Text string }

// Who asks for the users online.
type Who struct{}

// Help asks for the list of commands. It works before Connect.
type Help struct{}

// Quit ends the session.
type Quit struct{}

func (Connect) command() {}
func (Send) command()    {}
func (History) command() {}
func (Join) command()    {}
func (Leave) command()   {}
func (Say) command()     {}
func (Who) command()     {}
func (Help) command()    {}
func (Quit) command()    {}

// A Reply is what a connection answers to one command, or an event it
// pushes (Msg, RoomMsg). The concrete types are OK, Joined, Sent,
// HistoryReply, Online, HelpReply, Bye, Error, Msg and RoomMsg.
type Reply interface{ reply() }

// OK acknowledges Connect, Leave and Say.
type OK struct{}

// Joined acknowledges Join, with the room's latest messages kept on this
// node (at most RoomHistoryLimit, oldest first; each Message's To is the
// room). The line
// protocol answers OK; the WebSocket's reply carries the messages.
type Joined struct {
	Room     string
	Messages []Message
}

// Sent acknowledges a Send to To.
type Sent struct{ To string }

// HistoryReply carries the messages of a History, oldest first.
type HistoryReply struct{ Messages []Message }

// Online lists the users online, sorted.
type Online struct{ Names []string }

// HelpReply lists the commands, one line each.
type HelpReply struct{ Lines []string }

// Bye acknowledges Quit; the connection closes after it.
type Bye struct{}

// Error reports why a command failed.
type Error struct{ Reason Reason }

// Msg is a direct message pushed to its recipient. Time is when the
// sender's node accepted it.
type Msg struct {
	From, Text string
	Time       time.Time
}

// RoomMsg is a room message pushed to every member of the room. Time is
// when the sender's node accepted it; Origin (the sender's node and its
// incarnation) and Seq name the message, so that a node keeps it once
// however many of its users receive it.
type RoomMsg struct {
	Room, From, Text string
	Time             time.Time
	Origin           string
	Seq              uint64
}

func (OK) reply()           {}
func (Joined) reply()       {}
func (Sent) reply()         {}
func (HistoryReply) reply() {}
func (Online) reply()       {}
func (HelpReply) reply()    {}
func (Bye) reply()          {}
func (Error) reply()        {}
func (Msg) reply()          {}
func (RoomMsg) reply()      {}

// Message is one stored message: a direct one, or (To being the room) a
// room's. Time is when the sender's node accepted it; it is zero for
// messages stored before times were kept.
type Message struct {
	From string    `json:"from"`
	To   string    `json:"to"`
	Text string    `json:"text"`
	Time time.Time `json:"time,omitzero"`
}

// Reason says why a command failed.
type Reason string

// The reasons of the protocol: not_connected and unknown_recipient, and
// those of the wire.
const (
	NotConnected     Reason = "not_connected"     // a command other than CONNECT before CONNECT
	UnknownRecipient Reason = "unknown_recipient" // SEND to a user who is not online
	NameTaken        Reason = "name_taken"        // CONNECT with a name held by another user
	AlreadyConnected Reason = "already_connected" // a second CONNECT on one connection
	BadCommand       Reason = "bad_command"       // not a command of the protocol
	BadName          Reason = "bad_name"          // a name that is empty, too long or has spaces or controls
	BadEncoding      Reason = "bad_encoding"      // a line that is not UTF-8
	LineTooLong      Reason = "line_too_long"     // a line over MaxLine bytes
	NotMember        Reason = "not_member"        // LEAVE of a room the user is not in
	NotJoined        Reason = "not_joined"        // SAY to a room the user has not joined (a typo in its name, say)
	Unavailable      Reason = "unavailable"       // the service could not do it now (retry)

	// Reasons that end a connection (it closes after the ERROR line).
	SlowConsumer Reason = "slow_consumer" // the client did not read the messages pushed to it fast enough (see Config.MaxOutput)
	ReadTimeout  Reason = "read_timeout"  // a line or message did not arrive in full within Config.ReadTimeout
	IdleTimeout  Reason = "idle_timeout"  // nothing arrived for Config.IdleTimeout
)

// ProtocolError is the error of a command that cannot be parsed or is not
// valid; Reason is what the client is told.
type ProtocolError struct{ Reason Reason }

// Error returns "chat: " and the reason.
func (e *ProtocolError) Error() string { return "chat: " + string(e.Reason) }

func protoErr(r Reason) error { return &ProtocolError{Reason: r} }

// ParseLine parses one line of the TCP protocol (without its line ending;
// a trailing "\r" is ignored). It returns *ProtocolError for anything that
// is not a valid command; it never panics, whatever the input.
func ParseLine(line []byte) (Command, error) {
	if len(line) > MaxLine {
		return nil, protoErr(LineTooLong)
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	if !utf8.Valid(line) {
		return nil, protoErr(BadEncoding)
	}
	s := string(line)
	verb, rest, _ := strings.Cut(s, " ")
	switch strings.ToUpper(verb) {
	case "CONNECT":
		return oneName(rest, func(n string) Command { return Connect{Name: n} })
	case "HISTORY":
		return oneName(rest, func(n string) Command { return History{With: n} })
	case "JOIN":
		return oneName(rest, func(n string) Command { return Join{Room: n} })
	case "LEAVE":
		return oneName(rest, func(n string) Command { return Leave{Room: n} })
	case "SEND":
		name, text, ok := strings.Cut(rest, " ")
		if !ok || text == "" {
			return nil, protoErr(BadCommand)
		}
		return checked(Send{To: name, Text: text})
	case "SAY":
		name, text, ok := strings.Cut(rest, " ")
		if !ok || text == "" {
			return nil, protoErr(BadCommand)
		}
		return checked(Say{Room: name, Text: text})
	case "WHO":
		if rest != "" {
			return nil, protoErr(BadCommand)
		}
		return Who{}, nil
	case "HELP":
		if rest != "" {
			return nil, protoErr(BadCommand)
		}
		return Help{}, nil
	case "QUIT":
		if rest != "" {
			return nil, protoErr(BadCommand)
		}
		return Quit{}, nil
	}
	return nil, protoErr(BadCommand)
}

// helpLines is what HELP answers: every command of the protocol.
func helpLines() []string {
	return []string{
		"CONNECT name       take a name (first: everything but HELP and QUIT needs it)",
		"SEND user text     a direct message to a user online, kept in the history",
		"HISTORY user       the messages between you and a user, oldest first",
		"WHO                the users online",
		"JOIN room          enter a room (created on first use)",
		"LEAVE room         leave a room",
		"SAY room text      a message to everyone in a room you have joined",
		"HELP               this list",
		"QUIT               leave",
	}
}

func oneName(rest string, mk func(string) Command) (Command, error) {
	if rest == "" || strings.Contains(rest, " ") {
		if strings.TrimSpace(rest) == "" {
			return nil, protoErr(BadCommand)
		}
		return nil, protoErr(BadName)
	}
	return checked(mk(rest))
}

// checked returns c if it is valid, or nil and Validate's error.
func checked(c Command) (Command, error) {
	if err := Validate(c); err != nil {
		return nil, err
	}
	return c, nil
}

// ValidName reports whether s can name a user or a room: 1 to MaxName
// runes of valid UTF-8, none of them a space or a control character.
func ValidName(s string) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxName {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func validText(s string) bool {
	if s == "" || len(s) > MaxLine || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsAny(s, "\r\n")
}

// Validate checks the fields of a command built by hand or decoded from
// JSON, with the rules of ParseLine, and returns *ProtocolError.
func Validate(c Command) error {
	name := func(s string) error {
		if !ValidName(s) {
			if !utf8.ValidString(s) {
				return protoErr(BadEncoding)
			}
			return protoErr(BadName)
		}
		return nil
	}
	text := func(s string) error {
		if !utf8.ValidString(s) {
			return protoErr(BadEncoding)
		}
		if !validText(s) {
			return protoErr(BadCommand)
		}
		return nil
	}
	switch c := c.(type) {
	case Connect:
		return name(c.Name)
	case History:
		return name(c.With)
	case Join:
		return name(c.Room)
	case Leave:
		return name(c.Room)
	case Send:
		return errors.Join(name(c.To), text(c.Text))
	case Say:
		return errors.Join(name(c.Room), text(c.Text))
	case Who, Help, Quit:
		return nil
	case nil:
		return protoErr(BadCommand)
	}
	return protoErr(BadCommand)
}

// FormatReply writes r as lines of the TCP protocol, each ending in "\n".
func FormatReply(r Reply) []byte {
	switch r := r.(type) {
	case OK, Joined:
		return []byte("OK\n")
	case Sent:
		return formatSent(r.To)
	case HistoryReply:
		n := len("HISTORY \n") + 20
		for _, m := range r.Messages {
			n += len(m.From) + len(m.Text) + 2
		}
		b := make([]byte, 0, n)
		b = append(b, "HISTORY "...)
		b = strconv.AppendInt(b, int64(len(r.Messages)), 10)
		b = append(b, '\n')
		for _, m := range r.Messages {
			b = append(append(append(append(b, m.From...), ' '), m.Text...), '\n')
		}
		return b
	case Online:
		n := len("ONLINE \n") + 20
		for _, name := range r.Names {
			n += len(name) + 1
		}
		b := make([]byte, 0, n)
		b = append(b, "ONLINE "...)
		b = strconv.AppendInt(b, int64(len(r.Names)), 10)
		for _, name := range r.Names {
			b = append(append(b, ' '), name...)
		}
		return append(b, '\n')
	case HelpReply:
		n := len("HELP \n") + 20
		for _, l := range r.Lines {
			n += len(l) + 1
		}
		b := make([]byte, 0, n)
		b = append(b, "HELP "...)
		b = strconv.AppendInt(b, int64(len(r.Lines)), 10)
		b = append(b, '\n')
		for _, l := range r.Lines {
			b = append(append(b, l...), '\n')
		}
		return b
	case Bye:
		return []byte("BYE\n")
	case Error:
		return line("ERROR", string(r.Reason))
	case Msg:
		return formatMsg(r.From, r.Text)
	case RoomMsg:
		return line("ROOM", r.Room, r.From, r.Text)
	}
	return nil
}

// formatSent is FormatReply(Sent{To: to}) in one allocation: the reply
// to every SEND, formatted without boxing a Sent in a Reply.
func formatSent(to string) []byte { return line("SENT", to) }

// formatMsg is FormatReply(Msg{From: from, Text: text}) in one
// allocation.
func formatMsg(from, text string) []byte { return line("MSG", from, text) }

// line returns verb and each of fields after a space, and "\n", in a
// slice of its own (one allocation).
func line(verb string, fields ...string) []byte {
	n := len(verb) + 1
	for _, f := range fields {
		n += 1 + len(f)
	}
	b := make([]byte, 0, n)
	b = append(b, verb...)
	for _, f := range fields {
		b = append(append(b, ' '), f...)
	}
	return append(b, '\n')
}

// jsonCommand is the JSON form of a command on the WebSocket:
// {"cmd":"send","to":"ana","text":"olá"}.
type jsonCommand struct {
	Cmd  string `json:"cmd"`
	Name string `json:"name,omitempty"`
	To   string `json:"to,omitempty"`
	With string `json:"with,omitempty"`
	Room string `json:"room,omitempty"`
	Text string `json:"text,omitempty"`
}

// ParseJSON parses one WebSocket message. Errors are *ProtocolError.
func ParseJSON(data []byte) (Command, error) {
	if len(data) > MaxLine {
		return nil, protoErr(LineTooLong)
	}
	if !utf8.Valid(data) {
		return nil, protoErr(BadEncoding)
	}
	var j jsonCommand
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, protoErr(BadCommand)
	}
	var c Command
	switch strings.ToLower(j.Cmd) {
	case "connect":
		c = Connect{Name: j.Name}
	case "send":
		c = Send{To: j.To, Text: j.Text}
	case "history":
		c = History{With: j.With}
	case "join":
		c = Join{Room: j.Room}
	case "leave":
		c = Leave{Room: j.Room}
	case "say":
		c = Say{Room: j.Room, Text: j.Text}
	case "who":
		c = Who{}
	case "help":
		c = Help{}
	case "quit":
		c = Quit{}
	default:
		return nil, protoErr(BadCommand)
	}
	return checked(c)
}

// jsonReply is the JSON form of a reply or event on the WebSocket.
type jsonReply struct {
	Type     string    `json:"type"`
	To       string    `json:"to,omitempty"`
	From     string    `json:"from,omitempty"`
	Room     string    `json:"room,omitempty"`
	Text     string    `json:"text,omitempty"`
	Reason   Reason    `json:"reason,omitempty"`
	Names    []string  `json:"names,omitempty"`
	Lines    []string  `json:"lines,omitempty"`
	Messages []Message `json:"messages,omitzero"`
	Time     time.Time `json:"time,omitzero"`
}

// FormatJSON encodes r for the WebSocket: {"type":"sent","to":"ana"},
// {"type":"msg","from":"ana","text":"olá","time":"2026-12-01T10:00:00Z"},
// {"type":"ok","room":"lobby","messages":[...]} for a join, ...
func FormatJSON(r Reply) []byte {
	var j jsonReply
	switch r := r.(type) {
	case OK:
		j.Type = "ok"
	case Joined:
		j = jsonReply{Type: "ok", Room: r.Room, Messages: r.Messages}
		if j.Messages == nil {
			j.Messages = []Message{}
		}
	case Sent:
		j = jsonReply{Type: "sent", To: r.To}
	case HistoryReply:
		j = jsonReply{Type: "history", Messages: r.Messages}
		if j.Messages == nil {
			j.Messages = []Message{}
		}
	case Online:
		j = jsonReply{Type: "online", Names: r.Names}
	case HelpReply:
		j = jsonReply{Type: "help", Lines: r.Lines}
	case Bye:
		j.Type = "bye"
	case Error:
		j = jsonReply{Type: "error", Reason: r.Reason}
	case Msg:
		j = jsonReply{Type: "msg", From: r.From, Text: r.Text, Time: r.Time}
	case RoomMsg:
		j = jsonReply{Type: "room", Room: r.Room, From: r.From, Text: r.Text, Time: r.Time}
	}
	b, _ := json.Marshal(j)
	return b
}

// ReasonOf returns the Reason an error carries, or Unavailable.
func ReasonOf(err error) Reason {
	if e, ok := errors.AsType[*ProtocolError](err); ok {
		return e.Reason
	}
	return Unavailable
}
