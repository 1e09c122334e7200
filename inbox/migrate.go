package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/internal/migrate"
)

// SchemaVersion is the version of the default schema this release makes and
// upgrades to: see Migrate.
const SchemaVersion = 6

// Migration reports what Migrate did: the table's version before (0 for a table
// made before versions were recorded, by CreateTable of an earlier release) and
// after, and whether the table was created.
type Migration struct {
	From, To int
	Created  bool
}

// Migrate brings the default schema of table to SchemaVersion on db (a *sql.DB
// opened with OpenSQLite, or a *pgxpool.Pool): it creates the table if it does not
// exist, and upgrades one made by an earlier release in place. Every step and the
// record of the version reached (in the table gotp_schema) commit in one
// transaction: if a step fails, the table is left as it was and the error says
// which step. Concurrent calls are safe: the database serialises them and each
// step runs once. A table whose recorded version is newer than SchemaVersion (a
// newer release migrated it) is refused with an error matching ErrSchemaTooNew,
// and one with no version recorded that lacks a column of version 0 (a table of
// the same name that gotp did not make) with one matching ErrNotInboxTable.
//
// The versions:
//
//	0  the schema of the first release (id, priority, locked_until, claimed_at,
//	   attempts, last_error, dead_at, created_at, payload; the claim index)
//	1  cancelled_at: set by Queue.Cancel
//	2  unique_key, unique_states and a unique index on unique_key (where not
//	   NULL): PublishOpts.Unique
//	3  the ticks table TABLE_periodic (kind, last_tick): Queue.Periodic
//	4  fifo_group and partition_key (Columns.Group, Columns.Partition) with
//	   their indexes, on Postgres a unique index on fifo_group where a row is
//	   claimed (at most one job of a group in work), and the table TABLE_limits
//	   (name, window_start, starts) that counts starts for Limits.Rate
//	5  on SQLite, an index on fifo_group where a row is claimed, which a claim
//	   probes for each row of a group it passes (without it, a claim read every
//	   row of the group, and cost as much as the backlog); nothing on Postgres,
//	   whose unique index of version 4 serves
//	6  on Postgres, an index on fifo_group and id of the rows not finished
//	   (locked_until before 9999-01-01), which a claim under a backlog walks to
//	   each group's first row (without it, the walk passed every dead letter of
//	   every group); nothing on SQLite
//
// Tables mapped with Columns are the caller's own; Migrate manages only the
// default schema. Run it (or `go run github.com/gotp/gotp/cmd/gotp inbox migrate`)
// after upgrading gotp and before starting subscriptions: Start refuses a table
// missing a column of DefaultColumns with a *StatementError.
func Migrate(ctx context.Context, db any, table string) (Migration, error) {
	if !isIdent(table) {
		return Migration{}, &ConfigError{Field: "table", Reason: "not a plain SQL identifier"}
	}
	var res migrate.Result
	var err error
	switch db := db.(type) {
	case *sql.DB:
		if db == nil {
			return Migration{}, &ConfigError{Field: "db", Reason: "nil *sql.DB"}
		}
		res, err = migrate.SQLite(ctx, db, migrations(SQLite, table))
	case *pgxpool.Pool:
		if db == nil {
			return Migration{}, &ConfigError{Field: "db", Reason: "nil *pgxpool.Pool"}
		}
		res, err = migrate.Postgres(ctx, db, migrations(Postgres, table))
	default:
		return Migration{}, &ConfigError{Field: "db", Reason: "not a *sql.DB or *pgxpool.Pool"}
	}
	if err != nil {
		return Migration{}, &MigrationError{Table: table, Err: err}
	}
	return Migration{From: res.From, To: res.To, Created: res.Created}, nil
}

