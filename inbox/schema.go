package inbox

import (
	"context"
	"fmt"
	"strings"
)

// column is what the table check needs to know of one column of the job table.
type column struct {
	name    string
	typ     string // as declared (SQLite) or as format_type spells it (Postgres)
	base    string // Postgres: the base type (a domain's underlying type), as regtype spells it
	notNull bool
	pk      bool // SQLite: part of the primary key
	maxLen  int  // Postgres: the length limit of a varchar or char column, 0 if none
}

// checkColumns refuses, with a *ColumnError, a table whose columns allow rows that
// claims could not take or settle, or values the inbox could not read. It runs after
// the statements were prepared, so the table and its mapped columns exist.
func (q *Queue[T]) checkColumns(ctx context.Context) error {
	var cols map[string]column
	var err error
	if q.dialect == SQLite {
		cols, err = q.sqliteColumns(ctx)
	} else {
		cols, err = q.pgColumns(ctx)
	}
	if err != nil {
		return fmt.Errorf("inbox: %s: read the table's columns: %w", q.name, err)
	}
	refuse := func(c, reason string) error { return &ColumnError{Table: q.name, Column: c, Reason: reason} }
	c := q.c
	if a, ok := cols[c.Attempts]; ok && c.Attempts != "" && a.notNull {
		q.attemptsNotNull.Store(true)
	}
	if lu, ok := cols[c.LockedUntil]; ok && !lu.notNull && !c.LockedUntilNullable {
		return refuse(c.LockedUntil, "allows NULL, and a row whose lock deadline is NULL is never claimed: declare it NOT NULL, or set Columns.LockedUntilNullable to claim such rows at once")
	}
	if q.dialect == SQLite {
		return nil // sqliteColumns checked the id; every other value is converted by the claim
	}
	if id, ok := cols[c.ID]; ok {
		if !isPgInt(id.base) {
			return refuse(c.ID, "has type "+id.typ+"; ids are read as integers: smallint, integer or bigint")
		}
		if !id.notNull {
			return refuse(c.ID, "allows NULL, and a row whose id is NULL can be neither claimed nor settled: declare it NOT NULL (or the primary key)")
		}
	}
	if a, ok := cols[c.Attempts]; ok && c.Attempts != "" && !isPgInt(a.base) {
		return refuse(c.Attempts, "has type "+a.typ+"; attempts are counted in an integer: smallint, integer or bigint")
	}
	if p, ok := cols[c.Payload]; ok {
		switch p.base {
		case "bytea", "text", "character varying", "json", "jsonb":
		default:
			return refuse(c.Payload, "has type "+p.typ+"; payloads are read as bytes: bytea, text, varchar, json or jsonb")
		}
	}
	if u, ok := cols[c.UniqueKey]; ok && c.UniqueKey != "" && u.maxLen > 0 {
		return refuse(c.UniqueKey, fmt.Sprintf("is limited to %d characters, and a finished job that gives its key up keeps it a few characters longer (see Unique), so a key near the limit would fail its settlement: use text", u.maxLen))
	}
	if e, ok := cols[c.LastError]; ok && c.LastError != "" {
		if e.maxLen > 0 {
			return refuse(c.LastError, fmt.Sprintf("is limited to %d characters, and a settlement whose error message is longer would fail: use text", e.maxLen))
		}
		if e.base != "text" && e.base != "character varying" {
			return refuse(c.LastError, "has type "+e.typ+"; error messages are written as text")
		}
	}
	return nil
}

func isPgInt(t string) bool { return t == "smallint" || t == "integer" || t == "bigint" }

// sqliteColumns reads the table's columns with PRAGMA table_info, and refuses an id
// column that SQLite would let hold something other than an integer.
func (q *Queue[T]) sqliteColumns(ctx context.Context) (map[string]column, error) {
	schema, table := "main", q.name
	if i := strings.LastIndex(q.name, "."); i >= 0 {
		schema, table = q.name[:i], q.name[i+1:]
	}
	// Identifiers were checked by isIdent: plain letters, digits and underscores.
	r, err := q.sqldb.QueryContext(ctx, `PRAGMA "`+schema+`".table_info('`+table+`')`)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cols := map[string]column{}
	pks := 0
	for r.Next() {
		var cid, notNull, pk int64
		var name, typ string
		var dflt any
		if err := r.Scan(&cid, &name, &typ, &notNull, &dflt, &pk); err != nil {
			return nil, err
		}
		cols[name] = column{name: name, typ: typ, notNull: notNull != 0, pk: pk > 0}
		if pk > 0 {
			pks++
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	var withoutRowid, strict bool
	err = q.sqldb.QueryRowContext(ctx, `SELECT wr, strict FROM pragma_table_list WHERE schema = ?1 AND name = ?2`, schema, table).Scan(&withoutRowid, &strict)
	if err != nil {
		return nil, err
	}
	id := cols[q.c.ID]
	intType := strings.EqualFold(id.typ, "INTEGER") || strings.EqualFold(id.typ, "INT")
	rowidAlias := id.pk && pks == 1 && strings.EqualFold(id.typ, "INTEGER") && !withoutRowid
	if !rowidAlias && !(strict && intType && (id.notNull || id.pk)) {
		return nil, &ColumnError{Table: q.name, Column: q.c.ID, Reason: "must be the table's INTEGER PRIMARY KEY, or an INTEGER NOT NULL column of a STRICT table: SQLite lets any other column hold values that are not integers, and such a row could be neither claimed nor settled"}
	}
	return cols, nil
}

// pgColumns reads the table's columns from the catalog.
func (q *Queue[T]) pgColumns(ctx context.Context) (map[string]column, error) {
	r, err := q.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
	coalesce(nullif(t.typbasetype, 0), t.oid)::regtype::text,
	a.attnotnull OR t.typnotnull,
	CASE WHEN t.typbasetype <> 0 THEN t.typtypmod ELSE a.atttypmod END
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, q.table)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cols := map[string]column{}
	for r.Next() {
		var c column
		var mod int32
		if err := r.Scan(&c.name, &c.typ, &c.base, &c.notNull, &mod); err != nil {
			return nil, err
		}
		if (c.base == "character varying" || c.base == "character") && mod > 4 {
			c.maxLen = int(mod - 4)
		}
		cols[c.name] = c
	}
	return cols, r.Err()
}
