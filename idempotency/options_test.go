package idempotency_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

func TestStoreOptionsRefused(t *testing.T) {
	bad := []idempotency.StoreOptions{{Prefix: "app{1}:"}, {Prefix: "x}"}, {SentTTL: -1}}
	client := redis.NewClient(&redis.Options{Addr: testenv.ClosedPort(t)})
	defer client.Close()
	for _, o := range bad {
		if _, err := idempotency.NewMemoryStore(o); !errors.Is(err, idempotency.ErrInvalidArgument) {
			t.Errorf("NewMemoryStore(%+v) = %v, want ErrInvalidArgument", o, err)
		}
		if _, err := idempotency.NewRedisStore(client, o); !errors.Is(err, idempotency.ErrInvalidArgument) {
			t.Errorf("NewRedisStore(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
	if _, err := idempotency.NewRedisStore(nil, idempotency.StoreOptions{}); !errors.Is(err, idempotency.ErrInvalidArgument) {
		t.Errorf("NewRedisStore(nil) = %v", err)
	}
	if _, err := idempotency.NewPostgresStore(nil, idempotency.PostgresOptions{}); !errors.Is(err, idempotency.ErrInvalidArgument) {
		t.Errorf("NewPostgresStore(nil) = %v", err)
	}
}

func TestPostgresTableNameRefused(t *testing.T) {
	pool := testenv.Postgres(t)
	for _, table := range []string{"x; DROP TABLE y", "Upper", "1abc"} {
		if _, err := idempotency.NewPostgresStore(pool, idempotency.PostgresOptions{Table: table}); !errors.Is(err, idempotency.ErrInvalidArgument) {
			t.Errorf("Table %q accepted: %v", table, err)
		}
	}
}

func TestRecipientHash(t *testing.T) {
	// SHA-256("device-token-1"), hex: the form the field report stores in the sent set.
	const want = "87f8fd2f036b661a6e5cb03e976c59aef54799e98e075e10a955532c2647dbb4"
	if got := idempotency.RecipientHash("device-token-1"); got != want {
		t.Fatalf("RecipientHash = %q, want %q", got, want)
	}
}
