package chat

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"pgregory.net/rapid"
)

// The protocol's promise, over real TCP: every command from a client ends
// in exactly one reply, and every SEND from a connected user ends in
// SENT <name> or ERROR <reason>, never silence. Random mixes of valid and
// invalid commands, some pipelined, come from 2–3 clients against one
// Service, each over TCP or over the WebSocket (the same commands as JSON,
// the JSON replies read back as the lines FormatReply writes), with names
// that are and are not online; the MSG and ROOM lines
// pushed to a client interleave with its replies and are checked too:
// each one expected, none unexpected, none lost.
//
// A model predicts every reply exactly, except where the protocol leaves
// a race open on purpose: a user who just quit may still be seen online
// (WHO, SEND, CONNECT) until the exit of its connection has been
// processed. SAY to a room the user has not joined is ERROR not_joined,
// and HELP works before CONNECT.
//
// Every check uses names of its own, so one Service serves them all.
// rapid's default of 100 checks takes a few seconds under -race.
func TestPropertyEveryCommandEndsInOneReply(t *testing.T) {
	ts := startService(t, t.TempDir())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	round := 0
	var seen propStats
	rapid.Check(t, func(rt *rapid.T) {
		round++
		m := newPropModel(rt, ts, fmt.Sprintf("r%d_", round), &seen, &http.Client{Transport: tr})
		defer m.close()
		rt.Repeat(map[string]func(*rapid.T){
			"one":   m.stepOne,
			"batch": m.stepBatch,
			"quit":  m.stepQuit,
		})
		m.finish()
	})
	// The generator must reach the interesting cases, or the property
	// says little.
	t.Logf("%+v", seen)
	if !t.Failed() && (seen.Commands < 200 || seen.Sent < 10 || seen.Unknown < 10 || seen.Msgs < 10 || seen.Rooms < 5 || seen.Errors < 20 || seen.Quits < 5 || seen.WebSockets < 20) {
		t.Fatalf("the generator missed cases: %+v", seen)
	}
}

// propStats counts what the checks exercised.
type propStats struct {
	Commands, Sent, Unknown, Errors, Msgs, Rooms, Quits, WebSockets int
}

// A propWire is a client's connection, TCP or WebSocket, seen as lines of
// the TCP protocol: a WebSocket client sends the JSON form of each command,
// and its JSON replies and events are turned into the lines FormatReply
// writes, so one model checks both.
type propWire interface {
	send(cmds []propCmd, crlf []bool) error
	// readLine returns the next line, without "\n"; an error after a
	// generous deadline or at the end of the stream.
	readLine() (string, error)
	close()
}

type tcpWire struct {
	c  net.Conn
	rd *bufio.Reader
}

func (w *tcpWire) send(cmds []propCmd, crlf []bool) error {
	var b strings.Builder
	for i, cmd := range cmds {
		b.WriteString(cmd.line)
		if crlf[i] {
			b.WriteString("\r")
		}
		b.WriteString("\n")
	}
	w.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := w.c.Write([]byte(b.String()))
	return err
}

func (w *tcpWire) readLine() (string, error) {
	w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	s, err := w.rd.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func (w *tcpWire) close() { w.c.Close() }

type wsWire struct {
	c     *websocket.Conn
	lines []string // read and not yet returned
}

func (w *wsWire) send(cmds []propCmd, _ []bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cmd := range cmds {
		if err := w.c.Write(ctx, websocket.MessageText, []byte(cmd.json)); err != nil {
			return err
		}
	}
	return nil
}

func (w *wsWire) readLine() (string, error) {
	if len(w.lines) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		typ, data, err := w.c.Read(ctx)
		if err != nil {
			return "", err
		}
		var r wsReply
		if err := json.Unmarshal(data, &r); typ != websocket.MessageText || err != nil {
			return "", fmt.Errorf("not a JSON text message: %q", data)
		}
		var reply Reply
		switch r.Type {
		case "ok":
			reply = OK{}
		case "sent":
			reply = Sent{To: r.To}
		case "history":
			reply = HistoryReply{Messages: r.Messages}
		case "online":
			reply = Online{Names: r.Names}
		case "help":
			reply = HelpReply{Lines: r.Lines}
		case "bye":
			reply = Bye{}
		case "error":
			reply = Error{Reason: r.Reason}
		case "msg":
			reply = Msg{From: r.From, Text: r.Text}
		case "room":
			reply = RoomMsg{Room: r.Room, From: r.From, Text: r.Text}
		default:
			return "", fmt.Errorf("unknown reply %s", data)
		}
		w.lines = strings.Split(strings.TrimSuffix(string(FormatReply(reply)), "\n"), "\n")
	}
	l := w.lines[0]
	w.lines = w.lines[1:]
	return l, nil
}

