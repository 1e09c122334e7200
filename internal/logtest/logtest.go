// Package logtest is a slog.Handler for tests: it keeps every record, so
// that a test can assert what was logged, with which attributes, in order.
package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Record is one logged record: its level, message and attributes (those
// of the logger's With calls first), flattened: a group's attributes are
// keyed "group.key".
type Record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]slog.Value
}

// String returns the attribute key as a string ("" if absent).
func (r Record) String(key string) string {
	v, ok := r.Attrs[key]
	if !ok {
		return ""
	}
	return v.Resolve().String()
}

// Has reports whether the record has the attribute key.
func (r Record) Has(key string) bool {
	_, ok := r.Attrs[key]
	return ok
}

// Recorder is a slog.Handler that keeps every record at or above Level.
// It is safe for concurrent use. Make one with New.
type Recorder struct {
	Level slog.Level

	st    *state
	attrs []slog.Attr
	group string
}

type state struct {
	mu      sync.Mutex // guards recs
	recs    []Record
	changed chan struct{} // closed and replaced when a record arrives
}

// New returns an empty Recorder keeping records at level and above.
func New(level slog.Level) *Recorder {
	return &Recorder{Level: level, st: &state{changed: make(chan struct{})}}
}

// Logger returns a logger that writes to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled reports whether level is at least r.Level.
func (r *Recorder) Enabled(_ context.Context, level slog.Level) bool { return level >= r.Level }

// Handle keeps rec.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	out := Record{Level: rec.Level, Msg: rec.Message, Attrs: map[string]slog.Value{}}
	for _, a := range r.attrs {
		flatten(out.Attrs, "", a)
	}
	rec.Attrs(func(a slog.Attr) bool {
		flatten(out.Attrs, r.group, a)
		return true
	})
	st := r.st
	st.mu.Lock()
	st.recs = append(st.recs, out)
	close(st.changed)
	st.changed = make(chan struct{})
	st.mu.Unlock()
	return nil
}

func flatten(m map[string]slog.Value, prefix string, a slog.Attr) {
	key := a.Key
	if prefix != "" {
		key = prefix + "." + key
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			flatten(m, key, g)
		}
		return
	}
	m[key] = a.Value
}

// WithAttrs returns a handler that adds attrs to every record.
func (r *Recorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(slices.Clip(r.attrs), attrs...)
	return &c
}

// WithGroup returns a handler that puts the record's attributes in group.
func (r *Recorder) WithGroup(name string) slog.Handler {
	c := *r
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// Records returns the records kept so far whose message is msg (every
// record for msg == "").
func (r *Recorder) Records(msg string) []Record {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	var out []Record
	for _, rec := range r.st.recs {
		if msg == "" || rec.Msg == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Wait waits until a record with message msg matching match (nil: any)
// has been kept, or ctx ends; it returns the first such record.
func (r *Recorder) Wait(ctx context.Context, msg string, match func(Record) bool) (Record, bool) {
	for {
		r.st.mu.Lock()
		ch := r.st.changed
		recs := r.st.recs
		r.st.mu.Unlock()
		for _, rec := range recs {
			if rec.Msg == msg && (match == nil || match(rec)) {
				return rec, true
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Record{}, false
		}
	}
}
