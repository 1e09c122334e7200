package gotptest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// A LogRecorder is a slog.Handler that keeps every record it is given, so
// that a test can assert what was logged (a supervisor's report of a
// restart, for example). Give a node its [LogRecorder.Logger] with the
// [Logger] option. The zero value is not ready: use [NewLogRecorder].
//
// A LogRecorder is safe for concurrent use; it keeps every record until
// the test ends, so it suits tests, not long runs.
type LogRecorder struct {
	store *logStore
	attrs []slog.Attr // from WithAttrs, already qualified by their groups
	group string      // prefix for the keys of later attributes: "a.b."
}

type logStore struct {
	mu      sync.Mutex
	recs    []Record
	changed chan struct{} // closed and replaced on every record
}

// A Record is one log record as a LogRecorder kept it.
type Record struct {
	Time    time.Time
	Level   slog.Level
	Message string
	// Attrs holds the record's attributes, those added with
	// slog.Logger.With included, by key; a key inside a group is qualified
	// by the group's name, as in "group.key". Values are resolved (a
	// slog.LogValuer's value) and given as slog.Value.Any returns them: an
	// error stays an error, so errors.Is works on it.
	Attrs map[string]any
}

// NewLogRecorder returns an empty LogRecorder.
func NewLogRecorder() *LogRecorder {
	return &LogRecorder{store: &logStore{changed: make(chan struct{})}}
}

// Logger returns a logger that writes to r.
func (r *LogRecorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled reports true for every level: a LogRecorder keeps everything.
func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps rec. It never fails.
func (r *LogRecorder) Handle(_ context.Context, rec slog.Record) error {
	out := Record{Time: rec.Time, Level: rec.Level, Message: rec.Message, Attrs: map[string]any{}}
	for _, a := range r.attrs {
		addAttr(out.Attrs, "", a)
	}
	rec.Attrs(func(a slog.Attr) bool {
		addAttr(out.Attrs, r.group, a)
		return true
	})
	s := r.store
	s.mu.Lock()
	s.recs = append(s.recs, out)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return nil
}

func addAttr(m map[string]any, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" { // an empty key inlines the group's attributes
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			addAttr(m, p, g)
		}
		return
	}
	if a.Key == "" {
		return // slog drops empty attributes
	}
	m[prefix+a.Key] = v.Any()
}

// WithAttrs returns a handler that records attrs with every record, into
// the same store as r.
func (r *LogRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := *r
	out.attrs = slices.Clone(r.attrs)
	for _, a := range attrs {
		if r.group != "" {
			a = slog.Attr{Key: r.group[:len(r.group)-1], Value: slog.GroupValue(a)}
		}
		out.attrs = append(out.attrs, a)
	}
	return &out
}

// WithGroup returns a handler that qualifies the keys of later attributes
// with name, into the same store as r.
func (r *LogRecorder) WithGroup(name string) slog.Handler {
	if name == "" {
		return r
	}
	out := *r
	out.group = r.group + name + "."
	return &out
}

// Records returns a copy of every record kept so far, oldest first.
func (r *LogRecorder) Records() []Record {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// Find returns the records kept so far whose message is msg, oldest first.
func (r *LogRecorder) Find(msg string) []Record {
	var out []Record
	for _, rec := range r.Records() {
		if rec.Message == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Wait returns the first record whose message is msg, waiting for it if
// none has been kept yet, and fails t if none comes within [Timeout].
func (r *LogRecorder) Wait(t TB, msg string) Record {
	t.Helper()
	s := r.store
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for seen := 0; ; {
		s.mu.Lock()
		recs, changed := s.recs[seen:], s.changed
		for _, rec := range recs {
			if rec.Message == msg {
				s.mu.Unlock()
				return rec
			}
		}
		seen += len(recs)
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("gotptest: no %q logged within %v", msg, Timeout)
			return Record{}
		}
	}
}
