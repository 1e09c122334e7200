package chat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsReply is the decoded form of one JSON reply or event of the WebSocket.
type wsReply struct {
	Type     string    `json:"type"`
	To       string    `json:"to"`
	From     string    `json:"from"`
	Room     string    `json:"room"`
	Text     string    `json:"text"`
	Reason   Reason    `json:"reason"`
	Names    []string  `json:"names"`
	Lines    []string  `json:"lines"`
	Messages []Message `json:"messages"`
	Time     time.Time `json:"time"`
}

type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

// wsDial opens a WebSocket to the service's /ws with an HTTP client of its
// own, so that nothing is left idle in a shared transport when the test
// ends.
func wsDial(t *testing.T, ts *testService) *wsClient {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+ts.HTTPAddr().String()+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatalf("dial /ws: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("dial /ws: status %d", resp.StatusCode)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c}
}

// sendRaw writes one text message as is.
func (w *wsClient) sendRaw(data string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(data)); err != nil {
		w.t.Fatalf("write %s: %v", data, err)
	}
}

// send writes cmd as JSON.
func (w *wsClient) send(cmd map[string]string) {
	w.t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		w.t.Fatal(err)
	}
	w.sendRaw(string(b))
}

// next reads one message, which must be a JSON text message; it fails the
// test after a generous deadline.
func (w *wsClient) next() wsReply {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, data, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		w.t.Fatalf("got a %v message, want text", typ)
	}
	var r wsReply
	if err := json.Unmarshal(data, &r); err != nil {
		w.t.Fatalf("reply %s is not JSON: %v", data, err)
	}
	return r
}

// do sends cmd and returns the next message, its reply.
func (w *wsClient) do(cmd map[string]string) wsReply {
	w.t.Helper()
	w.send(cmd)
	return w.next()
}

func (w *wsClient) expectType(cmd map[string]string, typ string) wsReply {
	w.t.Helper()
	r := w.do(cmd)
	if r.Type != typ {
		w.t.Fatalf("%v → %+v, want type %q", cmd, r, typ)
	}
	return r
}

func (w *wsClient) expectError(cmd map[string]string, reason Reason) {
	w.t.Helper()
	r := w.do(cmd)
	if r.Type != "error" || r.Reason != reason {
		w.t.Fatalf("%v → %+v, want error %s", cmd, r, reason)
	}
}

// expectClosed reads until the server's close arrives, failing if any
// data message comes first.
func (w *wsClient) expectClosed() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := w.c.Read(ctx)
	if err == nil {
		w.t.Fatalf("read %s after the end of the session, want a close", data)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		w.t.Fatal("the server did not close the WebSocket")
	}
}

func wsConnect(t *testing.T, ts *testService, name string) *wsClient {
	t.Helper()
	w := wsDial(t, ts)
	w.expectType(map[string]string{"cmd": "connect", "name": name}, "ok")
	return w
}

