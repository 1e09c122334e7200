package chat

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/server"
)

// HELP lists the commands, before CONNECT too, and names every verb the
// parser knows.
func TestHelp(t *testing.T) {
	ts := startService(t, t.TempDir())
	c := dial(t, ts)
	c.send("HELP")
	if got, want := c.line(), fmt.Sprintf("HELP %d", len(helpLines())); got != want {
		t.Fatalf("HELP → %q, want %q", got, want)
	}
	var text strings.Builder
	for _, want := range helpLines() {
		got := c.line()
		if got != want {
			t.Fatalf("help line %q, want %q", got, want)
		}
		text.WriteString(got + "\n")
	}
	for _, verb := range []string{"CONNECT", "SEND", "HISTORY", "WHO", "JOIN", "LEAVE", "SAY", "HELP", "QUIT"} {
		if !strings.Contains(text.String(), verb+" ") {
			t.Errorf("HELP does not mention %s", verb)
		}
	}
	c.expect("HELP me", "ERROR bad_command")
	c.expect("CONNECT ana", "OK")

	w := wsDial(t, ts)
	if r := w.expectType(map[string]string{"cmd": "help"}, "help"); !reflect.DeepEqual(r.Lines, helpLines()) {
		t.Fatalf("help over the WebSocket = %q", r.Lines)
	}
}

// SAY to a room the user has not joined, a typo in its name say, is an
// error rather than a message that reaches nobody.
func TestSayNeedsJoin(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana := connect(t, ts, "ana")
	ana.expect("SAY lobby hi", "ERROR not_joined")
	ana.expect("JOIN lobby", "OK")
	ana.expect("SAY lobyb hi", "ERROR not_joined")
	ana.expect("SAY lobby hi", "OK")
	if got := ana.line(); got != "ROOM lobby ana hi" {
		t.Fatalf("ana got %q", got)
	}
	ana.expect("LEAVE lobby", "OK")
	ana.expect("SAY lobby anyone?", "ERROR not_joined")

	w := wsConnect(t, ts, "bob")
	w.expectError(map[string]string{"cmd": "say", "room": "lobby", "text": "x"}, NotJoined)
}

// within checks that t is set and between lo and hi, give or take the
// millisecond the store keeps.
func within(t *testing.T, what string, at, lo, hi time.Time) {
	t.Helper()
	if at.IsZero() || at.Before(lo.Add(-time.Millisecond)) || at.After(hi.Add(time.Millisecond)) {
		t.Fatalf("%s: time %v, want between %v and %v", what, at, lo, hi)
	}
}

