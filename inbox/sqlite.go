package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// OpenSQLite opens a SQLite database file (created if missing) set up for the inbox:
// WAL journal, a 10 s busy timeout, synchronous=NORMAL and immediate write
// transactions, so that concurrent writers wait for each other instead of failing
// with "database is locked". It pings the database before returning.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" || strings.Contains(path, "?") {
		return nil, &ConfigError{Field: "path", Reason: "empty or carries its own query string"}
	}
	v := url.Values{}
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "busy_timeout(10000)")
	v.Add("_pragma", "synchronous(NORMAL)")
	v.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+v.Encode())
	if err != nil {
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	return db, nil
}
