package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/server"
)

func roundTrip(t testing.TB, c *Codec, v any) any {
	t.Helper()
	b, err := c.AppendValue(nil, v)
	if err != nil {
		t.Fatalf("encode %#v: %v", v, err)
	}
	d := &reader{b: b}
	got, err := c.decodeValue(d)
	if err != nil {
		t.Fatalf("decode %#v: %v", v, err)
	}
	if len(d.b) != 0 {
		t.Fatalf("%d trailing bytes after %#v", len(d.b), v)
	}
	return got
}

func TestCodecValues(t *testing.T) {
	c := testCodec(t)
	pid := gotp.NewPID("n@host.example", 7, 99)
	ref := gotp.NewRef("n", 7, 3)
	now := time.Now().Round(0)
	for _, v := range []any{
		nil, true, "olá", []byte{1, 2}, 42, int8(-3), uint64(1 << 60), 3.5, float32(1.5),
		[]string{"a", "b"}, time.Second, pid, ref,
		Ping{From: pid, N: 1, Note: "x"},
		Box{Any: Ping{N: 2}}, Box{Any: pid}, Box{Any: "s"},
		gotp.Down{Ref: ref, PID: pid, Reason: gotp.ErrNoConnection},
		gotp.Exit{From: pid, Reason: nil},
		server.ReplyMessage{Ref: ref, Value: Ping{N: 3}},
		server.Request{Caller: pid, Ref: ref, Body: 12},
		server.CastMessage{Body: "hi"},
		server.StopRequest{Reason: gotp.ErrShutdown},
	} {
		if got := roundTrip(t, c, v); !reflect.DeepEqual(got, v) {
			t.Errorf("round trip of %#v gave %#v", v, got)
		}
	}
	if got := roundTrip(t, c, now).(time.Time); !got.Equal(now) {
		t.Errorf("time %v came back %v", now, got)
	}
	// Basic values inside any come back as CBOR's generic kinds.
	if got := roundTrip(t, c, Box{Any: 5}).(Box); got.Any != uint64(5) {
		t.Errorf("int inside any: %#v", got.Any)
	}
}

func TestCodecReasons(t *testing.T) {
	c := testCodec(t)
	for _, s := range []error{nil, gotp.ErrShutdown, gotp.ErrKill, gotp.ErrKilled, gotp.ErrNoProc, gotp.ErrNoConnection, errBoom} {
		d := &reader{b: c.appendReason(nil, s)}
		if got := c.readReason(d, 0); got != s || d.err != nil {
			t.Errorf("sentinel %v came back %#v (%v)", s, got, d.err)
		}
	}
	wrapped := fmt.Errorf("draining: %w", gotp.ErrShutdown)
	d := &reader{b: c.appendReason(nil, wrapped)}
	got := c.readReason(d, 0)
	if !errors.Is(got, gotp.ErrShutdown) || got.Error() != wrapped.Error() || !gotp.IsNormal(got) {
		t.Errorf("wrapped: %#v", got)
	}
	plain := errors.New("disk full")
	d = &reader{b: c.appendReason(nil, plain)}
	got = c.readReason(d, 0)
	var re *RemoteError
	if !errors.As(got, &re) || re.Msg != "disk full" || errors.Is(got, gotp.ErrShutdown) {
		t.Errorf("plain: %#v", got)
	}
	pe := &gotp.PanicError{Value: "oops", Stack: []byte("stack")}
	d = &reader{b: c.appendReason(nil, pe)}
	gotPE, ok := c.readReason(d, 0).(*gotp.PanicError)
	if !ok || gotPE.Value != "oops" || string(gotPE.Stack) != "stack" {
		t.Errorf("panic: %#v", gotPE)
	}
	// A sentinel the receiver does not know arrives as a remote error.
	other := NewCodec()
	d = &reader{b: c.appendReason(nil, errBoom)}
	if got := other.readReason(d, 0); got == nil || got.Error() != "test.errBoom" {
		t.Errorf("unknown sentinel: %#v", got)
	}
}