// Joining a room shows its earlier messages, oldest first, with their
// times; live room messages, direct messages and history carry times too.
func TestJoinShowsEarlierMessages(t *testing.T) {
	ts := startService(t, t.TempDir())
	start := time.Now()
	ana := connect(t, ts, "ana")
	ana.expect("JOIN lobby", "OK")
	for _, text := range []string{"first", "second"} {
		ana.expect("SAY lobby "+text, "OK")
		ana.line() // her own ROOM line
	}
	said := time.Now()

	bob := wsConnect(t, ts, "bob")
	r := bob.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok")
	if r.Room != "lobby" || len(r.Messages) != 2 {
		t.Fatalf("join reply %+v, want lobby's two messages", r)
	}
	for i, text := range []string{"first", "second"} {
		m := r.Messages[i]
		if m.From != "ana" || m.To != "lobby" || m.Text != text {
			t.Fatalf("earlier message %d = %+v, want ana's %q", i, m, text)
		}
		within(t, "earlier message", m.Time, start, said)
	}
	// Joining again shows them again; a room nobody spoke in has none,
	// as an empty list.
	if r := bob.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok"); len(r.Messages) != 2 {
		t.Fatalf("second join %+v", r)
	}
	bob.send(map[string]string{"cmd": "join", "room": "quiet"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, raw, err := bob.c.Read(ctx)
	if err != nil || !strings.Contains(string(raw), `"messages":[]`) {
		t.Fatalf("join of an empty room: %s, %v", raw, err)
	}

	before := time.Now()
	ana.expect("SAY lobby third", "OK")
	ana.line()
	if m := bob.next(); m.Type != "room" || m.Text != "third" {
		t.Fatalf("bob got %+v", m)
	} else {
		within(t, "live room message", m.Time, before, time.Now())
	}
	before = time.Now()
	ana.expect("SEND bob hi", "SENT bob")
	if m := bob.next(); m.Type != "msg" || m.Text != "hi" {
		t.Fatalf("bob got %+v", m)
	} else {
		within(t, "direct message", m.Time, before, time.Now())
	}
	h := bob.expectType(map[string]string{"cmd": "history", "with": "ana"}, "history")
	if len(h.Messages) != 1 {
		t.Fatalf("history %+v", h)
	}
	within(t, "history message", h.Messages[0].Time, before, time.Now())

	// The line protocol keeps its lines: JOIN answers OK alone.
	carol := connect(t, ts, "carol")
	carol.expect("JOIN lobby", "OK")
	carol.expect("WHO", "ONLINE 3 ana bob carol")
}

// A room's messages outlive the service: a restart on the same data shows
// them to the next user who joins.
func TestRoomMessagesAreKept(t *testing.T) {
	dir := t.TempDir()
	ts := startService(t, dir)
	ana := connect(t, ts, "ana")
	ana.expect("JOIN lobby", "OK")
	ana.expect("SAY lobby still here tomorrow", "OK")
	ana.line()
	ts.stop(t)

	ts2 := startService(t, dir)
	bob := wsConnect(t, ts2, "bob")
	r := bob.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok")
	if len(r.Messages) != 1 || r.Messages[0].Text != "still here tomorrow" {
		t.Fatalf("after the restart, join shows %+v", r.Messages)
	}
}

// A history file made before messages had times opens, and its messages
// come back without one.
func TestHistoryWithoutTimes(t *testing.T) {
	dir := t.TempDir()
	db, err := inbox.OpenSQLite(context.Background(), filepath.Join(dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, sender TEXT NOT NULL,
			recipient TEXT NOT NULL, body TEXT NOT NULL, pair TEXT NOT NULL)`,
		`INSERT INTO messages (sender, recipient, body, pair) VALUES ('ana', 'bob', 'from before', 'ana' || char(0) || 'bob')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	ts := startService(t, dir)
	bob := wsConnect(t, ts, "bob")
	h := bob.expectType(map[string]string{"cmd": "history", "with": "ana"}, "history")
	if len(h.Messages) != 1 || h.Messages[0].Text != "from before" || !h.Messages[0].Time.IsZero() {
		t.Fatalf("old history %+v", h.Messages)
	}
	ana := connect(t, ts, "ana")
	ana.expect("SEND bob new", "SENT bob")
	bob.next()
	h = bob.expectType(map[string]string{"cmd": "history", "with": "ana"}, "history")
	if len(h.Messages) != 2 || h.Messages[1].Time.IsZero() {
		t.Fatalf("history after a new message %+v", h.Messages)
	}
	var n int
	if err := sqlQueryRow(t, filepath.Join(dir, "history.db"), `SELECT count(*) FROM messages WHERE at > 0`, &n); err != nil || n != 1 {
		t.Fatalf("%d rows with a time (%v), want 1", n, err)
	}
}

func sqlQueryRow(t *testing.T, path, q string, dest ...any) error {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.QueryRow(q).Scan(dest...)
}

// The page's visitor, before connecting, sees who is online and which
// rooms there are: GET /api/online.
func TestDirectoryForVisitors(t *testing.T) {
	ts := startService(t, t.TempDir())
	get := func() (Directory, *http.Response) {
		t.Helper()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + ts.HTTPAddr().String() + "/api/online")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d Directory
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d, resp
	}
	d, resp := get()
	if d.Users == nil || d.Rooms == nil || len(d.Users)+len(d.Rooms) != 0 {
		t.Fatalf("empty chat: %+v (lists must be [], not null)", d)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", resp.Header)
	}
	ana, bob := connect(t, ts, "ana"), connect(t, ts, "bob")
	ana.expect("JOIN lobby", "OK")
	ana.expect("JOIN kitchen", "OK")
	bob.expect("JOIN lobby", "OK")
	want := Directory{Users: []string{"ana", "bob"}, Rooms: []RoomInfo{{"kitchen", 1}, {"lobby", 2}}}
	if d, _ := get(); !reflect.DeepEqual(d, want) {
		t.Fatalf("directory %+v, want %+v", d, want)
	}
	ana.expect("LEAVE kitchen", "OK")
	want.Rooms = want.Rooms[1:]
	if d, _ := get(); !reflect.DeepEqual(d, want) {
		t.Fatalf("after a leave: directory %+v, want %+v", d, want)
	}
}

// The JSON forms of the new replies.
func TestJSONOfJoinedAndHelp(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		r    Reply
		want string
	}{
		{Joined{Room: "lobby"}, `{"type":"ok","room":"lobby","messages":[]}`},
		{Joined{Room: "lobby", Messages: []Message{{From: "ana", To: "lobby", Text: "hi", Time: at}}},
			`{"type":"ok","room":"lobby","messages":[{"from":"ana","to":"lobby","text":"hi","time":"2026-12-01T10:00:00Z"}]}`},
		{HelpReply{Lines: []string{"a", "b"}}, `{"type":"help","lines":["a","b"]}`},
		{Msg{From: "ana", Text: "hi", Time: at}, `{"type":"msg","from":"ana","text":"hi","time":"2026-12-01T10:00:00Z"}`},
		{Msg{From: "ana", Text: "hi"}, `{"type":"msg","from":"ana","text":"hi"}`},
		{RoomMsg{Room: "r", From: "ana", Text: "hi", Time: at, Origin: "n/1", Seq: 7}, `{"type":"room","from":"ana","room":"r","text":"hi","time":"2026-12-01T10:00:00Z"}`},
	} {
		if got := string(FormatJSON(tc.r)); got != tc.want {
			t.Errorf("FormatJSON(%#v) = %s, want %s", tc.r, got, tc.want)
		}
	}
	if got := string(FormatReply(Joined{Room: "lobby", Messages: []Message{{Text: "x"}}})); got != "OK\n" {
		t.Errorf("FormatReply(Joined) = %q, want OK", got)
	}
	if got := string(FormatReply(HelpReply{Lines: []string{"a", "b"}})); got != "HELP 2\na\nb\n" {
		t.Errorf("FormatReply(HelpReply) = %q", got)
	}
}

