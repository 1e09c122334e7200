package inbox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// userTable creates a table the way a user might, with a nullable attempts column
// without a default (the claim must count a NULL as 0) and nullable payloads.
func userTable(t *testing.T, b *backend) inbox.Columns {
	t.Helper()
	if b.dialect == inbox.SQLite {
		b.exec(t, `CREATE TABLE "`+b.table+`" (id INTEGER PRIMARY KEY, run_at INTEGER NOT NULL DEFAULT 0, body BLOB, tries INTEGER, err TEXT, dead INTEGER)`)
	} else {
		b.exec(t, `CREATE TABLE "`+b.table+`" (id BIGSERIAL PRIMARY KEY, run_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch', body BYTEA, tries INTEGER, err TEXT, dead TIMESTAMPTZ)`)
	}
	return inbox.Columns{ID: "id", LockedUntil: "run_at", Payload: "body", Attempts: "tries", LastError: "err", DeadAt: "dead"}
}

// Outside rows a user's programs might write: a NULL attempts count, payloads that are
// NULL, empty, JSON null, not JSON, an attempts count at its type's limit, and (on
// SQLite, which is typeless) values of the wrong type. None of them wedges the queue:
// every good job runs, every undecodable one is dead-lettered with a *DecodeError,
// no claim fails, and every row is in some Stats bucket.
func TestBadRowsNeverWedgeTheQueue(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		cols := userTable(t, b)
		const good = 100
		for i := range good {
			b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+b.ph(1)+`)`, []byte(`{"n":`+strconv.Itoa(i)+`}`))
		}
		bad := map[string]string{ // payload SQL → what the dead letter's error says
			"NULL":              inbox.ErrNullPayload.Error(),
			b.blob(""):          inbox.ErrNullPayload.Error(),
			b.blob("null"):      inbox.ErrNullPayload.Error(),
			b.blob("{oops"):     "invalid character",
			b.blob(`{"n":"x"}`): "cannot unmarshal",
		}
		if b.dialect == inbox.SQLite {
			bad["42"] = "cannot unmarshal" // an INTEGER payload: read as the bytes "42"
		}
		for payload := range bad {
			b.exec(t, `INSERT INTO "`+b.table+`" (body) VALUES (`+payload+`)`)
		}
		// A good job whose attempts are at the column type's limit: attempts + 1 would
		// overflow and fail every claim that takes it. Its count is past MaxAttempts,
		// so the claim that takes it dead-letters it as exhausted (*ExhaustedError).
		b.exec(t, `INSERT INTO "`+b.table+`" (body, tries) VALUES (`+b.blob(`{"n":1000}`)+`, 2147483647)`)
		if b.dialect == inbox.SQLite {
			b.exec(t, `INSERT INTO "`+b.table+`" (body, tries) VALUES (`+b.blob(`{"n":1001}`)+`, 'many')`)
			b.exec(t, `INSERT INTO "`+b.table+`" (body, tries) VALUES (`+b.blob(`{"n":1002}`)+`, 2.5)`)
		}
		logs := gotptest.NewLogRecorder()
		q := newQueue(t, b, inbox.Config[msg]{Columns: cols, Logger: logs.Logger()})
		seen := make(chan int, 2*good)
		res := newResults()
		s := start(t, q, func(ctx context.Context, j inbox.Job[msg]) error {
			seen <- j.Payload.N
			return nil
		}, inbox.SubscribeOptions{Workers: 4, MaxAttempts: 3, PollInterval: 20 * time.Millisecond, Observe: res.observe})
		extra := 0
		if b.dialect == inbox.SQLite {
			extra = 2
		}
		handled := map[int]int{}
		for range good + extra {
			handled[gotptest.Recv(t, seen)]++
		}
		for i := range good {
			if handled[i] != 1 {
				t.Errorf("good job %d handled %d times", i, handled[i])
			}
		}
		gotptest.Eventually(t, "every bad row dead-lettered", func() bool {
			st, err := q.Stats(t.Context())
			return err == nil && st.Dead == int64(len(bad))+1 && st.Ready == 0 && st.InWork == 0
		})
		dead, err := q.DeadLetters(t.Context(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != len(bad)+1 {
			t.Fatalf("%d dead letters, want %d", len(dead), len(bad)+1)
		}
		want := map[string]int{}
		for _, w := range bad {
			want[w]++
		}
		exhausted := 0
		for _, d := range dead {
			if strings.Contains(d.LastError, "exhausted its attempts") && strings.Contains(string(d.Payload), "1000") {
				exhausted++
				continue
			}
			matched := false
			for w := range want {
				if strings.Contains(d.LastError, w) && want[w] > 0 {
					want[w]--
					matched = true
					break
				}
			}
			if !matched {
				t.Errorf("dead letter %d: last error %q, attempts %d: not one of the expected decode errors", d.ID, d.LastError, d.Attempts)
			}
			if d.Attempts != 1 {
				t.Errorf("dead letter %d has %d attempts; a decode error dead-letters at once", d.ID, d.Attempts)
			}
		}
		if exhausted != 1 {
			t.Errorf("%d exhausted dead letters; want the job whose attempts were at the limit", exhausted)
		}
		res.mu.Lock()
		for _, r := range res.all {
			if _, x := errors.AsType[*inbox.ExhaustedError](r.Err); r.Outcome == inbox.DeadLettered && !isDecodeError(r.Err) && !x {
				t.Errorf("dead-lettered %+v without a *DecodeError", r)
			}
			if r.SettleErr != nil {
				t.Errorf("settlement failed: %+v", r)
			}
		}
		res.mu.Unlock()
		if h := q.Health(); h.ClaimErrors != 0 || h.BadRows != 0 {
			t.Fatalf("health %+v: bad rows must not fail claims", h)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatalf("Stop = %v with nothing in work", err)
		}
		checkBuckets(t, b, q)
	})
}

