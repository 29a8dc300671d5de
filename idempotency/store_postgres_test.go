package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
	"github.com/millrace/millrace/idempotency/storetest"
)

func newPostgres(t *testing.T, opts idempotency.StoreOptions) idempotency.Store {
	pool := testenv.Postgres(t)
	s, err := idempotency.NewPostgresStore(pool, idempotency.PostgresOptions{StoreOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	testenv.DeletePostgresPrefix(t, pool, idempotency.DefaultPostgresTable, opts.Prefix)
	return s
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t)
	storetest.RunStoreTests(t, newPostgres)
}

func TestPostgresDeleteExpired(t *testing.T) {
	t.Parallel()
	pool := testenv.Postgres(t)
	table := fmt.Sprintf("millrace_idem_sweep_%d", time.Now().UnixNano())
	s, err := idempotency.NewPostgresStore(pool, idempotency.PostgresOptions{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil { // idempotent
		t.Fatalf("second Migrate: %v", err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_sent")
	})
	if _, err := s.Claim(ctx, "k", "owner", 1000); err != nil { // 1 µs: expired at once
		t.Fatal(err)
	}
	n, err := s.DeleteExpired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("DeleteExpired removed %d rows, want 1", n)
	}
}