func (w *wsWire) close() { w.c.CloseNow() }

type propClient struct {
	id     int
	w      propWire
	name   string          // "" until CONNECT succeeds
	rooms  map[string]bool // rooms joined in this session
	events map[string]int  // MSG and ROOM lines due to arrive, counted
}

type propModel struct {
	t       *rapid.T
	ts      *testService
	clients []*propClient
	prefix  string              // of every name of this check
	names   []string            // the pool of user names of this check
	rooms   []string            // the pool of room names of this check
	online  map[string]int      // name → client id holding it
	leaving map[string]bool     // names whose user quit: the service may not know yet
	history map[string][]string // pair key → "from text" lines, oldest first
	stats   *propStats
	http    *http.Client // for the WebSocket clients
}

func newPropModel(t *rapid.T, ts *testService, prefix string, stats *propStats, hc *http.Client) *propModel {
	m := &propModel{
		t: t, ts: ts, prefix: prefix, stats: stats, http: hc,
		online: map[string]int{}, leaving: map[string]bool{}, history: map[string][]string{},
	}
	for _, n := range []string{"ana", "bob", "cy", "dé"} {
		m.names = append(m.names, prefix+n)
	}
	m.rooms = []string{prefix + "#1", prefix + "#2"}
	for i := range rapid.IntRange(2, 3).Draw(t, "clients") {
		m.clients = append(m.clients, m.dial(t, i))
	}
	return m
}

// dial connects a new client, over TCP or the WebSocket.
func (m *propModel) dial(t *rapid.T, id int) *propClient {
	var w propWire
	if rapid.Bool().Draw(t, "websocket") {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws://"+m.ts.HTTPAddr().String()+"/ws", &websocket.DialOptions{HTTPClient: m.http})
		if err != nil {
			m.t.Fatalf("dial /ws: %v", err)
		}
		w = &wsWire{c: c}
		m.stats.WebSockets++
	} else {
		c, err := net.Dial("tcp", m.ts.TCPAddr().String())
		if err != nil {
			m.t.Fatalf("dial: %v", err)
		}
		w = &tcpWire{c: c, rd: bufio.NewReader(c)}
	}
	return &propClient{id: id, w: w, rooms: map[string]bool{}, events: map[string]int{}}
}

func (m *propModel) close() {
	for _, c := range m.clients {
		c.w.close()
	}
}

// A propCmd is one generated command line and what it means.
type propCmd struct {
	line string
	json string // the same command on the WebSocket
	verb string // CONNECT, SEND, HISTORY, JOIN, LEAVE, SAY, WHO, HELP; "" for invalid lines
	arg  string
	text string
	bad  Reason // the error an invalid line gets
}

