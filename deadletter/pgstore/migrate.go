package pgstore

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one embedded SQL file, named NNNN_description.sql.
type migration struct {
	version int
	name    string
	tmpl    *template.Template
}

// migrationVars are what a migration file may refer to: {{.Table}} (the schema-qualified,
// quoted table) and {{.Index "suffix"}} (a quoted index name unique to the table).
type migrationVars struct {
	Table string
	table string
}

// Index returns the quoted name of the table's index with suffix.
func (v migrationVars) Index(suffix string) string {
	return pgx.Identifier{v.table + "_" + suffix}.Sanitize()
}

// loadMigrations parses the embedded files in version order; it fails only on a bad file name
// or template, which a unit test catches.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("pgstore: migration file %q: name must be NNNN_description.sql", base)
		}
		body, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		t, err := template.New(base).Option("missingkey=error").Parse(string(body))
		if err != nil {
			return nil, fmt.Errorf("pgstore: migration %q: %w", base, err)
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(base, ".sql"), tmpl: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migration versions must be 1..n without gaps; found %d at position %d", m.version, i+1)
		}
	}
	return out, nil
}

// LatestVersion is the schema version Migrate brings a table to.
func LatestVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrateLockKey serialises every Migrate call of every dead-letter table on the server: creating
// the shared migrations table (and a schema) concurrently would otherwise race in the catalog.
const migrateLockKey = "millrace deadletter pgstore migrate"

// Migrate brings the table to LatestVersion: it applies, in one transaction, each embedded
// migration not yet recorded in <schema>.millrace_schema_migrations for this table. It is
// idempotent, and safe to call from many processes at once (pg_advisory_xact_lock).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, migrateLockKey); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	migTable := pgx.Identifier{s.cfg.Schema, MigrationsTable}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.cfg.Schema}.Sanitize()+`;
CREATE TABLE IF NOT EXISTS `+migTable+` (
	table_name text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (table_name, version)
)`); err != nil {
		return fmt.Errorf("pgstore: migrate: create %s: %w", migTable, err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+migTable+` WHERE table_name = $1`, s.cfg.Table).Scan(&current); err != nil {
		return fmt.Errorf("pgstore: migrate: read version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("pgstore: migrate: table %s is at schema version %d, newer than this build's %d", s.table, current, len(ms))
	}
	vars := migrationVars{Table: s.table, table: s.cfg.Table}
	for _, m := range ms[current:] {
		var sql bytes.Buffer
		if err := m.tmpl.Execute(&sql, vars); err != nil {
			return fmt.Errorf("pgstore: migrate: %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, sql.String()); err != nil {
			return fmt.Errorf("pgstore: migrate: %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+migTable+` (table_name, version, name) VALUES ($1, $2, $3)`, s.cfg.Table, m.version, m.name); err != nil {
			return fmt.Errorf("pgstore: migrate: record %s: %w", m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}

// SchemaVersion returns the table's applied schema version, 0 when it was never migrated.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{s.cfg.Schema, MigrationsTable}.Sanitize()).Scan(&exists); err != nil {
		return 0, fmt.Errorf("pgstore: schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := s.db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{s.cfg.Schema, MigrationsTable}.Sanitize()+` WHERE table_name = $1`, s.cfg.Table).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("pgstore: schema version: %w", err)
	}
	return v, nil
}
