package pgstore

import (
	"regexp"

	"github.com/millrace/millrace"
)

// Defaults of Config.
const (
	// DefaultSchema is the schema of the table when Config.Schema is empty.
	DefaultSchema = "public"
	// DefaultTable is the table name when Config.Table is empty.
	DefaultTable = "millrace_dead_letters"
	// MigrationsTable records the applied migrations of every dead-letter table of a schema.
	MigrationsTable = "millrace_schema_migrations"
)

// identifier is what Schema and Table must match: lower-case, so no quoting surprises, and
// short enough for index names (table + "_" + suffix) to stay under PostgreSQL's 63 bytes.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// Config names the table of a Store. The zero value is valid: public.millrace_dead_letters.
type Config struct {
	// Schema holds the table; default "public". Migrate creates it if it does not exist.
	// Must match ^[a-z_][a-z0-9_]{0,47}$.
	Schema string
	// Table names the table; default "millrace_dead_letters". Must match ^[a-z_][a-z0-9_]{0,47}$.
	// Tests use a unique name each.
	Table string
}

// Validate checks the names; it returns a *millrace.ConfigError.
func (c Config) Validate() error {
	if c.Schema != "" && !identifier.MatchString(c.Schema) {
		return &millrace.ConfigError{Field: "pgstore.Config.Schema", Value: c.Schema, Rule: "must match " + identifier.String()}
	}
	if c.Table != "" && !identifier.MatchString(c.Table) {
		return &millrace.ConfigError{Field: "pgstore.Config.Table", Value: c.Table, Rule: "must match " + identifier.String()}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	return c
}
