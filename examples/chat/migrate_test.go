package chat

import (
	"context"
	"path/filepath"
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