// The codec refuses at the sender anything whose type a receiver could not
// rebuild, wherever it hides.
func TestCodecRefusesUnregistered(t *testing.T) {
	c := testCodec(t)
	for _, v := range []any{
		unregistered{}, &Ping{}, Box{Any: unregistered{}}, Box{Any: []any{Box{Any: unregistered{}}}},
		Box{Any: map[string]any{"k": unregistered{}}}, server.CastMessage{Body: unregistered{}},
		server.Request{Body: Box{Any: struct{}{}}}, Box{Any: gotp.Down{}},
	} {
		if err := c.Check(v); err == nil {
			t.Errorf("%#v accepted", v)
		} else if !errors.As(err, new(*UnregisteredTypeError)) {
			t.Errorf("%#v: %v", v, err)
		}
	}
	// A receiver never decodes a type it did not register.
	b, err := c.AppendValue(nil, Ping{N: 1})
	gotptest.Must(t, err)
	if _, err := NewCodec().decodeValue(&reader{b: b}); !errors.Is(err, ErrDecode) {
		t.Fatalf("decode of an unregistered type: %v", err)
	}
	if err := Register[Ping](c, "again"); err == nil {
		t.Fatal("registered a type twice")
	}
	if err := Register[unregistered](c, "test.Ping"); err == nil {
		t.Fatal("registered a name twice")
	}
}