func TestParseHelp(t *testing.T) {
	for _, line := range []string{"HELP", "help", "Help\r"} {
		if c, err := ParseLine([]byte(line)); err != nil || c != (Help{}) {
			t.Errorf("ParseLine(%q) = %v, %v", line, c, err)
		}
	}
	if _, err := ParseLine([]byte("HELP me")); ReasonOf(err) != BadCommand {
		t.Errorf("HELP me: %v", err)
	}
	if c, err := ParseJSON([]byte(`{"cmd":"help"}`)); err != nil || c != (Help{}) {
		t.Errorf("ParseJSON(help) = %v, %v", c, err)
	}
}

// In a cluster, a node keeps the room messages its users receive from
// other nodes, once each however many of its users are in the room, so
// that a JOIN there shows them too.
func TestRoomMessagesKeptOnEveryNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded NATS servers")
	}
	a, route := startClustered(t, "rooms-a")
	b, _ := startClustered(t, "rooms-b", route)
	waitNodes(t, a, b)
	ana := connect(t, a, "ana")
	bob, carol := connect(t, b, "bob"), connect(t, b, "carol")
	for _, c := range []*client{ana, bob, carol} {
		c.expect("JOIN lobby", "OK")
	}
	eventually(t, "the room's three members seen from both nodes", func() bool {
		for _, s := range []*testService{a, b} {
			n := 0
			for _, g := range s.findScope(t).Groups() {
				if g.Name == roomGroup("lobby") {
					for _, ps := range g.Members {
						n += len(ps)
					}
				}
			}
			if n != 3 {
				return false
			}
		}
		return true
	})
	start := time.Now()
	for _, text := range []string{"one", "two"} {
		ana.expect("SAY lobby "+text, "OK")
		for _, c := range []*client{ana, bob, carol} {
			if got := c.line(); got != "ROOM lobby ana "+text {
				t.Fatalf("got %q", got)
			}
		}
	}
	// bob and carol have seen both messages; the store is written before
	// the delivery is handed to the client, by the lowest of b's members.
	for _, s := range []*testService{a, b} {
		eventually(t, "the room's history on "+s.n.Name(), func() bool {
			ms, err := s.roomHistory(t, "lobby")
			return err == nil && len(ms) == 2
		})
		ms, _ := s.roomHistory(t, "lobby")
		for i, text := range []string{"one", "two"} {
			if ms[i].From != "ana" || ms[i].Text != text || ms[i].To != "lobby" {
				t.Fatalf("%s keeps %+v", s.n.Name(), ms)
			}
			within(t, "kept message", ms[i].Time, start, time.Now())
		}
	}
}

// roomHistory reads what the node's history owner keeps of room.
func (ts *testService) roomHistory(t *testing.T, room string) ([]Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return server.Call[[]Message](ctx, ts.n, gotp.Name(historyName), roomReq{room: room})
}
