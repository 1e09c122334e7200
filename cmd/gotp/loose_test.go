package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/inbox"
)

// cliChildEnv makes the test binary run the command given in it (arguments
// separated by the unit separator, 0x1f) as its own process: see TestMain.
const cliChildEnv = "GOTP_CLI_CHILD_ARGS"

// gotpProcs runs the command in n processes at once and returns each one's exit
// status and output.
func gotpProcs(t *testing.T, n int, args ...string) ([]int, []string) {
	t.Helper()
	codes, outs := make([]int, n), make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), cliChildEnv+"="+strings.Join(args, "\x1f"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			codes[i], outs[i] = cmd.ProcessState.ExitCode(), out.String()
			if err != nil && codes[i] <= 0 {
				outs[i] += err.Error()
			}
		})
	}
	wg.Wait()
	return codes, outs
}

// Two and more processes migrating one new table at once: each exits 0, one
// creates the table and the others find it at the latest version; it is made
// once, with the latest schema.
func TestInboxMigrateConcurrentProcesses(t *testing.T) {
	check := func(t *testing.T, codes []int, outs []string) {
		t.Helper()
		created := 0
		for i, c := range codes {
			if c != 0 {
				t.Fatalf("process %d: exit %d: %s", i, c, outs[i])
			}
			switch {
			case strings.Contains(outs[i], "created at version"):
				created++
			case !strings.Contains(outs[i], "already"):
				t.Fatalf("process %d: %s", i, outs[i])
			}
		}
		if created != 1 {
			t.Fatalf("%d processes created the table: %q", created, outs)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "jobs.db")
		if f, err := os.Create(path); err == nil {
			f.Close()
		}
		codes, outs := gotpProcs(t, 4, "inbox", "migrate", "-db", path, "-table", "jobs")
		check(t, codes, outs)
		if code, out := gotp(t, "inbox", "version", "-db", path, "-table", "jobs"); code != 0 || !strings.Contains(out, fmt.Sprintf("version %d ", inbox.SchemaVersion)) {
			t.Fatalf("version: %d %s", code, out)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("POSTGRES_TEST_URL")
		if url == "" {
			t.Skip("POSTGRES_TEST_URL not set")
		}
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		table := fmt.Sprintf("cli_conc_%d", time.Now().UnixNano())
		defer func() {
			for _, s := range []string{"", "_periodic", "_limits"} {
				pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table+s)
			}
			pool.Exec(context.Background(), `DELETE FROM gotp_schema WHERE key = $1`, "inbox:"+table)
		}()
		codes, outs := gotpProcs(t, 4, "inbox", "migrate", "-db", url, "-table", table)
		check(t, codes, outs)
		var v int
		if err := pool.QueryRow(context.Background(), `SELECT version FROM gotp_schema WHERE key = $1`, "inbox:"+table).Scan(&v); err != nil || v != inbox.SchemaVersion {
			t.Fatalf("recorded version %d, %v", v, err)
		}
	})
}

// A careless migrate: against a table of the same name that gotp did not make
// (it was altered step by step until a step named a column it lacked, and the
// error said only "no such column: priority"), and against a table a newer
// release migrated. Both exit 1 with a message that says so, and change nothing.
func TestInboxMigrateRefusesForeignAndNewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := inbox.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY, customer TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	code, out := gotp(t, "inbox", "migrate", "-db", path, "-table", "jobs")
	if code != 1 || !strings.Contains(out, "gotp did not make") || !strings.Contains(out, "priority") {
		t.Errorf("migrate of a foreign table: %d %q", code, out)
	}
	if ddl := sqliteDDL(t, db, "jobs"); ddl != `CREATE TABLE jobs (id INTEGER PRIMARY KEY, customer TEXT NOT NULL)` {
		t.Errorf("the foreign table became %s", ddl)
	}
	if code, out := gotp(t, "inbox", "migrate", "-db", path, "-table", "mine"); code != 0 {
		t.Fatalf("migrate: %d %s", code, out)
	}
	if _, err := db.Exec(`UPDATE gotp_schema SET version = ?1 WHERE key = 'inbox:mine'`, inbox.SchemaVersion+3); err != nil {
		t.Fatal(err)
	}
	before := sqliteDDL(t, db, "mine")
	code, out = gotp(t, "inbox", "migrate", "-db", path, "-table", "mine")
	if code != 1 || !strings.Contains(out, "newer than this release") || !strings.Contains(out, fmt.Sprintf("version %d", inbox.SchemaVersion+3)) {
		t.Errorf("migrate of a newer schema: %d %q", code, out)
	}
	if after := sqliteDDL(t, db, "mine"); after != before {
		t.Errorf("the newer table changed: %s", after)
	}
}

// chat migrate on a file whose messages table another program made (no history
// version recorded): it exits 1 saying gotp did not make it and which columns it
// lacks, and leaves the table as it was. Before, the step's ALTERs ran on it and
// it failed with "no such column: pair". (The chat's history is SQLite only: a
// postgres:// -db is refused before anything is opened, TestInboxMigrateSQLite.)
func TestChatMigrateRefusesForeignTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := inbox.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const foreign = `CREATE TABLE messages (id INTEGER PRIMARY KEY, subject TEXT, body TEXT)`
	if _, err := db.Exec(foreign); err != nil {
		t.Fatal(err)
	}
	code, out := gotp(t, "chat", "migrate", "-db", path)
	if code != 1 || !strings.Contains(out, "gotp did not make") || !strings.Contains(out, "messages.pair") {
		t.Errorf("chat migrate of a foreign table: %d %q", code, out)
	}
	if ddl := sqliteDDL(t, db, "messages"); ddl != foreign {
		t.Errorf("the foreign table became %s", ddl)
	}
}

func sqliteDDL(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1`, table).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	return ddl
}