func isDecodeError(err error) bool { _, ok := errors.AsType[*inbox.DecodeError](err); return ok }

// blob is SQL for a literal payload of text s, as the backend's payload column holds it.
func (b *backend) blob(s string) string {
	lit := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if b.dialect == inbox.SQLite {
		return "CAST(" + lit + " AS BLOB)"
	}
	return "convert_to(" + lit + ", 'UTF8')"
}

// checkBuckets fails t unless q's Stats account for every row of its table.
func checkBuckets(t *testing.T, b *backend, q *inbox.Queue[msg]) {
	t.Helper()
	st, err := q.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sum := st.Ready + st.InWork + st.Delayed + st.Dead + st.Processed + st.Invalid
	if n := b.queryN(t, `SELECT count(*) FROM "`+b.table+`"`); sum != n {
		t.Fatalf("stats %+v sum to %d; the table has %d rows", st, sum, n)
	}
}

// Every row of a table is counted in exactly one Stats bucket, including rows no
// claim will take (a NULL lock deadline without LockedUntilNullable: Invalid).
func TestStatsCountEveryRow(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		at := func(t time.Time) any {
			t = t.UTC().Truncate(time.Microsecond)
			if b.dialect == inbox.SQLite {
				return t.UnixMicro()
			}
			return t
		}
		ts := func(d time.Duration) any { return at(time.Now().Add(d)) }
		never := at(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)) // a dead letter's lock deadline
		if b.dialect == inbox.SQLite {
			b.exec(t, `CREATE TABLE "`+b.table+`" (id INTEGER PRIMARY KEY, lu INTEGER, p BLOB NOT NULL, claimed INTEGER, done INTEGER)`)
		} else {
			b.exec(t, `CREATE TABLE "`+b.table+`" (id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ, p BYTEA NOT NULL, claimed TIMESTAMPTZ, done TIMESTAMPTZ)`)
		}
		ins := func(lu, claimed, done any) {
			b.exec(t, `INSERT INTO "`+b.table+`" (lu, p, claimed, done) VALUES (`+b.ph(1)+`, `+b.blob("{}")+`, `+b.ph(2)+`, `+b.ph(3)+`)`, lu, claimed, done)
		}
		ins(ts(-time.Hour), nil, nil)  // ready
		ins(ts(time.Hour), ts(0), nil) // in work
		ins(ts(time.Hour), nil, nil)   // delayed
		ins(farLater(b), nil, nil)     // delayed (an hour ahead)
		ins(never, nil, nil)           // dead
		ins(never, nil, ts(0))         // processed
		ins(nil, nil, nil)             // NULL lock deadline
		ins(nil, nil, nil)
		cols := inbox.Columns{ID: "id", LockedUntil: "lu", Payload: "p", ClaimedAt: "claimed", ProcessedAt: "done"}
		q := newQueue(t, b, inbox.Config[msg]{Columns: cols})
		st, err := q.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if want := (inbox.Stats{Ready: 1, InWork: 1, Delayed: 2, Dead: 1, Processed: 1, Invalid: 2}); st != want {
			t.Fatalf("stats %+v, want %+v", st, want)
		}
		checkBuckets(t, b, q)
		cols.LockedUntilNullable = true
		q = newQueue(t, b, inbox.Config[msg]{Columns: cols})
		if st, err := q.Stats(t.Context()); err != nil || st.Ready != 3 || st.Invalid != 0 {
			t.Fatalf("stats with LockedUntilNullable %+v, %v: want the NULL rows ready", st, err)
		}
	})
}