// SchemaVersionOf reads the recorded version of table's default schema on db
// (see Migrate) without changing anything: -1 if the table does not exist, 0 if it
// was made before versions were recorded.
func SchemaVersionOf(ctx context.Context, db any, table string) (int, error) {
	if !isIdent(table) {
		return 0, &ConfigError{Field: "table", Reason: "not a plain SQL identifier"}
	}
	switch db := db.(type) {
	case *sql.DB:
		return migrate.ReadSQLite(ctx, db, migrations(SQLite, table))
	case *pgxpool.Pool:
		return migrate.ReadPostgres(ctx, db, migrations(Postgres, table))
	}
	return 0, &ConfigError{Field: "db", Reason: "not a *sql.DB or *pgxpool.Pool"}
}

// ErrSchemaTooNew is matched by the error of Migrate on a table that a newer
// release migrated beyond SchemaVersion.
var ErrSchemaTooNew = migrate.ErrTooNew

// ErrNotInboxTable is matched by the error of Migrate on a table that exists,
// with no version recorded, without the columns of the first release's schema:
// a table of the same name that gotp did not make. It is left as it is.
var ErrNotInboxTable = migrate.ErrForeign

// MigrationError reports a migration that failed; the table is as it was.
type MigrationError struct {
	Table string
	Err   error
}

// Error describes the failure.
func (e *MigrationError) Error() string { return "inbox: migrate " + e.Table + ": " + e.Err.Error() }

// Unwrap returns the failure.
func (e *MigrationError) Unwrap() error { return e.Err }

