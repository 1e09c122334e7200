// Package migrate applies numbered schema migrations to a SQLite or Postgres
// database, in one transaction, recording the version reached in a table of its
// own (gotp_schema: one row per migrated object). The inbox and the chat's history
// use it; it is internal to gotp.
//
// A set of migrations is named by a key ("inbox:jobs", "chat:history"). Version 0
// is what existed before versions were recorded: the object as the first release
// made it (Set.Base creates it when it does not exist), with no row in
// gotp_schema. Step i (1-based) upgrades version i-1 to i. Migrating applies every
// step above the recorded version, then records the last, all in one transaction:
// a failed step leaves the database as it was. Concurrent migrators of one key
// are serialised (Postgres: a transaction-level advisory lock, one for all keys; SQLite: the write
// lock of an immediate transaction), so each step runs once.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Exec runs one statement inside a migration's transaction.
type Exec interface {
	// Exec runs a statement.
	Exec(ctx context.Context, sql string, args ...any) error
	// Exists reports whether a query returns at least one row.
	Exists(ctx context.Context, sql string, args ...any) (bool, error)
	// Postgres reports whether the database is Postgres (else SQLite).
	Postgres() bool
}

// Step is one migration.
type Step struct {
	Desc string
	Up   func(ctx context.Context, x Exec) error
}

// Set is the migrations of one object.
type Set struct {
	// Key names the object in gotp_schema.
	Key string
	// Exists reports whether the object exists at all (at version 0 or later).
	Exists func(ctx context.Context, x Exec) (bool, error)
	// Base creates the object at version 0.
	Base func(ctx context.Context, x Exec) error
	// Check, if set, vets an object that exists with no version recorded
	// before the steps upgrade it from version 0: it returns why the object is
	// not what version 0 made (nil if it is), so that an object of the same
	// name made by someone else is refused (ErrForeign) rather than altered.
	Check func(ctx context.Context, x Exec) error
	// Steps upgrade version i to i+1 (Steps[i]).
	Steps []Step
}

// Latest is the version the set's last step reaches.
func (s Set) Latest() int { return len(s.Steps) }

// Result says what a migration did.
type Result struct {
	From, To int
	Created  bool // the object did not exist: Base made it
}

// ErrTooNew is matched by the error of a migration that finds a recorded version
// beyond the set's latest: the database was migrated by a newer release.
var ErrTooNew = errors.New("migrate: the database's schema is newer than this release knows")

// ErrForeign is matched by the error of a migration that finds the object, with no
// version recorded, unlike what version 0 made (Set.Check refused it): an object of
// the same name that this set did not make. Nothing is changed.
var ErrForeign = errors.New("migrate: a table of that name exists that gotp did not make (no version recorded)")

const versionsDDL = `CREATE TABLE IF NOT EXISTS gotp_schema (key TEXT PRIMARY KEY, version INTEGER NOT NULL)`

// SQLite migrates s on db in one immediate transaction.
func SQLite(ctx context.Context, db *sql.DB, s Set) (Result, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return Result{}, err
	}
	x := sqlExec{conn}
	res, err := run(ctx, x, s)
	if err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return Result{}, err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return Result{}, err
	}
	return res, nil
}

// Postgres migrates s through pool in one transaction, holding an advisory lock on
// the key for its length.
func Postgres(ctx context.Context, pool *pgxpool.Pool, s Set) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// One lock for every key: CREATE TABLE IF NOT EXISTS gotp_schema races
		// with itself in Postgres.
		h := fnv.New64a()
		h.Write([]byte("gotp_schema"))
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(h.Sum64())); err != nil {
			return err
		}
		var err error
		res, err = run(ctx, pgExec{tx}, s)
		return err
	})
	return res, err
}

// Version reads the recorded version of s without changing anything: -1 if the
// object does not exist.
func Version(ctx context.Context, x Exec, s Set) (int, error) {
	ok, err := s.Exists(ctx, x)
	if err != nil || !ok {
		return -1, err
	}
	v, _, err := recorded(ctx, x, s.Key)
	return v, err
}