func (m *propModel) drawCmd(t *rapid.T) propCmd {
	verb := func(v string) string {
		if rapid.Bool().Draw(t, "lower") {
			return strings.ToLower(v)
		}
		return v
	}
	name := func() string { return rapid.SampledFrom(m.names).Draw(t, "name") }
	room := func() string { return rapid.SampledFrom(m.rooms).Draw(t, "room") }
	text := func() string { return rapid.StringMatching(`[a-zé😀 ]{0,10}[a-z!]`).Draw(t, "text") }
	switch k := rapid.IntRange(0, 9).Draw(t, "kind"); k {
	case 0:
		n := name()
		return withJSON(propCmd{line: verb("CONNECT") + " " + n, verb: "CONNECT", arg: n})
	case 1, 2:
		n, x := name(), text()
		return withJSON(propCmd{line: verb("SEND") + " " + n + " " + x, verb: "SEND", arg: n, text: x})
	case 3:
		n := name()
		return withJSON(propCmd{line: verb("HISTORY") + " " + n, verb: "HISTORY", arg: n})
	case 4:
		r := room()
		return withJSON(propCmd{line: verb("JOIN") + " " + r, verb: "JOIN", arg: r})
	case 5:
		r := room()
		return withJSON(propCmd{line: verb("LEAVE") + " " + r, verb: "LEAVE", arg: r})
	case 6:
		r, x := room(), text()
		return withJSON(propCmd{line: verb("SAY") + " " + r + " " + x, verb: "SAY", arg: r, text: x})
	case 7:
		return withJSON(propCmd{line: verb("WHO"), verb: "WHO"})
	case 8:
		return withJSON(propCmd{line: verb("HELP"), verb: "HELP"})
	}
	n1, n2, r, x := name(), name(), room(), text()
	bad := []propCmd{
		{line: "DANCE", json: `{"cmd":"dance"}`, bad: BadCommand},
		{line: "", json: ``, bad: BadCommand},
		{line: "SEND " + n1, json: jsonCmd("send", "to", n1), bad: BadCommand},
		{line: "SEND " + n1 + " ", json: jsonCmd("send", "to", n1, "text", ""), bad: BadCommand},
		{line: "SAY " + r, json: jsonCmd("say", "room", r), bad: BadCommand},
		{line: "WHO is there", json: `who is there`, bad: BadCommand},
		{line: "QUIT now", json: `{"cmd":"quit"`, bad: BadCommand},
		{line: "CONNECT " + n1 + " " + n2, json: jsonCmd("connect", "name", n1+" "+n2), bad: BadName},
		{line: "SEND  " + x, json: jsonCmd("send", "to", "", "text", x), bad: BadName},
		{line: "HISTORY " + strings.Repeat("x", MaxName+1), json: jsonCmd("history", "with", strings.Repeat("x", MaxName+1)), bad: BadName},
		{line: "JOIN a\x01b", json: jsonCmd("join", "room", "a\x01b"), bad: BadName},
		{line: "SEND " + n1 + " \xff\xfe", json: `{"cmd":"send","to":"` + n1 + `","text":"` + "\xff\xfe" + `"}`, bad: BadEncoding},
		{line: "\xc3", json: "\xc3", bad: BadEncoding},
	}
	return rapid.SampledFrom(bad).Draw(t, "bad")
}

// jsonCmd is the JSON of a command: cmd, then field names and values.
func jsonCmd(cmd string, kv ...string) string {
	m := map[string]string{"cmd": cmd}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// withJSON fills in the JSON form of a valid command.
func withJSON(c propCmd) propCmd {
	switch c.verb {
	case "CONNECT":
		c.json = jsonCmd("connect", "name", c.arg)
	case "SEND":
		c.json = jsonCmd("send", "to", c.arg, "text", c.text)
	case "HISTORY":
		c.json = jsonCmd("history", "with", c.arg)
	case "JOIN", "LEAVE":
		c.json = jsonCmd(strings.ToLower(c.verb), "room", c.arg)
	case "SAY":
		c.json = jsonCmd("say", "room", c.arg, "text", c.text)
	case "WHO":
		c.json = jsonCmd("who")
	case "HELP":
		c.json = jsonCmd("help")
	}
	return c
}

// stepOne: one client sends one command and reads its reply.
func (m *propModel) stepOne(t *rapid.T) {
	c := rapid.SampledFrom(m.clients).Draw(t, "client")
	cmd := m.drawCmd(t)
	if c.name == "" && rapid.Bool().Draw(t, "connect first") {
		n := rapid.SampledFrom(m.names).Draw(t, "name")
		cmd = withJSON(propCmd{line: "CONNECT " + n, verb: "CONNECT", arg: n})
	}
	m.write(c, []propCmd{cmd}, []bool{false})
	m.check(c, cmd)
}

// stepBatch: one client writes 2–4 commands at once (in one write, CRLF or
// LF endings), then reads their replies in order.
func (m *propModel) stepBatch(t *rapid.T) {
	c := rapid.SampledFrom(m.clients).Draw(t, "client")
	cmds := rapid.SliceOfN(rapid.Custom(m.drawCmd), 2, 4).Draw(t, "batch")
	crlf := make([]bool, len(cmds))
	for i := range crlf {
		crlf[i] = rapid.Bool().Draw(t, "crlf")
	}
	m.write(c, cmds, crlf)
	for _, cmd := range cmds {
		m.check(c, cmd)
	}
}

// stepQuit: one client quits, gets BYE and then end of stream, and a new
// connection takes its place.
func (m *propModel) stepQuit(t *rapid.T) {
	if rapid.IntRange(0, 3).Draw(t, "really") != 0 {
		m.stepOne(t) // quitting one step in three is too often
		return
	}
	c := rapid.SampledFrom(m.clients).Draw(t, "client")
	m.write(c, []propCmd{{line: "QUIT", json: jsonCmd("quit")}}, []bool{false})
	if r := m.reply(c); !slices.Equal(r, []string{"BYE"}) {
		t.Fatalf("client %d: QUIT → %q, want BYE", c.id, r)
	}
	if line, err := c.w.readLine(); err == nil {
		t.Fatalf("client %d: read %q after BYE, want the end of the stream", c.id, line)
	}
	c.w.close()
	m.stats.Quits++
	if c.name != "" {
		delete(m.online, c.name)
		m.leaving[c.name] = true
	}
	m.clients[c.id] = m.dial(t, c.id)
}

func (m *propModel) write(c *propClient, cmds []propCmd, crlf []bool) {
	if err := c.w.send(cmds, crlf); err != nil {
		m.t.Fatalf("client %d: write %v: %v", c.id, cmds, err)
	}
}

// reply reads the next reply of c: its first line and, for HISTORY <n>, the
// n lines after it. Pushed MSG and ROOM lines read on the way must be
// expected; silence until the deadline fails the check.
func (m *propModel) reply(c *propClient) []string {
	for {
		line := m.readLine(c)
		if strings.HasPrefix(line, "MSG ") || strings.HasPrefix(line, "ROOM ") {
			m.event(c, line)
			continue
		}
		r := []string{line}
		rest, ok := strings.CutPrefix(line, "HISTORY ")
		if !ok {
			rest, ok = strings.CutPrefix(line, "HELP ")
		}
		if ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 {
				m.t.Fatalf("client %d: bad header %q", c.id, line)
			}
			for range n {
				r = append(r, m.readLine(c))
			}
		}
		return r
	}
}