func TestWebSocketTwoUsers(t *testing.T) {
	ts := startService(t, t.TempDir())

	anon := wsDial(t, ts)
	anon.expectError(map[string]string{"cmd": "send", "to": "bob", "text": "hi"}, NotConnected)
	anon.expectError(map[string]string{"cmd": "who"}, NotConnected)
	anon.expectError(map[string]string{"cmd": "history", "with": "bob"}, NotConnected)

	ana := wsConnect(t, ts, "ana")
	bob := wsConnect(t, ts, "bob")
	wsDial(t, ts).expectError(map[string]string{"cmd": "connect", "name": "ana"}, NameTaken)
	ana.expectError(map[string]string{"cmd": "connect", "name": "ana2"}, AlreadyConnected)

	// A direct message: the sender gets "sent", the recipient a "msg" event.
	r := ana.expectType(map[string]string{"cmd": "send", "to": "bob", "text": "olá, Bob! 👋 \"quoted\""}, "sent")
	if r.To != "bob" {
		t.Fatalf("sent to %q, want bob", r.To)
	}
	if got := bob.next(); got.Type != "msg" || got.From != "ana" || got.Text != "olá, Bob! 👋 \"quoted\"" {
		t.Fatalf("bob got %+v", got)
	}
	bob.expectType(map[string]string{"cmd": "send", "to": "ana", "text": "oi"}, "sent")
	if got := ana.next(); got.Type != "msg" || got.From != "bob" || got.Text != "oi" {
		t.Fatalf("ana got %+v", got)
	}
	ana.expectError(map[string]string{"cmd": "send", "to": "carol", "text": "hello"}, UnknownRecipient)

	// History, oldest first, the same from either side.
	want := []Message{{From: "ana", To: "bob", Text: "olá, Bob! 👋 \"quoted\""}, {From: "bob", To: "ana", Text: "oi"}}
	for _, c := range []*wsClient{ana, bob} {
		with := map[*wsClient]string{ana: "bob", bob: "ana"}[c]
		h := c.expectType(map[string]string{"cmd": "history", "with": with}, "history")
		if len(h.Messages) != len(want) {
			t.Fatalf("history = %+v, want %+v", h.Messages, want)
		}
		for i := range want {
			if h.Messages[i].From != want[i].From || h.Messages[i].Text != want[i].Text {
				t.Fatalf("history[%d] = %+v, want %+v", i, h.Messages[i], want[i])
			}
		}
	}
	// An empty history is an empty list, not a missing field.
	raw := ana.doRaw(`{"cmd":"history","with":"nobody"}`)
	if !strings.Contains(raw, `"messages":[]`) {
		t.Fatalf("empty history = %s, want \"messages\":[]", raw)
	}

	if got := ana.expectType(map[string]string{"cmd": "who"}, "online"); !reflect.DeepEqual(got.Names, []string{"ana", "bob"}) {
		t.Fatalf("who = %q, want [ana bob]", got.Names)
	}

	// Rooms: every member gets a "room" event, the sayer included.
	ana.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok")
	bob.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok")
	ana.expectType(map[string]string{"cmd": "say", "room": "lobby", "text": "hi all"}, "ok")
	for name, c := range map[string]*wsClient{"ana": ana, "bob": bob} {
		if got := c.next(); got.Type != "room" || got.Room != "lobby" || got.From != "ana" || got.Text != "hi all" {
			t.Fatalf("%s got %+v", name, got)
		}
	}
	bob.expectType(map[string]string{"cmd": "leave", "room": "lobby"}, "ok")
	bob.expectError(map[string]string{"cmd": "leave", "room": "lobby"}, NotMember)
	ana.expectType(map[string]string{"cmd": "say", "room": "lobby", "text": "only me"}, "ok")
	if got := ana.next(); got.Type != "room" || got.Text != "only me" {
		t.Fatalf("ana got %+v", got)
	}
	// bob left: his next message is the reply to his own command, no room event.
	bob.expectType(map[string]string{"cmd": "who"}, "online")

	// QUIT: "bye", then the server closes, and ana goes offline.
	ana.expectType(map[string]string{"cmd": "quit"}, "bye")
	ana.expectClosed()
	eventually(t, "ana to go offline", func() bool {
		return reflect.DeepEqual(bob.expectType(map[string]string{"cmd": "who"}, "online").Names, []string{"bob"})
	})
	bob.expectError(map[string]string{"cmd": "send", "to": "ana", "text": "still there?"}, UnknownRecipient)
}

// doRaw sends data as is and returns the raw text of the reply.
func (w *wsClient) doRaw(data string) string {
	w.t.Helper()
	w.sendRaw(data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return string(b)
}

func TestWebSocketBadInput(t *testing.T) {
	ts := startService(t, t.TempDir())
	bob := wsConnect(t, ts, "bob")
	w := wsConnect(t, ts, "ana")
	tests := []struct {
		in   string
		want Reason
	}{
		{`not json`, BadCommand},
		{`{"cmd":`, BadCommand},
		{`[]`, BadCommand},
		{`{}`, BadCommand},
		{`{"cmd":"dance"}`, BadCommand},
		{`{"cmd":7}`, BadCommand},
		{`{"cmd":"send","to":"bob"}`, BadCommand},
		{`{"cmd":"send","to":"bob","text":"two\nlines"}`, BadCommand},
		{`{"cmd":"send","to":"","text":"x"}`, BadName},
		{`{"cmd":"send","to":"b o b","text":"x"}`, BadName},
		{`{"cmd":"join","room":""}`, BadName},
		{`{"cmd":"history","with":"` + strings.Repeat("x", MaxName+1) + `"}`, BadName},
		{"{\"cmd\":\"send\",\"to\":\"bob\",\"text\":\"\xff\"}", BadEncoding},
		{`{"cmd":"connect","name":"ana"}`, AlreadyConnected},
	}
	for _, tt := range tests {
		raw := w.doRaw(tt.in)
		var r wsReply
		if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Type != "error" || r.Reason != tt.want {
			t.Errorf("%.60q → %s, want error %s", tt.in, raw, tt.want)
		}
	}
	// A binary message is not a command of the protocol.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageBinary, []byte(`{"cmd":"who"}`)); err != nil {
		t.Fatal(err)
	}
	if r := w.next(); r.Type != "error" || r.Reason != BadEncoding {
		t.Fatalf("binary message → %+v, want error bad_encoding", r)
	}
	// None of that hurt the session: ana still sends, bob still receives.
	w.expectType(map[string]string{"cmd": "send", "to": "bob", "text": "still fine"}, "sent")
	if got := bob.next(); got.Type != "msg" || got.Text != "still fine" {
		t.Fatalf("bob got %+v", got)
	}
}

