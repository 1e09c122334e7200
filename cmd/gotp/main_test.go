package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/gotp/gotp/inbox"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(cliChildEnv); args != "" {
		// A child process of a test: the command, as a separate program runs it.
		os.Exit(run(context.Background(), strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func gotp(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String() + errb.String()
}

func TestInboxMigrateSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	// A table made by the release before versions were recorded.
	db, err := inbox.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, priority INTEGER NOT NULL DEFAULT 0,
	locked_until INTEGER NOT NULL DEFAULT 0, claimed_at INTEGER, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
	dead_at INTEGER, created_at INTEGER NOT NULL DEFAULT 0, payload BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"inbox", "version", "-db", path, "-table", "jobs"}, 0, "version 0 "},
		{[]string{"inbox", "migrate", "-db", path, "-table", "jobs"}, 0, fmt.Sprintf("version 0 -> %d", inbox.SchemaVersion)},
		{[]string{"inbox", "migrate", "-db", path, "-table", "jobs"}, 0, "already"},
		{[]string{"inbox", "migrate", "-db", path, "-table", "other"}, 0, "created"},
		{[]string{"inbox", "version", "-db", path, "-table", "missing"}, 0, "version -1 "},
		{[]string{"inbox", "migrate", "-db", path, "-table", "bad name"}, 1, "not a plain SQL identifier"},
		{[]string{"inbox", "migrate", "-db", path}, 2, "-table is required"},
		{[]string{"inbox", "frobnicate", "-db", path}, 2, "usage"},
		{[]string{"inbox"}, 2, "usage"},
		{[]string{"chat", "migrate", "-db", filepath.Join(t.TempDir(), "history.db")}, 0, "version 0 -> 1"},
		{[]string{"chat", "migrate", "-db", "postgres://127.0.0.1/x"}, 1, "SQLite file"},
	} {
		code, out := gotp(t, c.args...)
		if code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("gotp %v = %d %q, want %d and %q", c.args, code, out, c.code, c.out)
		}
	}
}

func TestInboxMigratePostgres(t *testing.T) {
	url := os.Getenv("POSTGRES_TEST_URL")
	if url == "" {
		t.Skip("POSTGRES_TEST_URL not set")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := fmt.Sprintf("cli_jobs_%d", time.Now().UnixNano())
	clean := func() {
		pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+`, `+table+`_periodic, `+table+`_limits`)
		pool.Exec(context.Background(), `DELETE FROM gotp_schema WHERE key = $1`, "inbox:"+table)
	}
	defer clean()
	code, out := gotp(t, "inbox", "migrate", "-db", url, "-table", table)
	if code != 0 || !strings.Contains(out, "created at version") {
		t.Fatalf("migrate = %d %q", code, out)
	}
	code, out = gotp(t, "inbox", "version", "-db", url, "-table", table)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("version %d ", inbox.SchemaVersion)) {
		t.Fatalf("version = %d %q", code, out)
	}
}

// A careless -db: a Postgres keyword/value connection string, which gotp took
// for a SQLite file path (it created a file named "host=... dbname=..." and
// migrated that, exit 0), and inbox version of a file that does not exist, which
// created an empty database file to answer -1. Both are refused now and leave no
// file behind.
func TestCarelessDB(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"inbox", "migrate", "-db", "host=127.0.0.1 dbname=app", "-table", "jobs"}, 2, "postgres:// URL"},
		{[]string{"inbox", "version", "-db", "dbname=app", "-table", "jobs"}, 2, "postgres:// URL"},
		{[]string{"chat", "migrate", "-db", "host=127.0.0.1 dbname=app"}, 2, "postgres:// URL"},
		{[]string{"inbox", "version", "-db", "typo.db", "-table", "jobs"}, 1, "no such file"},
		{[]string{"inbox", "version", "-db", filepath.Join("nodir", "jobs.db"), "-table", "jobs"}, 1, "no such file"},
	} {
		code, out := gotp(t, c.args...)
		if code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("gotp %v = %d %q, want %d and %q", c.args, code, out, c.code, c.out)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind: %s", e.Name())
	}
	// A file whose name holds "=" is not made, but works once it exists.
	path := filepath.Join(dir, "a=b.db")
	if code, out := gotp(t, "inbox", "migrate", "-db", path, "-table", "jobs"); code != 2 {
		t.Errorf("a new file named a=b.db: %d %q, want 2", code, out)
	}
	if f, err := os.Create(path); err == nil {
		f.Close()
	}
	if code, out := gotp(t, "inbox", "migrate", "-db", path, "-table", "jobs"); code != 0 || !strings.Contains(out, "created") {
		t.Errorf("an existing file a=b.db: %d %q", code, out)
	}
}