func (m *propModel) readLine(c *propClient) string {
	s, err := c.w.readLine()
	if err != nil {
		m.t.Fatalf("client %d (%q): no reply: %v (read %q)", c.id, c.name, err, s)
	}
	return s
}

func (m *propModel) event(c *propClient, line string) {
	if c.events[line] == 0 {
		m.t.Fatalf("client %d (%q): unexpected %q", c.id, c.name, line)
	}
	c.events[line]--
	if strings.HasPrefix(line, "MSG ") {
		m.stats.Msgs++
	} else {
		m.stats.Rooms++
	}
	if c.events[line] == 0 {
		delete(c.events, line)
	}
}

func propPair(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return a + "\x00" + b
}

// check reads the reply to cmd from c, checks it against the model and
// updates the model.
func (m *propModel) check(c *propClient, cmd propCmd) {
	t := m.t
	r := m.reply(c)
	m.stats.Commands++
	if len(r) == 1 {
		switch {
		case strings.HasPrefix(r[0], "SENT "):
			m.stats.Sent++
		case r[0] == "ERROR unknown_recipient":
			m.stats.Unknown++
		case strings.HasPrefix(r[0], "ERROR "):
			m.stats.Errors++
		}
	}
	fail := func(want string) {
		t.Fatalf("client %d (%q): %q → %q, want %s", c.id, c.name, cmd.line, r, want)
	}
	one := func(want ...string) string {
		if len(r) != 1 || !slices.Contains(want, r[0]) {
			fail(strings.Join(want, " or "))
		}
		return r[0]
	}
	if cmd.verb == "" {
		one("ERROR " + string(cmd.bad))
		return
	}
	if cmd.verb == "HELP" {
		want := append([]string{"HELP " + strconv.Itoa(len(helpLines()))}, helpLines()...)
		if !slices.Equal(r, want) {
			fail(fmt.Sprintf("%q", want))
		}
		return
	}
	if c.name == "" && cmd.verb != "CONNECT" {
		one("ERROR not_connected")
		return
	}
	switch cmd.verb {
	case "CONNECT":
		switch {
		case c.name != "":
			one("ERROR already_connected")
		case m.isOnline(cmd.arg):
			one("ERROR name_taken")
		case m.leaving[cmd.arg]:
			if one("OK", "ERROR name_taken") == "OK" {
				m.connected(c, cmd.arg)
			}
		default:
			one("OK")
			m.connected(c, cmd.arg)
		}
	case "SEND":
		// The property itself: SENT <name> or ERROR <reason>.
		if len(r) != 1 || (r[0] != "SENT "+cmd.arg && !strings.HasPrefix(r[0], "ERROR ")) {
			fail("SENT " + cmd.arg + " or ERROR <reason>")
		}
		var got string
		switch {
		case m.isOnline(cmd.arg):
			got = one("SENT " + cmd.arg)
			to := m.clients[m.online[cmd.arg]]
			to.events["MSG "+c.name+" "+cmd.text]++
		case m.leaving[cmd.arg]:
			got = one("SENT "+cmd.arg, "ERROR unknown_recipient")
		default:
			got = one("ERROR unknown_recipient")
		}
		if strings.HasPrefix(got, "SENT ") {
			k := propPair(c.name, cmd.arg)
			m.history[k] = append(m.history[k], c.name+" "+cmd.text)
		}
	case "HISTORY":
		want := append([]string{"HISTORY " + strconv.Itoa(len(m.history[propPair(c.name, cmd.arg)]))}, m.history[propPair(c.name, cmd.arg)]...)
		if !slices.Equal(r, want) {
			fail(fmt.Sprintf("%q", want))
		}
	case "JOIN":
		one("OK")
		c.rooms[cmd.arg] = true
	case "LEAVE":
		if c.rooms[cmd.arg] {
			one("OK")
			delete(c.rooms, cmd.arg)
		} else {
			one("ERROR not_member")
		}
	case "SAY":
		want := "OK"
		if !c.rooms[cmd.arg] {
			want = "ERROR not_joined"
		}
		if one(want) == "OK" {
			for _, o := range m.clients {
				if o.name != "" && o.rooms[cmd.arg] {
					o.events["ROOM "+cmd.arg+" "+c.name+" "+cmd.text]++
				}
			}
		}
	case "WHO":
		m.checkWho(c, cmd, r)
	}
}

