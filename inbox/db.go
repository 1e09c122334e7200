package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dialect names the SQL database a Queue runs on.
type Dialect uint8

const (
	// SQLite is the embedded default, through database/sql and modernc.org/sqlite.
	SQLite Dialect = iota + 1
	// Postgres is the scale-out database, through a pgx pool.
	Postgres
)

// String returns "sqlite" or "postgres".
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return fmt.Sprintf("Dialect(%d)", uint8(d))
}

// rows is what the inbox reads from a query on either driver.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// querier runs statements on a pool, a connection or a transaction of either driver.
type querier interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	query(ctx context.Context, q string, args ...any) (rows, error)
}

// sqlExecQuery is satisfied by *sql.DB, *sql.Conn and *sql.Tx.
type sqlExecQuery interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

type sqlQ struct{ db sqlExecQuery }

func (s sqlQ) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQ) query(ctx context.Context, q string, args ...any) (rows, error) {
	r, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// pgExecQuery is satisfied by *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and pgx.Tx.
type pgExecQuery interface {
	Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
}

type pgQ struct{ db pgExecQuery }

func (p pgQ) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.db.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (p pgQ) query(ctx context.Context, q string, args ...any) (rows, error) {
	r, err := p.db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Tx is a caller's open transaction that a job can be published in, so that the
// job exists only if the transaction commits. Make one with SQLTx or PgxTx.
type Tx interface {
	dialect() Dialect
	q() querier
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) dialect() Dialect { return SQLite }
func (t sqlTx) q() querier       { return sqlQ{t.tx} }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) dialect() Dialect { return Postgres }
func (t pgxTx) q() querier       { return pgQ{t.tx} }

// SQLTx wraps a database/sql transaction of a SQLite queue's database for PublishTx.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{tx} }

// PgxTx wraps a pgx transaction of a Postgres queue's database for PublishTx.
func PgxTx(tx pgx.Tx) Tx { return pgxTx{tx} }

// farFuture is the lock deadline of a row that must never be claimed again:
// a dead letter, or a processed row on a table that keeps them.
func farFuture() time.Time { return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) }

// isIdent reports whether s is a plain SQL identifier, optionally schema-qualified.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if part == "" {
			return false
		}
		for i, c := range part {
			switch {
			case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			case c >= '0' && c <= '9' && i > 0:
			default:
				return false
			}
		}
	}
	return true
}

// quoteIdent quotes every part of a (possibly schema-qualified) identifier.
func quoteIdent(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}

// isConnErr reports whether err looks like a lost connection rather than a
// statement that the database refused, so the statement is worth retrying.
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01..57P03: admin shutdown, crash, cannot connect now.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return true
}

// isPgError reports whether err is an error the Postgres server returned: the
// statement was refused, and not applied.
func isPgError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
