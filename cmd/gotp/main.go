// Command gotp is gotp's maintenance tool. It migrates the schemas gotp owns, so
// that an upgrade of gotp never needs hand-written ALTERs:
//
//	go run github.com/gotp/gotp/cmd/gotp inbox migrate -db jobs.db -table invoice_jobs
//	go run github.com/gotp/gotp/cmd/gotp inbox migrate -db postgres://127.0.0.1/app -table invoice_jobs
//	go run github.com/gotp/gotp/cmd/gotp inbox version -db jobs.db -table invoice_jobs
//	go run github.com/gotp/gotp/cmd/gotp chat migrate -db data/history.db
//
// -db is a Postgres URL (postgres:// or postgresql://) or a SQLite file path (a
// new file is made by migrate, not by version; a path holding "=" that names no
// file is refused, as a keyword/value Postgres string given by mistake). inbox
// migrate brings the default schema of the inbox's table to inbox.SchemaVersion
// (creating it if missing), chat migrate brings the chat's history to
// chat.HistoryVersion; each in one transaction, so a failure changes nothing.
// inbox version prints the recorded version without changing anything (-1: no such
// table). migrate refuses, changing nothing, a table a newer release migrated
// (inbox.ErrSchemaTooNew) and a table of the same name that gotp did not make
// (inbox.ErrNotInboxTable); two migrations of one table at once, from any
// processes, run one after the other. The exit status is 0 on success, 1 on a
// failure, 2 on bad usage.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/examples/chat"
	"github.com/gotp/gotp/inbox"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  gotp inbox migrate -db DB -table TABLE
  gotp inbox version -db DB -table TABLE
  gotp chat migrate -db FILE
DB is a postgres:// URL or a SQLite file path.
`

// run is the command with its arguments; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0] + " " + args[1]
	fs := flag.NewFlagSet("gotp "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbFlag := fs.String("db", "", "a postgres:// URL or a SQLite file path")
	table := fs.String("table", "", "the inbox's table (inbox commands)")
	if err := fs.Parse(args[2:]); err != nil {
		return 2
	}
	if *dbFlag == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch cmd {
	case "inbox migrate", "inbox version":
		if *table == "" {
			fmt.Fprintln(stderr, "gotp: -table is required")
			return 2
		}
	case "chat migrate":
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if usage, err := checkDB(*dbFlag, cmd == "inbox version"); err != nil {
		fmt.Fprintln(stderr, "gotp:", err)
		if usage {
			return 2
		}
		return 1
	}
	db, closeDB, err := open(ctx, *dbFlag, cmd == "chat migrate")
	if err != nil {
		fmt.Fprintln(stderr, "gotp:", err)
		return 1
	}
	defer closeDB()
	switch cmd {
	case "inbox migrate":
		m, err := inbox.Migrate(ctx, db, *table)
		if err != nil {
			fmt.Fprintln(stderr, "gotp:", err)
			return 1
		}
		switch {
		case m.Created:
			fmt.Fprintf(stdout, "inbox table %s: created at version %d\n", *table, m.To)
		case m.From == m.To:
			fmt.Fprintf(stdout, "inbox table %s: at version %d already\n", *table, m.To)
		default:
			fmt.Fprintf(stdout, "inbox table %s: version %d -> %d\n", *table, m.From, m.To)
		}
	case "inbox version":
		v, err := inbox.SchemaVersionOf(ctx, db, *table)
		if err != nil {
			fmt.Fprintln(stderr, "gotp:", err)
			return 1
		}
		fmt.Fprintf(stdout, "inbox table %s: version %d (this release: %d)\n", *table, v, inbox.SchemaVersion)
	case "chat migrate":
		from, to, err := chat.MigrateHistory(ctx, db.(*sql.DB))
		if err != nil {
			fmt.Fprintln(stderr, "gotp:", err)
			return 1
		}
		if from == to {
			fmt.Fprintf(stdout, "chat history %s: at version %d already\n", *dbFlag, to)
		} else {
			fmt.Fprintf(stdout, "chat history %s: version %d -> %d\n", *dbFlag, from, to)
		}
	}
	return 0
}

// checkDB refuses, before anything is opened, a -db a careless hand may give: a
// Postgres keyword/value connection string (host=... dbname=...), which would
// otherwise be taken for the path of a new SQLite file, and (readOnly) a SQLite
// file that does not exist, which opening would create.
func checkDB(db string, readOnly bool) (usage bool, err error) {
	if isPostgresURL(db) {
		return false, nil
	}
	_, statErr := os.Stat(db)
	switch {
	case statErr == nil:
		return false, nil
	case strings.Contains(db, "="):
		return true, fmt.Errorf("-db %q: not a postgres:// URL, and no such file: give Postgres as a postgres:// URL (keyword/value strings are not taken), SQLite as a file path", db)
	case readOnly && errors.Is(statErr, fs.ErrNotExist):
		return false, fmt.Errorf("-db %q: no such file (version reads; it makes no database)", db)
	}
	return false, nil
}

func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// open opens db: a Postgres pool for a postgres:// URL, else a SQLite file.
func open(ctx context.Context, db string, sqliteOnly bool) (any, func(), error) {
	if isPostgresURL(db) {
		if sqliteOnly {
			return nil, nil, errors.New("the chat's history is a SQLite file")
		}
		pool, err := pgxpool.New(ctx, db)
		if err != nil {
			return nil, nil, err
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, nil, err
		}
		return pool, pool.Close, nil
	}
	sdb, err := inbox.OpenSQLite(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	return sdb, func() { sdb.Close() }, nil
}