// Property: any Ping survives the trip, as a message and inside a Request.
func TestCodecPingProperty(t *testing.T) {
	c := testCodec(t)
	rapid.Check(t, func(t *rapid.T) {
		p := Ping{
			From: gotp.NewPID(rapid.StringMatching(`[a-z@.]{1,12}`).Draw(t, "node"), rapid.Uint32().Draw(t, "cr"), rapid.Uint64Min(1).Draw(t, "id")),
			N:    rapid.Int().Draw(t, "n"),
			Note: rapid.String().Draw(t, "note"),
		}
		req := server.Request{Caller: p.From, Ref: gotp.NewRef("r", 1, 2), Body: p}
		b, err := c.AppendValue(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.decodeValue(&reader{b: b})
		if err != nil || !reflect.DeepEqual(got, req) {
			t.Fatalf("got %#v (%v) want %#v", got, err, req)
		}
	})
}

// seedBatches returns well-formed batches of every frame kind, the fuzzer's
// starting points.
func seedBatches(t testing.TB) [][]byte {
	c := testCodec(t)
	pid := gotp.NewPID("b", 5, 9)
	ref := gotp.NewRef("a", 3, 4)
	hdr := []byte{wireMagic, wireVersion}
	hdr = appendStr(hdr, "a")
	hdr = binary.AppendUvarint(hdr, 3)
	hdr = binary.AppendUvarint(hdr, 12345)
	ctl := binary.AppendUvarint(append([]byte(nil), hdr...), 0) // a control batch
	hdr = binary.AppendUvarint(hdr, 7)                          // connection 7
	var frames [][]byte
	f := []byte{kSend}
	f = appendShortPID(f, gotp.NewPID("a", 3, 1))
	f = appendShortPID(f, pid)
	f, _ = c.AppendValue(f, server.Request{Caller: pid, Ref: ref, Body: Box{Any: Ping{N: 1}}})
	frames = append(frames, f)
	f = appendShortPID(append([]byte{kExit}, appendShortPID(nil, gotp.NewPID("a", 3, 1))...), pid)
	f = append(c.appendReason(f, fmt.Errorf("x: %w", gotp.ErrShutdown)), 1)
	frames = append(frames, f)
	frames = append(frames, appendShortPID(appendShortPID([]byte{kLink}, pid), pid))
	frames = append(frames, appendShortPID(appendShortPID(appendShortRef([]byte{kMonitor}, ref), pid), pid))
	frames = append(frames, appendShortPID(appendShortRef([]byte{kDemonitor}, ref), pid))
	frames = append(frames, c.appendReason(appendShortPID(appendShortRef([]byte{kDown}, ref), pid), &gotp.PanicError{Value: errBoom}))
	frames = append(frames, []byte{kTick}, []byte{kBye, byeLeaving}, []byte{kHello, helloConfirm})
	call, _ := c.AppendValue(appendShortPID(append(appendShortRef([]byte{kCall}, ref), callPID), pid), 21)
	frames = append(frames, call)
	callNamed, _ := c.AppendValue(appendStr(append(appendShortRef([]byte{kCall}, ref), callName), "kv"), "get")
	frames = append(frames, callNamed)
	reply, _ := c.AppendValue(appendShortRef([]byte{kReply}, ref), Ping{N: 2})
	frames = append(frames, reply, appendShortRef([]byte{kCancel}, ref), appendStr(appendShortRef([]byte{kWhereis}, ref), "kv"))
	named, _ := c.AppendValue(appendStr([]byte{kSendNamed}, "mailbox"), Ping{N: 4})
	frames = append(frames, named)
	pgf := append([]byte{kPG, pgSync}, appendStr(nil, "scope")...)
	pgf = append(pgf, 1)
	pgf = binary.AppendUvarint(pgf, 1)
	pgf = appendPIDList(appendStr(pgf, "g"), []gotp.PID{pid, pid})
	frames = append(frames, pgf)
	bc := appendShortPID(appendStr(appendStr(append([]byte{kPG, pgBroadcast}, appendStr(nil, "scope")...), "g"), "topic"), pid)
	bc, _ = c.AppendValue(bc, "payload")
	frames = append(frames, bc)
	var out [][]byte
	all := append([]byte(nil), hdr...)
	for _, f := range frames {
		one := binary.AppendUvarint(append([]byte(nil), hdr...), uint64(len(f)))
		out = append(out, append(one, f...))
		all = binary.AppendUvarint(all, uint64(len(f)))
		all = append(all, f...)
	}
	out = append(out, all)
	for _, f := range [][]byte{appendHeartbeat(nil, []string{"127.0.0.1:7222", "[::1]:7222"}), appendHello(nil, helloAsk, 5, 7, 0), appendHello(nil, helloAck, 5, 8, 7)} {
		one := binary.AppendUvarint(append([]byte(nil), ctl...), uint64(len(f)))
		out = append(out, append(one, f...))
	}
	return out
}

// decodeBatchForTest decodes a whole batch as a receiving node would,
// without acting on it.
func decodeBatchForTest(c *Codec, data []byte) (n int, err error) {
	d := &reader{b: data}
	inc, _, conn := parseHeader(d)
	if d.err != nil {
		return 0, d.err
	}
	name := inc.name
	for conn == 0 && len(d.b) > 0 {
		body := d.bytes()
		if d.err != nil {
			return n, d.err
		}
		if _, err := decodeControl(&reader{b: body}); err != nil {
			return n, err
		}
		n++
	}
	for len(d.b) > 0 {
		body := d.bytes()
		if d.err != nil {
			return n, d.err
		}
		fd := &reader{b: body}
		f, err := decodeFrame(c, name, "b", fd)
		if err != nil {
			return n, err
		}
		if f.kind == kPG {
			if _, err := decodePG(c, name, fd); err != nil {
				return n, err
			}
		}
		n++
	}
	return n, nil
}

func TestSeedBatchesDecode(t *testing.T) {
	c := testCodec(t)
	seeds := seedBatches(t)
	for i, s := range seeds {
		n, err := decodeBatchForTest(c, s)
		if err != nil || n == 0 {
			t.Fatalf("seed %d: %d frames, %v", i, n, err)
		}
		// Every strict prefix is refused or decodes fewer frames; none panics.
		for j := range len(s) {
			_, _ = decodeBatchForTest(c, s[:j])
		}
	}
	if os.Getenv("CLUSTER_WRITE_CORPUS") != "" {
		dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatch")
		gotptest.Must(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			gotptest.Must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte(body), 0o644))
		}
	}
}

// FuzzDecodeBatch feeds arbitrary bytes to the wire decoder: it must
// return an error or frames, never panic, and never allocate beyond what
// the input can justify. The committed corpus is in
// testdata/fuzz/FuzzDecodeBatch; run with
// go test -fuzz FuzzDecodeBatch ./cluster.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range seedBatches(f) {
		f.Add(s)
	}
	c := testCodec(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeBatchForTest(c, data)
	})
}
