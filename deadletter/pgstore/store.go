package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millrace/millrace/deadletter"
)

// DB is what a Store needs of a connection; *pgxpool.Pool satisfies it.
type DB interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// Begin starts a transaction.
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store is a deadletter.Store on one PostgreSQL table. It is safe for concurrent use.
type Store struct {
	db    DB
	owned *pgxpool.Pool // closed by Close when Open created it
	cfg   Config
	table string // schema-qualified, quoted
}

var (
	_ deadletter.Store  = (*Store)(nil)
	_ deadletter.Purger = (*Store)(nil)
)

// New returns a store on db's table named by cfg. It performs no I/O: call Migrate once to
// create or upgrade the table. Close does not close db.
func New(db DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("pgstore: nil DB")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Store{db: db, cfg: cfg, table: pgx.Identifier{cfg.Schema, cfg.Table}.Sanitize()}, nil
}

// Open connects to the database at url (a postgres:// URL or key=value DSN), checks the
// connection, and returns a store that closes its pool on Close.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = pool
	return s, nil
}

// Table returns the schema-qualified, quoted table name.
func (s *Store) Table() string { return s.table }

// Close closes the pool Open created; a store from New leaves its DB open.
func (s *Store) Close() error {
	if s.owned != nil {
		s.owned.Close()
	}
	return nil
}

const columns = `id, stored_at, message_uuid, reason, attempts, last_error, original_topic, original_key,
	broker, native_id, handler, first_failure_at, last_failure_at, payload, metadata, metadata_binary, native,
	error_types, panic_stack, trace`

// Put inserts rec; a delivery already stored (same broker, topic, native id and UUID) returns
// the existing row's ID.
func (s *Store) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("pgstore: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	if rec.Attempts < 1 {
		return "", fmt.Errorf("pgstore: put: attempts %d is not at least 1", rec.Attempts)
	}
	native, err := encodeNative(rec.Native)
	if err != nil {
		return "", fmt.Errorf("pgstore: put: native: %w", err)
	}
	md, mdBin := splitMetadata(rec.Metadata)
	payload := rec.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: an empty payload is still a payload
	}
	args := []any{
		text(rec.UUID), string(rec.Reason), rec.Attempts, text(rec.LastError), text(rec.OriginalTopic),
		text(rec.OriginalKey), text(rec.Broker), text(rec.NativeID), text(rec.Handler),
		nullTime(rec.FirstFailureAt), nullTime(rec.LastFailureAt), payload, md, mdBin, native,
		errorTypes(rec.ErrorTypes), deadletter.BoundPanicStack(rec.PanicStack), traceColumn(rec.Trace),
	}
	// ON CONFLICT names the partial unique index's columns and predicate; DO NOTHING returns no
	// row, and the existing one is read in the same statement.
	var id int64
	put := func() error {
		return s.db.QueryRow(ctx, `WITH ins AS (
	INSERT INTO `+s.table+` (message_uuid, reason, attempts, last_error, original_topic, original_key,
		broker, native_id, handler, first_failure_at, last_failure_at, payload, metadata, metadata_binary, native,
		error_types, panic_stack, trace)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
	ON CONFLICT (broker, original_topic, native_id, message_uuid) WHERE native_id <> '' DO NOTHING
	RETURNING id
)
SELECT id FROM ins
UNION ALL
SELECT id FROM `+s.table+` WHERE native_id <> '' AND broker = $7 AND original_topic = $5 AND native_id = $8 AND message_uuid = $1
LIMIT 1`, args...).Scan(&id)
	}
	err = put()
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent writer committed the same delivery after this statement's snapshot was
		// taken: DO NOTHING waited for it, but the SELECT cannot see it. A new statement can.
		err = put()
	}
	if err != nil {
		return "", s.wrap("put", err)
	}
	return strconv.FormatInt(id, 10), nil
}

// Get returns the entry with id.
func (s *Store) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	n, err := parseID(id)
	if err != nil {
		return deadletter.Entry{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+columns+` FROM `+s.table+` WHERE id = $1`, n)
	if err != nil {
		return deadletter.Entry{}, s.wrap("get "+id, err)
	}
	entries, err := scanEntries(rows)
	if err != nil {
		return deadletter.Entry{}, s.wrap("get "+id, err)
	}
	if len(entries) == 0 {
		return deadletter.Entry{}, fmt.Errorf("%w: %s", deadletter.ErrNotFound, id)
	}
	return entries[0], nil
}

// List returns a page of entries matching f in id order.
func (s *Store) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	where, args := whereClause(f)
	if page.After != "" {
		after, err := parseID(page.After)
		if err != nil {
			return nil, "", err
		}
		args = append(args, after)
		where = appendCond(where, "id > $"+strconv.Itoa(len(args)))
	}
	limit := page.EffectiveLimit()
	args = append(args, limit+1) // one more row tells whether a next page exists
	rows, err := s.db.Query(ctx, `SELECT `+columns+` FROM `+s.table+where+` ORDER BY id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, "", s.wrap("list", err)
	}
	entries, err := scanEntries(rows)
	if err != nil {
		return nil, "", s.wrap("list", err)
	}
	next := ""
	if len(entries) > limit {
		entries = entries[:limit]
		next = entries[limit-1].ID
	}
	return entries, next, nil
}

// Count returns the number of entries matching f.
func (s *Store) Count(ctx context.Context, f deadletter.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	where, args := whereClause(f)
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM `+s.table+where, args...).Scan(&n); err != nil {
		return 0, s.wrap("count", err)
	}
	return n, nil
}

