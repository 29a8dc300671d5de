// Package testenv connects the idempotency tests to the local Redis and PostgreSQL services.
// A service that cannot be reached skips the test, or fails it when CI=true.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	roottestenv "github.com/millrace/millrace/internal/testenv"
)

// RedisURL is the Redis server the tests use: $MILLRACE_REDIS_URL or the local one.
func RedisURL() string { return roottestenv.Getenv("MILLRACE_REDIS_URL", "redis://127.0.0.1:6379/0") }

// RedisAddr is the host:port of RedisURL.
func RedisAddr() string {
	parsed, err := redis.ParseURL(RedisURL())
	if err != nil {
		return "127.0.0.1:6379"
	}
	return parsed.Addr
}

// PostgresDSN is the database the tests use: $MILLRACE_POSTGRES_URL or the local "test" database.
func PostgresDSN() string {
	return roottestenv.Getenv("MILLRACE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// Prefix returns a key prefix unique to this test run, so parallel runs never share records.
func Prefix(tb testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(tb.Name())
	return "millracetest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// Redis returns a client of the test Redis, closed (and its prefix keys deleted) at cleanup.
func Redis(tb testing.TB, opts *redis.Options) *redis.Client {
	tb.Helper()
	if opts == nil {
		opts = &redis.Options{}
	}
	if opts.Addr == "" {
		parsed, err := redis.ParseURL(RedisURL())
		if err != nil {
			tb.Fatalf("MILLRACE_REDIS_URL %q: %v", RedisURL(), err)
		}
		opts.Addr, opts.DB, opts.Username, opts.Password = parsed.Addr, parsed.DB, parsed.Username, parsed.Password
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		roottestenv.Unreachable(tb, "Redis", opts.Addr, "MILLRACE_REDIS_URL", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// DeleteRedisPrefix deletes every key starting with prefix, at cleanup of tb.
func DeleteRedisPrefix(tb testing.TB, c *redis.Client, prefix string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		batch := make([]string, 0, 1000)
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
				c.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			c.Unlink(ctx, batch...)
		}
	})
}

// Postgres returns a pool on the test database, closed at cleanup.
func Postgres(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, PostgresDSN())
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		roottestenv.Unreachable(tb, "PostgreSQL", PostgresDSN(), "MILLRACE_POSTGRES_URL", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// DeletePostgresPrefix deletes the rows whose key starts with prefix from table and its sent
// table, at cleanup of tb.
func DeletePostgresPrefix(tb testing.TB, pool *pgxpool.Pool, table, prefix string) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, t := range []string{table, table + "_sent"} {
			if _, err := pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE starts_with(key, $1)`, t), prefix); err != nil {
				tb.Logf("cleanup %s: %v", t, err)
			}
		}
	})
}
