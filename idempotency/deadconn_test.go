package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/conformance/cutbattery"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// After a black hole every idle connection of the store's client is as dead as the one in use.
// Without the guard NewRedisStore adds, each is found out by a Claim of its own timing out
// (12 connections: 12 failed claims in a row, each a Retry costing its message an attempt);
// with it the first timeout condemns the others, which the pool discards unused: at most one
// claim fails.
func TestStoreDropsSilentConnectionsTogether(t *testing.T) {
	direct := testenv.Redis(t, nil)
	p, err := cutbattery.NewProxy(direct.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	opts := *direct.Options()
	opts.Addr = p.Addr()
	opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = 300*time.Millisecond, 300*time.Millisecond, 5*time.Second
	client := redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	prefix := testenv.Prefix(t)
	testenv.DeleteRedisPrefix(t, direct, prefix)
	store, err := idempotency.NewRedisStore(client, idempotency.StoreOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = client.Do(context.Background(), "BLPOP", prefix+"none", "0.1").Err()
		}()
	}
	wg.Wait()
	if idle := client.PoolStats().IdleConns; idle < 6 {
		t.Fatalf("pool holds %d idle connections, want about 12", idle)
	}
	p.Cut(cutbattery.BlackHole)
	time.Sleep(100 * time.Millisecond)
	p.Restore()
	var failed []error
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the middleware's StoreTimeout
		_, err := store.Claim(ctx, fmt.Sprintf("m%d", i), "owner", time.Minute)
		cancel()
		if err == nil {
			break
		}
		failed = append(failed, err)
		if i > 30 {
			t.Fatalf("no claim succeeded after %d tries: %v", i, err)
		}
	}
	if len(failed) > 1 {
		t.Fatalf("%d claims failed after the black hole, want at most 1: each dead pooled connection cost a claim: %v", len(failed), failed)
	}
}
