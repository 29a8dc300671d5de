// Package testenv connects the idempotency tests to the local Redis and PostgreSQL services.
// A service that cannot be reached skips the test, or fails it when CI=true.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// RedisAddr is the Redis server the tests use: $MILLRACE_REDIS_ADDR or 127.0.0.1:6379.
func RedisAddr() string {
	if a := os.Getenv("MILLRACE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// PostgresDSN is the database the tests use: $MILLRACE_POSTGRES_DSN or the local "test" database.
func PostgresDSN() string {
	if d := os.Getenv("MILLRACE_POSTGRES_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Unavailable skips tb because service cannot be reached, or fails it under CI=true.
func Unavailable(tb testing.TB, service string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s is required under CI=true but unreachable: %v", service, err)
	}
	tb.Skipf("SKIP: %s unreachable (%v); start it or set CI=true to make this a failure", service, err)
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
		opts.Addr = RedisAddr()
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		Unavailable(tb, "Redis at "+opts.Addr, err)
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
		Unavailable(tb, "PostgreSQL at "+PostgresDSN(), err)
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
