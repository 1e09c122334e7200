package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"modernc.org/sqlite" // the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteBusyTimeout is the busy timeout OpenSQLite sets, and the longest it
// retries turning a new file's journal into WAL.
const sqliteBusyTimeout = 10 * time.Second

// OpenSQLite opens a SQLite database file (created if missing) set up for the inbox:
// WAL journal, a 10 s busy timeout, synchronous=NORMAL and immediate write
// transactions, so that concurrent writers wait for each other instead of failing
// with "database is locked". It pings the database before returning.
//
// Many processes may open one new file at once: the switch to WAL, which takes
// a lock SQLite will not wait for under the busy timeout, is retried until it
// succeeds or the busy timeout has passed.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	return openSQLite(ctx, path, false)
}

// OpenSQLiteFull is OpenSQLite with synchronous=FULL: each commit flushes the
// write-ahead log to the disk (fsync; on macOS F_FULLFSYNC, fullfsync=1, which
// also flushes the drive's cache) before it returns, so a power cut or a crash
// of the operating system loses no committed transaction, on a disk that
// honours the flush. With OpenSQLite's NORMAL the log is flushed at
// checkpoints: a crash of the process loses nothing committed, a power cut
// may lose the last transactions. Every connection of the returned pool has
// the setting.
func OpenSQLiteFull(ctx context.Context, path string) (*sql.DB, error) {
	return openSQLite(ctx, path, true)
}

// openSQLite opens path with synchronous=FULL (full) or NORMAL.
func openSQLite(ctx context.Context, path string, full bool) (*sql.DB, error) {
	if path == "" || strings.Contains(path, "?") {
		return nil, &ConfigError{Field: "path", Reason: "empty or carries its own query string"}
	}
	v := url.Values{}
	// Not journal_mode(WAL) here: see walMode.
	v.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds()))
	if full {
		v.Add("_pragma", "synchronous(FULL)")
		// Where fsync leaves data in the drive's cache (macOS), flush that
		// too, at commits and checkpoints; elsewhere SQLite ignores both.
		v.Add("_pragma", "fullfsync(1)")
		v.Add("_pragma", "checkpoint_fullfsync(1)")
	} else {
		v.Add("_pragma", "synchronous(NORMAL)")
	}
	v.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+v.Encode())
	if err != nil {
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	if err := walMode(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("inbox: open %s: %w", path, err)
	}
	return db, nil
}

// walMode turns db's journal into WAL, which the file keeps for every later
// connection. On a file not yet in WAL the switch reads the header and then
// upgrades its read lock to write the new mode; an upgrade that meets another
// connection's lock fails with SQLITE_BUSY at once, without the busy handler
// (waiting could deadlock two upgraders), so processes opening one new file
// together failed at open. The switch is retried, with a jittered pause, until
// it succeeds, ctx ends or sqliteBusyTimeout has passed. Once the file is in WAL
// the pragma only reads, and waits on locks under the busy timeout.
func walMode(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(sqliteBusyTimeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