func (m *propModel) isOnline(name string) bool {
	_, ok := m.online[name]
	return ok
}

func (m *propModel) connected(c *propClient, name string) {
	c.name = name
	m.online[name] = c.id
	delete(m.leaving, name)
}

// checkWho: every online user is listed, sorted, and nobody else but users
// who just quit.
func (m *propModel) checkWho(c *propClient, cmd propCmd, r []string) {
	f := strings.Fields(r[0])
	if len(r) != 1 || len(f) < 2 || f[0] != "ONLINE" || f[1] != strconv.Itoa(len(f)-2) {
		m.t.Fatalf("client %d: %q → %q, want ONLINE <n> <names>", c.id, cmd.line, r)
	}
	listed := f[2:]
	if !slices.IsSorted(listed) {
		m.t.Fatalf("client %d: WHO not sorted: %q", c.id, listed)
	}
	for name := range m.online {
		if !slices.Contains(listed, name) {
			m.t.Fatalf("client %d: WHO = %q lacks %q", c.id, listed, name)
		}
	}
	for _, name := range listed {
		if !m.isOnline(name) && !m.leaving[name] && strings.HasPrefix(name, m.prefix) {
			m.t.Fatalf("client %d: WHO = %q lists %q, who is not online", c.id, listed, name)
		}
	}
}

// finish: each client sends one more command, whose reply must be the next
// one (no extra reply was pending), and every expected event arrives.
func (m *propModel) finish() {
	for _, c := range m.clients {
		m.write(c, []propCmd{withJSON(propCmd{line: "WHO", verb: "WHO"})}, []bool{false})
		r := m.reply(c)
		if c.name == "" {
			if !slices.Equal(r, []string{"ERROR not_connected"}) {
				m.t.Fatalf("client %d: final WHO → %q, want ERROR not_connected", c.id, r)
			}
		} else {
			m.checkWho(c, propCmd{line: "WHO", verb: "WHO"}, r)
		}
	}
	for _, c := range m.clients {
		for len(c.events) > 0 {
			line := m.readLine(c)
			if !strings.HasPrefix(line, "MSG ") && !strings.HasPrefix(line, "ROOM ") {
				m.t.Fatalf("client %d: %q after the last reply, while waiting for %v", c.id, line, c.events)
			}
			m.event(c, line)
		}
	}
}