// Delete removes the entry with id.
func (s *Store) Delete(ctx context.Context, id string) error {
	n, err := parseID(id)
	if err != nil {
		return err
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE id = $1`, n)
	if err != nil {
		return s.wrap("delete "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", deadletter.ErrNotFound, id)
	}
	return nil
}

// Purge deletes every entry matching f in one statement and returns how many it deleted. It
// refuses the zero filter: emptying the whole table takes an explicit filter.
func (s *Store) Purge(ctx context.Context, f deadletter.Filter) (int64, error) {
	if f.IsZero() {
		return 0, deadletter.ErrPurgeAll
	}
	if err := f.Validate(); err != nil {
		return 0, err
	}
	where, args := whereClause(f)
	tag, err := s.db.Exec(ctx, `DELETE FROM `+s.table+where, args...)
	if err != nil {
		return 0, s.wrap("purge", err)
	}
	return tag.RowsAffected(), nil
}

// whereClause builds only the conditions f sets, so each query can use its own index.
func whereClause(f deadletter.Filter) (string, []any) {
	var where string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = appendCond(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Topic != "" {
		add("original_topic = $?", f.Topic)
	}
	if f.Reason != "" {
		add("reason = $?", string(f.Reason))
	}
	if !f.Since.IsZero() {
		add("last_failure_at >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("last_failure_at < $?", f.Until)
	}
	// Handler and last_error were stored through text(): the filter values go through it too,
	// so a NUL or invalid UTF-8 byte matches what Put wrote for it.
	if f.Handler != "" {
		add("handler = $?", text(f.Handler))
	}
	if f.ErrorContains != "" {
		// strpos, not LIKE: the text is a plain substring, with no % or _ to escape.
		add("strpos(last_error, $?) > 0", text(f.ErrorContains))
	}
	return where, args
}

func appendCond(where, cond string) string {
	if where == "" {
		return " WHERE " + cond
	}
	return where + " AND " + cond
}

func parseID(id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %q is not a table store id (a positive integer)", deadletter.ErrInvalidID, id)
	}
	return n, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func scanEntries(rows pgx.Rows) ([]deadletter.Entry, error) {
	defer rows.Close()
	var out []deadletter.Entry
	for rows.Next() {
		var (
			e            deadletter.Entry
			r            = &e.Record
			id           int64
			reason       string
			first, last  *time.Time
			md, mdBinary map[string]string
			native       []byte
			errTypes     []string
			stack        string
			traceparent  *string
		)
		if err := rows.Scan(&id, &e.StoredAt, &r.UUID, &reason, &r.Attempts, &r.LastError, &r.OriginalTopic,
			&r.OriginalKey, &r.Broker, &r.NativeID, &r.Handler, &first, &last, &r.Payload, &md, &mdBinary, &native,
			&errTypes, &stack, &traceparent); err != nil {
			return nil, err
		}
		e.ID = strconv.FormatInt(id, 10)
		r.Reason = deadletter.Reason(reason)
		if first != nil {
			r.FirstFailureAt = *first
		}
		if last != nil {
			r.LastFailureAt = *last
		}
		// Bounded again: the row may have been written by hand.
		r.ErrorTypes, r.PanicStack = deadletter.BoundErrorTypes(errTypes), deadletter.BoundPanicStack(stack)
		if traceparent != nil {
			// Validated again: a row from before the CHECK (NOT VALID) may hold anything.
			r.Trace = deadletter.BoundTrace(*traceparent)
		}
		var err error
		if r.Metadata, err = joinMetadata(md, mdBinary); err != nil {
			return nil, fmt.Errorf("row %d: %w", id, err)
		}
		var invalid error
		if r.Native, err = decodeNative(native); err != nil {
			invalid = err
		} else if r.Attempts < 1 {
			invalid = fmt.Errorf("attempts %d is not at least 1", r.Attempts)
		}
		if invalid != nil {
			// Written by an older build or by hand: not returned as a valid record. Like the
			// broker stores' undecodable entries, it is shown (content and context kept) with
			// an empty Reason and the cause in LastError, so an operator can see and purge it,
			// and a replay refuses it.
			r.Reason, r.Attempts = "", 0
			r.LastError = "not a millrace dead letter: " + invalid.Error() + "; last error: " + r.LastError
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ErrNotMigrated is wrapped when the table does not exist: Migrate (or `millrace dlq migrate`)
// was never run for it.
var ErrNotMigrated = errors.New("pgstore: dead-letter table does not exist (run Migrate or `millrace dlq migrate`)")

// wrap names the operation, and turns PostgreSQL's "relation does not exist" into ErrNotMigrated.
func (s *Store) wrap(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: %s: %s", ErrNotMigrated, op, s.table)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// errorTypes is the error_types column of types: NULL for none, else the types bounded as
// deadletter bounds them (printable UTF-8, which PostgreSQL text holds).
func errorTypes(types []string) []string {
	if b := deadletter.BoundErrorTypes(types); len(b) > 0 {
		return b
	}
	return nil
}

// traceColumn is the trace column of a record's Trace: NULL unless it is a valid traceparent
// (deadletter.ValidTrace), which is what the record would write under deadletter.KeyTrace.
func traceColumn(v string) *string {
	if !deadletter.ValidTrace(v) {
		return nil
	}
	return &v
}
