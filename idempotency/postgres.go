package idempotency

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresDB is what the PostgreSQL store needs of a connection; *pgxpool.Pool satisfies it.
type PostgresDB interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// Begin starts a transaction.
	Begin(ctx context.Context) (pgx.Tx, error)
}

// PostgresOptions configures a PostgresStore. The zero value is valid.
type PostgresOptions struct {
	// StoreOptions are the prefix and sent TTL every store shares.
	StoreOptions
	// Table names the lease table; default "millrace_idempotency". The sent table is
	// Table + "_sent". It must match ^[a-z_][a-z0-9_]{0,50}$.
	Table string
}

// DefaultPostgresTable is the lease table name when PostgresOptions.Table is empty.
const DefaultPostgresTable = "millrace_idempotency"

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// PostgresStore is a Store on PostgreSQL 12 or newer (pgx v5). Records hold an expiry timestamp
// taken from the database clock (clock_timestamp()), so every consumer agrees on expiry as they
// would with Redis TTLs; an expired row counts as absent. Create the tables with Migrate (or the
// SQL returned by Schema), and call DeleteExpired now and then to reclaim space.
type PostgresStore struct {
	db   PostgresDB
	opts StoreOptions
	q    pgQueries
}

// pgQueries holds the statements of one store, with its table names substituted.
type pgQueries struct {
	schema, claimInsert, claimRead, complete, release, wasSent, markSent, deleteExpired string
}

// NewPostgresStore returns a store on db; it performs no I/O and fails only on invalid options.
func NewPostgresStore(db PostgresDB, opts PostgresOptions) (*PostgresStore, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil PostgreSQL connection", ErrInvalidArgument)
	}
	so := opts.StoreOptions.withDefaults()
	if err := so.validate(); err != nil {
		return nil, err
	}
	table := opts.Table
	if table == "" {
		table = DefaultPostgresTable
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: Table %q must match %s", ErrInvalidArgument, table, tableName)
	}
	return &PostgresStore{db: db, opts: so, q: newPgQueries(table)}, nil
}

func newPgQueries(t string) pgQueries {
	s := t + "_sent"
	// $n::bigint * interval '1 microsecond' turns a duration in microseconds into an interval.
	return pgQueries{
		schema: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        text        PRIMARY KEY,
	owner      text        NOT NULL, -- the lease owner, or 'done'
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS ` + t + `_expires_at ON ` + t + ` (expires_at);
CREATE TABLE IF NOT EXISTS ` + s + ` (
	key            text        NOT NULL,
	recipient_hash text        NOT NULL, -- SHA-256 hex of the recipient
	expires_at     timestamptz NOT NULL,
	PRIMARY KEY (key, recipient_hash)
);
CREATE INDEX IF NOT EXISTS ` + s + `_expires_at ON ` + s + ` (expires_at);`,

		claimInsert: `INSERT INTO ` + t + ` AS l (key, owner, expires_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
	WHERE l.expires_at <= clock_timestamp()
RETURNING true`,

		claimRead: `SELECT owner FROM ` + t + ` WHERE key = $1 AND expires_at > clock_timestamp()`,

		complete: `UPDATE ` + t + ` SET owner = 'done', expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()`,

		release: `DELETE FROM ` + t + ` WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()`,

		wasSent: `SELECT EXISTS (SELECT 1 FROM ` + s + `
WHERE key = $1 AND recipient_hash = $2 AND expires_at > clock_timestamp())`,

		// The lease row is locked FOR SHARE so that no takeover can happen between the owner
		// check and the insert; like the Redis SADD+PEXPIRE, the whole set's expiry is renewed.
		markSent: `WITH lease AS (
	SELECT 1 FROM ` + t + ` WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() FOR SHARE
), ins AS (
	INSERT INTO ` + s + ` (key, recipient_hash, expires_at)
	SELECT $3, $4, clock_timestamp() + $5::bigint * interval '1 microsecond' WHERE EXISTS (SELECT 1 FROM lease)
	ON CONFLICT (key, recipient_hash) DO UPDATE SET expires_at = EXCLUDED.expires_at
	RETURNING 1
), renew AS (
	UPDATE ` + s + ` SET expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond'
	WHERE key = $3 AND recipient_hash <> $4 AND expires_at > clock_timestamp() AND EXISTS (SELECT 1 FROM lease)
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease)`,

		deleteExpired: `WITH a AS (DELETE FROM ` + t + ` WHERE expires_at <= clock_timestamp() RETURNING 1),
b AS (DELETE FROM ` + s + ` WHERE expires_at <= clock_timestamp() RETURNING 1)
SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)`,
	}
}

// Schema returns the SQL that Migrate runs, for teams that manage migrations themselves.
func (s *PostgresStore) Schema() string { return s.q.schema }

// Migrate creates the store's tables and indexes if they do not exist. Concurrent calls are
// serialised with a transaction-scoped advisory lock.
func (s *PostgresStore) Migrate(ctx context.Context) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('millrace idempotency migrate'))`); err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, s.q.schema); err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	return nil
}

// DeleteExpired removes expired leases and sent records and returns how many rows it removed.
// Expired rows are already ignored; this only reclaims space.
func (s *PostgresStore) DeleteExpired(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, s.q.deleteExpired).Scan(&n)
	return n, err
}

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// Claim implements Store: an INSERT that takes over only an expired row; when it takes nothing,
// a read of the live row tells Done from Busy.
func (s *PostgresStore) Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error) {
	if err := checkClaim(key, owner, leaseTTL); err != nil {
		return 0, err
	}
	name := s.opts.processedKey(key)
	for range claimRounds {
		var ok bool
		err := s.db.QueryRow(ctx, s.q.claimInsert, name, owner, micros(leaseTTL)).Scan(&ok)
		if err == nil {
			return Acquired, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, err
		}
		var held string
		err = s.db.QueryRow(ctx, s.q.claimRead, name).Scan(&held)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // expired or released in between: try to take it again
		case err != nil:
			return 0, err
		case held == DoneValue:
			return Done, nil
		default:
			return Busy, nil
		}
	}
	return 0, fmt.Errorf("idempotency: claim %q: lease kept changing hands", key)
}

// Complete implements Store with one owner-checked UPDATE.
func (s *PostgresStore) Complete(ctx context.Context, key, owner string, doneTTL time.Duration) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	if err := checkTTL("done TTL", doneTTL); err != nil {
		return err
	}
	return rowsOrLost(s.db.Exec(ctx, s.q.complete, s.opts.processedKey(key), owner, micros(doneTTL)))
}

// Release implements Store with one owner-checked DELETE.
func (s *PostgresStore) Release(ctx context.Context, key, owner string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	return rowsOrLost(s.db.Exec(ctx, s.q.release, s.opts.processedKey(key), owner))
}

func rowsOrLost(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return ErrLeaseLost
	}
	return nil
}

// WasSent implements Store.
func (s *PostgresStore) WasSent(ctx context.Context, key, recipient string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	var sent bool
	err := s.db.QueryRow(ctx, s.q.wasSent, s.opts.sentKey(key), RecipientHash(recipient)).Scan(&sent)
	return sent, err
}

// MarkSent implements Store with one owner-checked statement.
func (s *PostgresStore) MarkSent(ctx context.Context, key, owner, recipient string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	var held bool
	err := s.db.QueryRow(ctx, s.q.markSent, s.opts.processedKey(key), owner, s.opts.sentKey(key),
		RecipientHash(recipient), micros(s.opts.SentTTL)).Scan(&held)
	if err != nil {
		return err
	}
	if !held {
		return ErrLeaseLost
	}
	return nil
}
