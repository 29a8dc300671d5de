package idempotency_test

import (
	"testing"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/storetest"
)

func newMemory(t *testing.T, opts idempotency.StoreOptions) idempotency.Store {
	s, err := idempotency.NewMemoryStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	storetest.RunStoreTests(t, newMemory)
}
