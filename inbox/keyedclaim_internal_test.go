package inbox

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// SQLite's keyed claim (sqliteKeyedClaimSQL) takes each key's first ns rows in
// claim order (priority, then lock time, then id), passes over rows not ready,
// and leaves keys it was not given alone. With a limit it cannot reach and no
// look for rows without a key, it takes them without ranking (the short text:
// no sort, no random tie-break); with a limit below what the keys offer it
// takes that many, turn by turn: every key's first row before any key's second.
func TestSQLiteKeyedClaimTakesEachKeysFirstRows(t *testing.T) {
	ctx := context.Background()
	db, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "keyed.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Migrate(ctx, db, "keyed"); err != nil {
		t.Fatal(err)
	}
	c := GroupColumns()
	c.Group = ""
	q, err := NewSQLite(db, Config[struct{}]{Table: "keyed", Columns: c})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// id: key, priority, ready (locked_until in the past) or not.
	rows := []struct {
		key   string
		prio  int
		ready bool
	}{
		{"a", 5, true}, {"a", 1, true}, {"a", 3, true}, {"a", 0, false}, // ids 1-4
		{"b", 2, true}, {"b", 2, true}, // 5-6
		{"c", 9, true}, {"c", 4, true}, {"c", 4, true}, {"c", 1, true}, // 7-10
		{"d", 0, true}, // 11: a key the claim is not given
	}
	fill := func() {
		t.Helper()
		if _, err := db.ExecContext(ctx, `DELETE FROM keyed`); err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			lu := now.Add(-time.Minute).UnixMicro()
			if !r.ready {
				lu = now.Add(time.Hour).UnixMicro()
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO keyed (id, payload, partition_key, priority, locked_until) VALUES (?, x'7b7d', ?, ?, ?)`,
				i+1, r.key, r.prio, lu); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim := func(keys []string, ns []int, keyless bool, limit int) (text string, ids []int64) {
		t.Helper()
		fill()
		text, args := q.sqliteKeyedClaimSQL(Limits{PerPartition: 2}, keys, ns, keyless, now.Add(time.Minute), now, limit)
		r, err := db.QueryContext(ctx, text, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			vals := make([]any, 6)
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, vals[0].(int64))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return text, ids
	}
	ranked := func(text string) bool { return strings.Contains(text, "random()") }

	// Nothing cut: a's first two ready rows by priority (2: prio 1, 3: prio 3),
	// b's first (5, by id among equal priorities), c's first three (10, 8, 9).
	text, ids := claim([]string{"a", "b", "c"}, []int{2, 1, 3}, false, 6)
	if want := []int64{2, 3, 5, 8, 9, 10}; !slices.Equal(ids, want) {
		t.Errorf("limit 6 of 6: claimed %v, want %v", ids, want)
	}
	if ranked(text) {
		t.Errorf("limit 6 of 6 and no keyless look ranked the rows:\n%s", text)
	}
	// A key asked for more rows than it has ready gives what it has.
	if _, ids := claim([]string{"a"}, []int{5}, false, 10); !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Errorf("a × 5: claimed %v, want [1 2 3]", ids)
	}

	// Cut by the limit: turn by turn, so the three keys' first rows (2, 5, 10)
	// and one second row of the two keys that have one.
	text, ids = claim([]string{"a", "b", "c"}, []int{2, 1, 3}, false, 4)
	if !ranked(text) {
		t.Errorf("limit 4 of 6 did not rank the rows:\n%s", text)
	}
	if len(ids) != 4 || !slices.Contains(ids, 2) || !slices.Contains(ids, 5) || !slices.Contains(ids, 10) ||
		!(slices.Contains(ids, 3) || slices.Contains(ids, 8)) {
		t.Errorf("limit 4 of 6: claimed %v, want 2, 5, 10 and one of 3 and 8", ids)
	}

	// A look for rows without a key ranks too (there are none here).
	text, ids = claim([]string{"b"}, []int{2}, true, 5)
	if !ranked(text) || !slices.Equal(ids, []int64{5, 6}) {
		t.Errorf("keyless look: ranked %v, claimed %v, want ranked and [5 6]", ranked(text), ids)
	}
}
