// Package pgtest connects tests of the dead-letter table store to a PostgreSQL database
// ($MILLRACE_POSTGRES_URL, default the local "test" database) and gives each test a table of its own.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/internal/testenv"
)

// EnvURL names the environment variable that points the tests at another database.
const EnvURL = "MILLRACE_POSTGRES_URL"

// DefaultURL is the local test database (trust authentication).
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns $MILLRACE_POSTGRES_URL or DefaultURL.
func URL() string { return testenv.Getenv(EnvURL, DefaultURL) }

// Pool returns a pool on the test database, closed at cleanup; an unreachable database skips
// the test (fails it under CI=true).
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, URL())
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		testenv.Unreachable(tb, "PostgreSQL", URL(), EnvURL, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Table returns a table name unique to this test run.
func Table() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "dltest_" + hex.EncodeToString(b[:])
}

// Store returns a migrated store on a fresh table of pool, dropped at cleanup.
func Store(tb testing.TB, pool *pgxpool.Pool) *pgstore.Store {
	tb.Helper()
	cfg := pgstore.Config{Table: Table()}
	s, err := pgstore.New(pool, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	DropAtCleanup(tb, pool, cfg.Table)
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return s
}

// DropAtCleanup drops table and its migration records from the public schema when tb ends.
func DropAtCleanup(tb testing.TB, pool *pgxpool.Pool, table string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS public.`+table); err != nil {
			tb.Logf("cleanup: drop %s: %v", table, err)
		}
		if _, err := pool.Exec(ctx, `DELETE FROM public.`+pgstore.MigrationsTable+` WHERE table_name = $1`, table); err != nil {
			tb.Logf("cleanup: migrations of %s: %v", table, err)
		}
	})
}
