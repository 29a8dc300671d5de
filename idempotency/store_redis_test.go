package idempotency_test

import (
	"testing"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
	"github.com/millrace/millrace/idempotency/storetest"
)

func newRedis(t *testing.T, opts idempotency.StoreOptions) idempotency.Store {
	c := testenv.Redis(t, nil)
	testenv.DeleteRedisPrefix(t, c, opts.Prefix)
	s, err := idempotency.NewRedisStore(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedisStore(t *testing.T) {
	t.Parallel()
	testenv.Redis(t, nil) // skip (or fail under CI) once, before the parallel subtests
	storetest.RunStoreTests(t, newRedis)
}