// recorded reads the version recorded for key: 0 and !found if none is.
func recorded(ctx context.Context, x Exec, key string) (v int, found bool, err error) {
	switch e := x.(type) {
	case sqlExec:
		var n sql.NullInt64
		err = e.c.QueryRowContext(ctx, `SELECT (SELECT version FROM gotp_schema WHERE key = ?1)`, key).Scan(&n)
		v, found = int(n.Int64), n.Valid
	case pgExec:
		var n *int64
		err = e.tx.QueryRow(ctx, `SELECT (SELECT version FROM gotp_schema WHERE key = $1)`, key).Scan(&n)
		if n != nil {
			v, found = int(*n), true
		}
	}
	return v, found, err
}

func run(ctx context.Context, x Exec, s Set) (Result, error) {
	if err := x.Exec(ctx, versionsDDL); err != nil {
		return Result{}, fmt.Errorf("create gotp_schema: %w", err)
	}
	ok, err := s.Exists(ctx, x)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if !ok {
		if err := s.Base(ctx, x); err != nil {
			return Result{}, fmt.Errorf("create %s: %w", s.Key, err)
		}
		res.Created = true
	} else {
		var found bool
		if res.From, found, err = recorded(ctx, x, s.Key); err != nil {
			return Result{}, fmt.Errorf("read the version of %s: %w", s.Key, err)
		}
		if !found && s.Check != nil {
			if err := s.Check(ctx, x); err != nil {
				return Result{}, fmt.Errorf("%s: %w: %w", s.Key, ErrForeign, err)
			}
		}
	}
	if res.From > s.Latest() {
		return Result{}, fmt.Errorf("%s is at version %d, this release knows %d: %w", s.Key, res.From, s.Latest(), ErrTooNew)
	}
	for v := res.From; v < s.Latest(); v++ {
		if err := s.Steps[v].Up(ctx, x); err != nil {
			return Result{}, fmt.Errorf("migrate %s to version %d (%s): %w", s.Key, v+1, s.Steps[v].Desc, err)
		}
	}
	res.To = s.Latest()
	if res.To != res.From || res.Created {
		var err error
		if x.Postgres() {
			err = x.Exec(ctx, `INSERT INTO gotp_schema (key, version) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET version = excluded.version`, s.Key, res.To)
		} else {
			err = x.Exec(ctx, `INSERT INTO gotp_schema (key, version) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET version = excluded.version`, s.Key, res.To)
		}
		if err != nil {
			return Result{}, fmt.Errorf("record the version of %s: %w", s.Key, err)
		}
	}
	return res, nil
}

type sqlExec struct{ c *sql.Conn }

func (e sqlExec) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.c.ExecContext(ctx, q, args...)
	return err
}

func (e sqlExec) Exists(ctx context.Context, q string, args ...any) (bool, error) {
	r, err := e.c.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer r.Close()
	ok := r.Next()
	return ok, r.Err()
}

func (sqlExec) Postgres() bool { return false }

type pgExec struct{ tx pgx.Tx }

func (e pgExec) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.tx.Exec(ctx, q, args...)
	return err
}

func (e pgExec) Exists(ctx context.Context, q string, args ...any) (bool, error) {
	r, err := e.tx.Query(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer r.Close()
	ok := r.Next()
	return ok, r.Err()
}

func (pgExec) Postgres() bool { return true }

// ReadSQLite reads the recorded version of s on db: -1 if the object does not
// exist, 0 if it has no record.
func ReadSQLite(ctx context.Context, db *sql.DB, s Set) (int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	x := sqlExec{conn}
	if ok, err := x.Exists(ctx, `SELECT 1 FROM sqlite_master WHERE name = 'gotp_schema'`); err != nil {
		return 0, err
	} else if !ok {
		if ok, err := s.Exists(ctx, x); err != nil || !ok {
			return -1, err
		}
		return 0, nil
	}
	return Version(ctx, x, s)
}

// ReadPostgres reads the recorded version of s through pool (see ReadSQLite).
func ReadPostgres(ctx context.Context, pool *pgxpool.Pool, s Set) (int, error) {
	v := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		x := pgExec{tx}
		ok, err := x.Exists(ctx, `SELECT 1 WHERE to_regclass('gotp_schema') IS NOT NULL`)
		if err != nil {
			return err
		}
		if !ok {
			if ok, err := s.Exists(ctx, x); err != nil || !ok {
				v = -1
				return err
			}
			return nil
		}
		v, err = Version(ctx, x, s)
		return err
	})
	return v, err
}