// migrations is the default schema's history for table on d.
func migrations(d Dialect, table string) migrate.Set {
	qt := quoteIdent(table)
	timeType := "INTEGER"
	if d == Postgres {
		timeType = "TIMESTAMPTZ"
	}
	ddl := func(stmts ...string) func(context.Context, migrate.Exec) error {
		return func(ctx context.Context, x migrate.Exec) error {
			for _, s := range stmts {
				if err := x.Exec(ctx, s); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return migrate.Set{
		Key: "inbox:" + table,
		Exists: func(ctx context.Context, x migrate.Exec) (bool, error) {
			if d == Postgres {
				return x.Exists(ctx, `SELECT 1 WHERE to_regclass($1) IS NOT NULL`, qt)
			}
			schema, name := "main", table
			if i := strings.LastIndex(table, "."); i >= 0 {
				schema, name = table[:i], table[i+1:]
			}
			return x.Exists(ctx, `SELECT 1 FROM pragma_table_list WHERE schema = ?1 AND name = ?2`, schema, name)
		},
		Base: ddl(baseSchema(d, table)...),
		Check: func(ctx context.Context, x migrate.Exec) error {
			missing, err := missingColumns(ctx, x, d, table, baseColumns)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return fmt.Errorf("it lacks column(s) %s of the first release's schema; pick another table name (a table mapped with Columns is yours to migrate)", strings.Join(missing, ", "))
			}
			return nil
		},
		Steps: []migrate.Step{
			{Desc: "cancelled_at", Up: ddl(`ALTER TABLE ` + qt + ` ADD COLUMN cancelled_at ` + timeType)},
			{Desc: "unique jobs", Up: ddl(
				`ALTER TABLE `+qt+` ADD COLUMN unique_key TEXT`,
				`ALTER TABLE `+qt+` ADD COLUMN unique_states INTEGER NOT NULL DEFAULT 0`,
				`CREATE UNIQUE INDEX `+indexName(d, table, "_unique")+` ON `+indexTable(d, table)+` (unique_key) WHERE unique_key IS NOT NULL`,
			)},
			{Desc: "periodic jobs", Up: steps(sideTable(d, table+"_periodic", "kind", "last_tick"), ddl(ticksDDL(d, table)))},
			{Desc: "fifo groups and limits", Up: steps(sideTable(d, table+"_limits", "name", "window_start", "starts"), ddl(groupsDDL(d, table)...))},
			{Desc: "fifo groups' claimed rows indexed", Up: ddl(groupWorkDDL(d, table)...)},
			{Desc: "fifo groups' live rows indexed", Up: ddl(groupLiveDDL(d, table)...)},
		},
	}
}

// steps runs fs in order, up to the first error.
func steps(fs ...func(context.Context, migrate.Exec) error) func(context.Context, migrate.Exec) error {
	return func(ctx context.Context, x migrate.Exec) error {
		for _, f := range fs {
			if err := f(ctx, x); err != nil {
				return err
			}
		}
		return nil
	}
}

// sideTable refuses, in the step that makes one of a queue's own tables
// (TABLE_periodic, TABLE_limits: name), a table of that name that exists without
// its columns cols, with an error matching ErrNotInboxTable: the step's CREATE
// TABLE IF NOT EXISTS would keep it, and Periodic or Limits would meet it only
// when they start (or, for a table with the columns but not gotp's, never).
func sideTable(d Dialect, name string, cols ...string) func(context.Context, migrate.Exec) error {
	return func(ctx context.Context, x migrate.Exec) error {
		var ok bool
		var err error
		if d == Postgres {
			ok, err = x.Exists(ctx, `SELECT 1 WHERE to_regclass($1) IS NOT NULL`, quoteIdent(name))
		} else {
			schema, n := splitName(name)
			ok, err = x.Exists(ctx, `SELECT 1 FROM pragma_table_list WHERE schema = ?1 AND name = ?2`, schema, n)
		}
		if err != nil || !ok {
			return err
		}
		missing, err := missingColumns(ctx, x, d, name, cols)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: %s exists without column(s) %s of gotp's; rename or drop it", migrate.ErrForeign, name, strings.Join(missing, ", "))
		}
		return nil
	}
}

// missingColumns are the columns of cols that table lacks.
func missingColumns(ctx context.Context, x migrate.Exec, d Dialect, table string, cols []string) ([]string, error) {
	var missing []string
	for _, c := range cols {
		var ok bool
		var err error
		if d == Postgres {
			ok, err = x.Exists(ctx, `SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped`, quoteIdent(table), c)
		} else {
			schema, name := splitName(table)
			ok, err = x.Exists(ctx, `SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3`, name, schema, c)
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			missing = append(missing, c)
		}
	}
	return missing, nil
}

// splitName is a SQLite table name's schema ("main" if none) and name.
func splitName(table string) (schema, name string) {
	if i := strings.LastIndex(table, "."); i >= 0 {
		return table[:i], table[i+1:]
	}
	return "main", table
}

// baseColumns are the columns of version 0, which a table with no version
// recorded must have for Migrate to take it for an inbox table of the first
// release.
var baseColumns = []string{"id", "priority", "locked_until", "claimed_at", "attempts", "last_error", "dead_at", "created_at", "payload"}

// baseSchema is version 0 of the default schema: the table and claim index of the
// first release.
func baseSchema(d Dialect, table string) []string {
	qt := quoteIdent(table)
	idx := indexName(d, table, "_claim") + ` ON ` + indexTable(d, table)
	if d == SQLite {
		return []string{
			`CREATE TABLE ` + qt + ` (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	priority INTEGER NOT NULL DEFAULT 0,
	locked_until INTEGER NOT NULL DEFAULT 0,
	claimed_at INTEGER,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	dead_at INTEGER,
	created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
	payload BLOB NOT NULL
)`,
			`CREATE INDEX IF NOT EXISTS ` + idx + ` (priority, locked_until, id)`,
		}
	}
	return []string{
		`CREATE TABLE ` + qt + ` (
	id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	priority INTEGER NOT NULL DEFAULT 0,
	locked_until TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01T00:00:00Z',
	claimed_at TIMESTAMPTZ,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	dead_at TIMESTAMPTZ,
	created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
	payload BYTEA NOT NULL
)`,
		`CREATE INDEX IF NOT EXISTS ` + idx + ` (priority, locked_until, id)`,
	}
}

// groupsDDL is version 4: the FIFO group and partition columns, their indexes,
// and the starts table of Limits.Rate.
func groupsDDL(d Dialect, table string) []string {
	qt := quoteIdent(table)
	on := func(suffix string) string { return indexName(d, table, suffix) + ` ON ` + indexTable(d, table) }
	stmts := []string{
		`ALTER TABLE ` + qt + ` ADD COLUMN fifo_group TEXT`,
		`ALTER TABLE ` + qt + ` ADD COLUMN partition_key TEXT`,
		// The head of a group, and the rows that wait behind it.
		`CREATE INDEX ` + on("_group") + ` (fifo_group, id) WHERE fifo_group IS NOT NULL`,
		// A partition's ready rows in claim order, and its keys.
		`CREATE INDEX ` + on("_partition") + ` (partition_key, priority, locked_until, id) WHERE partition_key IS NOT NULL`,
		// The rows in work, for Limits (claimed_at is set while a row is).
		`CREATE INDEX ` + on("_inwork") + ` (partition_key, locked_until) WHERE claimed_at IS NOT NULL`,
		limitsDDL(d, table),
	}
	if d == Postgres {
		// At most one row of a group claimed at once, whatever the snapshots of
		// concurrent claims saw (SQLite serialises its writers).
		stmts = append(stmts, `CREATE UNIQUE INDEX `+on("_group_work")+` (fifo_group) WHERE fifo_group IS NOT NULL AND claimed_at IS NOT NULL`)
	}
	return stmts
}

// groupWorkDDL is version 5: on SQLite, the index of a group's claimed row that
// Postgres has had, unique, since version 4 (groupReady probes it). Not unique
// here: SQLite serialises its claims, and a unique index added to a table in use
// would fail on rows an older release left claimed two to a group.
func groupWorkDDL(d Dialect, table string) []string {
	if d == Postgres {
		return nil
	}
	return []string{`CREATE INDEX ` + indexName(d, table, "_group_work") + ` ON ` + indexTable(d, table) + ` (fifo_group) WHERE fifo_group IS NOT NULL AND claimed_at IS NOT NULL`}
}

// groupLiveDDL is version 6: on Postgres, the index of the groups' rows that are
// not finished, in group and id order, which a claim of heads walks (headsIn).
// Its predicate is the text of live("h") for the default schema, which the
// planner must find in the claim to use it.
func groupLiveDDL(d Dialect, table string) []string {
	if d == SQLite {
		return nil
	}
	return []string{`CREATE INDEX ` + indexName(d, table, "_group_live") + ` ON ` + indexTable(d, table) + ` (fifo_group, id) WHERE fifo_group IS NOT NULL AND locked_until < '9999-01-01 00:00:00+00'::timestamptz`}
}

// maxIdentLen is Postgres's limit on an identifier, in bytes: a longer one is
// cut to it, so two long names alike up to there would be one.
const maxIdentLen = 63

// indexName is the quoted name of the index of table with suffix: the table's
// name (its schema's joined with "_") and the suffix, or, past maxIdentLen, a cut
// of it with a hash of the whole, so that the indexes of a long name stay
// apart. On SQLite it is qualified by the table's schema, which SQLite wants
// on the index's name rather than on its table (see indexTable).
func indexName(d Dialect, table, suffix string) string {
	base := strings.ReplaceAll(table, ".", "_")
	name := base + suffix
	if len(name) > maxIdentLen {
		h := fnv.New32a()
		h.Write([]byte(table))
		name = fmt.Sprintf("%s_%08x%s", base[:maxIdentLen-9-len(suffix)], h.Sum32(), suffix)
	}
	if i := strings.LastIndex(table, "."); i >= 0 && d == SQLite {
		return quoteIdent(table[:i]) + "." + quoteIdent(name)
	}
	return quoteIdent(name)
}

// indexTable is table as the ON of its CREATE INDEX takes it: unqualified on
// SQLite (the schema is on the index's name), as given on Postgres (where the
// index goes to the table's schema).
func indexTable(d Dialect, table string) string {
	if i := strings.LastIndex(table, "."); i >= 0 && d == SQLite {
		return quoteIdent(table[i+1:])
	}
	return quoteIdent(table)
}

// limitsDDL is the table in which Limits.Rate counts the starts of the current window.
func limitsDDL(d Dialect, table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + quoteIdent(table+"_limits") + ` (name TEXT PRIMARY KEY, window_start BIGINT NOT NULL, starts BIGINT NOT NULL)`
}