// A message over the limit ends that session only, as a TCP line over
// MaxLine does. On the WebSocket the reason travels in the close frame,
// status 1009 (message too big): the library closes the connection as it
// reads past the limit, before an {"type":"error"} could be written.
func TestWebSocketTooBigClosesOnlyThatSession(t *testing.T) {
	ts := startService(t, t.TempDir())
	bob := wsConnect(t, ts, "bob")
	evil := wsConnect(t, ts, "evil")
	big := `{"cmd":"send","to":"bob","text":"` + strings.Repeat("x", MaxLine+2048) + `"}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evil.c.Write(ctx, websocket.MessageText, []byte(big)) // may fail once the server closes
	_, data, err := evil.c.Read(ctx)
	if err == nil {
		t.Fatalf("got %s, want a close", data)
	}
	if s := websocket.CloseStatus(err); s != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %v (status %v), want status %v", err, s, websocket.StatusMessageTooBig)
	}
	eventually(t, "evil to go offline", func() bool {
		return reflect.DeepEqual(bob.expectType(map[string]string{"cmd": "who"}, "online").Names, []string{"bob"})
	})
	bob.expectType(map[string]string{"cmd": "send", "to": "bob", "text": "me, myself"}, "sent")
	if got := bob.next(); got.Type != "msg" || got.Text != "me, myself" {
		t.Fatalf("bob got %+v", got)
	}
}

// TCP and WebSocket users are one population: each finds the other.
func TestWebSocketAndTCPUsersTalk(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana := wsConnect(t, ts, "ana")
	bob := connect(t, ts, "bob")
	bob.expect("SEND ana from tcp", "SENT ana")
	if got := ana.next(); got.Type != "msg" || got.From != "bob" || got.Text != "from tcp" {
		t.Fatalf("ana got %+v", got)
	}
	ana.expectType(map[string]string{"cmd": "send", "to": "bob", "text": "from the web"}, "sent")
	if got := bob.line(); got != "MSG ana from the web" {
		t.Fatalf("bob got %q", got)
	}
	if got := ana.expectType(map[string]string{"cmd": "who"}, "online"); !reflect.DeepEqual(got.Names, []string{"ana", "bob"}) {
		t.Fatalf("who = %q", got.Names)
	}
	bob.expect("JOIN r", "OK")
	ana.expectType(map[string]string{"cmd": "join", "room": "r"}, "ok")
	bob.expect("SAY r mixed", "OK")
	if got := bob.line(); got != "ROOM r bob mixed" {
		t.Fatalf("bob got %q", got)
	}
	if got := ana.next(); got.Type != "room" || got.Room != "r" || got.From != "bob" || got.Text != "mixed" {
		t.Fatalf("ana got %+v", got)
	}
}

// The page is served at / and its script speaks to /ws.
func TestWebPageServed(t *testing.T) {
	ts := startService(t, t.TempDir())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ts.HTTPAddr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"/ws", `id="connect"`, `id="send"`, `id="log"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	resp, err = (&http.Client{Transport: tr}).Get("http://" + ts.HTTPAddr().String() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nope = %d, want 404", resp.StatusCode)
	}
}

// A WebSocket user is registered again after the online registry crashes,
// as a TCP user is (the failure table's second row, over the WebSocket).
func TestWebSocketUserSurvivesOnlineRestart(t *testing.T) {
	ts := startService(t, t.TempDir())
	ana := wsConnect(t, ts, "ana")
	ana.expectType(map[string]string{"cmd": "join", "room": "lobby"}, "ok")
	bob := connect(t, ts, "bob")
	old, _ := ts.n.Whereis(onlineName)
	ts.n.Exit(old, errors.New("crash"))
	eventually(t, "a new online registry", func() bool {
		pid, ok := ts.n.Whereis(onlineName)
		return ok && pid != old
	})
	eventually(t, "ana to register again", func() bool { return bob.do("WHO") == "ONLINE 2 ana bob" })
	bob.expect("SEND ana still there?", "SENT ana")
	if got := ana.next(); got.Type != "msg" || got.From != "bob" || got.Text != "still there?" {
		t.Fatalf("ana got %+v", got)
	}
	bob.expect("JOIN lobby", "OK")
	bob.expect("SAY lobby knock", "OK")
	if got := ana.next(); got.Type != "room" || got.Room != "lobby" || got.Text != "knock" {
		t.Fatalf("ana got %+v", got)
	}
	wsDial(t, ts).expectError(map[string]string{"cmd": "connect", "name": "ana"}, NameTaken)
}
