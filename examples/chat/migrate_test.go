package chat

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotp/gotp/inbox"
)

// A history file of each earlier shape is brought to HistoryVersion in place, its
// messages kept: today's schema before versions were recorded (version 0), and a
// file from before rooms and message times (also version 0: no version recorded).
func TestMigrateHistoryFromEachEarlierShape(t *testing.T) {
	shapes := map[string][]string{
		"new file": nil,
		"version 0": {historyDDL,
			`INSERT INTO messages (sender, recipient, body, pair, at) VALUES ('ana', 'bob', 'hi', 'ana' || char(0) || 'bob', 5)`},
		"before rooms and times": {`CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, sender TEXT NOT NULL,
			recipient TEXT NOT NULL, body TEXT NOT NULL, pair TEXT NOT NULL)`,
			`INSERT INTO messages (sender, recipient, body, pair) VALUES ('ana', 'bob', 'hi', 'ana' || char(0) || 'bob')`},
	}
	for name, stmts := range shapes {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db, err := inbox.OpenSQLite(ctx, filepath.Join(t.TempDir(), "history.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, s := range stmts {
				if _, err := db.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
			from, to, err := MigrateHistory(ctx, db)
			if err != nil || from != 0 || to != HistoryVersion {
				t.Fatalf("MigrateHistory = %d, %d, %v", from, to, err)
			}
			if from, to, err := MigrateHistory(ctx, db); err != nil || from != HistoryVersion || to != HistoryVersion {
				t.Fatalf("again = %d, %d, %v", from, to, err)
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM messages WHERE body = 'hi'`).Scan(&n); err != nil || n != len(stmts)/2 {
				t.Fatalf("%d old messages (%v)", n, err)
			}
			if _, err := db.Exec(`INSERT INTO room_messages (origin, seq, room, sender, body, at) VALUES ('a', 1, 'r', 'ana', 'x', 1)`); err != nil {
				t.Fatalf("room_messages after the migration: %v", err)
			}
			if _, err := db.Exec(`INSERT INTO messages (sender, recipient, body, pair, at) VALUES ('a', 'b', 'c', 'd', 7)`); err != nil {
				t.Fatalf("messages.at after the migration: %v", err)
			}
		})
	}
}

// A file whose messages (or room_messages) table gotp did not make, with no
// history version recorded: MigrateHistory and OpenStore refuse it with an error
// matching ErrNotHistory, naming the missing columns, and change nothing (no
// ALTER, no room_messages made, no version recorded). Before, the step ran on it
// and failed, if at all, on the first column it named.
func TestMigrateHistoryRefusesForeignTable(t *testing.T) {
	shapes := map[string]struct {
		ddl     []string
		missing string
	}{
		"messages of another app": {[]string{`CREATE TABLE messages (id INTEGER PRIMARY KEY, subject TEXT, body TEXT)`},
			"messages.sender, messages.recipient, messages.pair"},
		"room_messages of another app": {[]string{historyDDL, `DROP TABLE room_messages`,
			`CREATE TABLE room_messages (id INTEGER PRIMARY KEY, room TEXT, text TEXT)`},
			"room_messages.origin, room_messages.seq, room_messages.sender, room_messages.body, room_messages.at"},
	}
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "history.db")
			db, err := inbox.OpenSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, s := range sh.ddl {
				if _, err := db.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
			before := schemaOf(t, db)
			_, _, err = MigrateHistory(ctx, db)
			if !errors.Is(err, ErrNotHistory) || !strings.Contains(err.Error(), sh.missing) {
				t.Fatalf("MigrateHistory = %v, want ErrNotHistory naming %s", err, sh.missing)
			}
			if s, err := OpenStore(ctx, path, SyncFull); !errors.Is(err, ErrNotHistory) {
				if err == nil {
					s.Close()
				}
				t.Fatalf("OpenStore = %v, want ErrNotHistory", err)
			}
			if after := schemaOf(t, db); after != before {
				t.Fatalf("schema changed:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// schemaOf is every object of db's schema but gotp_schema, which the refused
// migration's transaction may create and roll back.
func schemaOf(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name <> 'gotp_schema' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, name, ddl string
		if err := rows.Scan(&typ, &name, &ddl); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s: %s\n", typ, name, ddl)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'gotp_schema'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		if err := db.QueryRow(`SELECT count(*) FROM gotp_schema WHERE key = 'chat:history'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d chat:history versions recorded (%v)", n, err)
		}
	}
	return b.String()
}