// Start refuses, with a *ColumnError naming the column, a table whose columns allow
// rows that claims could not take or settle, or values the inbox could not read.
func TestStartRefusesColumnsThatBreakClaims(t *testing.T) {
	type tc struct {
		name, ddl, column string
		cols              inbox.Columns
	}
	base := inbox.Columns{ID: "id", LockedUntil: "lu", Payload: "p"}
	with := func(f func(*inbox.Columns)) inbox.Columns { c := base; f(&c); return c }
	eachDB(t, func(t *testing.T, b *backend) {
		var cases []tc
		if b.dialect == inbox.SQLite {
			cases = []tc{
				{"nullable lock deadline", `(id INTEGER PRIMARY KEY, lu INTEGER, p BLOB)`, "lu", base},
				{"text id", `(id TEXT PRIMARY KEY, lu INTEGER NOT NULL, p BLOB)`, "id", base},
				{"integer id not the key", `(id INTEGER NOT NULL, lu INTEGER NOT NULL, p BLOB)`, "id", base},
				{"without rowid", `(id INTEGER PRIMARY KEY, lu INTEGER NOT NULL, p BLOB) WITHOUT ROWID`, "id", base},
			}
		} else {
			cases = []tc{
				{"nullable lock deadline", `(id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ, p BYTEA)`, "lu", base},
				{"nullable id", `(id BIGINT, lu TIMESTAMPTZ NOT NULL, p BYTEA)`, "id", base},
				{"numeric id", `(id NUMERIC PRIMARY KEY, lu TIMESTAMPTZ NOT NULL, p BYTEA)`, "id", base},
				{"integer payload", `(id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ NOT NULL, p INTEGER)`, "p", base},
				{"numeric attempts", `(id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ NOT NULL, p BYTEA, a NUMERIC)`, "a",
					with(func(c *inbox.Columns) { c.Attempts = "a" })},
				{"short last error", `(id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ NOT NULL, p BYTEA, e VARCHAR(40))`, "e",
					with(func(c *inbox.Columns) { c.LastError = "e" })},
			}
		}
		for i, c := range cases {
			table := b.table + "_" + strconv.Itoa(i)
			b.exec(t, `CREATE TABLE "`+table+`" `+c.ddl)
			if b.dialect == inbox.Postgres {
				t.Cleanup(func() { b.exec(t, `DROP TABLE "`+table+`"`) })
			}
			q := newQueue(t, b, inbox.Config[msg]{Table: table, Columns: c.cols})
			s, err := q.Subscribe(func(context.Context, inbox.Job[msg]) error { return nil }, inbox.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Start(t.Context())
			ce, ok := errors.AsType[*inbox.ColumnError](err)
			if !ok || ce.Column != c.column || ce.Table != table || ce.Reason == "" {
				t.Errorf("%s: Start = %v, want a *ColumnError naming %s", c.name, err, c.column)
				_ = s.Stop(t.Context())
			}
		}
		// Accepted: the same nullable lock deadline with LockedUntilNullable.
		table := b.table + "_ok"
		ddl := `(id INTEGER PRIMARY KEY, lu INTEGER, p BLOB)`
		if b.dialect == inbox.Postgres {
			ddl = `(id BIGSERIAL PRIMARY KEY, lu TIMESTAMPTZ, p TEXT)`
			t.Cleanup(func() { b.exec(t, `DROP TABLE "`+table+`"`) })
		}
		b.exec(t, `CREATE TABLE "`+table+`" `+ddl)
		q := newQueue(t, b, inbox.Config[msg]{Table: table, Columns: with(func(c *inbox.Columns) { c.LockedUntilNullable = true })})
		got := make(chan int, 1)
		start(t, q, func(_ context.Context, j inbox.Job[msg]) error { got <- j.Payload.N; return nil }, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond})
		if _, err := q.Publish(t.Context(), msg{N: 5}, nil); err != nil {
			t.Fatal(err)
		}
		if n := gotptest.Recv(t, got); n != 5 {
			t.Fatalf("handled %d", n)
		}
	})
}

func TestJSONCodecRefusesNull(t *testing.T) {
	for _, in := range []string{"null", " null\n", ""} {
		if _, err := (inbox.JSON[msg]{}).Decode([]byte(in)); !errors.Is(err, inbox.ErrNullPayload) {
			t.Errorf("Decode(%q) = %v, want ErrNullPayload", in, err)
		}
		if _, err := (inbox.JSON[*msg]{}).Decode([]byte(in)); !errors.Is(err, inbox.ErrNullPayload) {
			t.Errorf("Decode[*msg](%q) = %v, want ErrNullPayload", in, err)
		}
	}
	if v, err := (inbox.JSON[msg]{}).Decode([]byte(`{"n":3}`)); err != nil || v.N != 3 {
		t.Fatalf("Decode = %+v, %v", v, err)
	}
}
