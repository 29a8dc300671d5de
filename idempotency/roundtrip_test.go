package idempotency_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// roundTrips is a go-redis hook that counts round trips: one per command, one per pipeline.
// The commands go-redis sends when it opens a connection (HELLO, CLIENT SETINFO) are not
// counted: they are per connection, not per message.
type roundTrips struct {
	mu    sync.Mutex
	names []string
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd.Name())
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		r.record("pipeline:" + strings.Join(names, ","))
		return next(ctx, cmds)
	}
}

func (r *roundTrips) record(name string) {
	if name == "hello" || strings.Trim(strings.ReplaceAll(name, "client", ""), "pipeline:,") == "" {
		return // connection set-up
	}
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
}

// take returns the commands recorded since the last take.
func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.names
	r.names = nil
	return out
}

// countedRedisStore returns a Redis store whose client counts round trips, scripts preloaded.
func countedRedisStore(tb testing.TB, poolSize int) (*idempotency.RedisStore, *redis.Client, *roundTrips) {
	tb.Helper()
	c := testenv.Redis(tb, &redis.Options{PoolSize: poolSize})
	prefix := testenv.Prefix(tb)
	testenv.DeleteRedisPrefix(tb, c, prefix)
	rt := &roundTrips{}
	c.AddHook(rt)
	s, err := idempotency.NewRedisStore(c, idempotency.StoreOptions{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.LoadScripts(context.Background()); err != nil {
		tb.Fatal(err)
	}
	rt.take()
	return s, c, rt
}

func TestRedisRoundTripsPerMessage(t *testing.T) {
	t.Parallel()
	store, _, rt := countedRedisStore(t, 4)
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: time.Minute})
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })

	if err := deliver(h, "m1", 1, 5); err != nil {
		t.Fatal(err)
	}
	if got := rt.take(); !slices.Equal(got, []string{"set", "evalsha"}) {
		t.Fatalf("happy path round trips = %v, want exactly 2: [set evalsha] (claim, complete)", got)
	}
	if err := deliver(h, "m1", 2, 5); err != nil {
		t.Fatal(err)
	}
	if got := rt.take(); !slices.Equal(got, []string{"set", "get"}) {
		t.Fatalf("duplicate round trips = %v, want 2: [set get] (claim refused, read DONE)", got)
	}
	h2 := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, millrace.Retry(errors.New("503")) })
	_ = deliver(h2, "m2", 1, 5)
	if got := rt.take(); !slices.Equal(got, []string{"set", "evalsha"}) {
		t.Fatalf("retry path round trips = %v, want [set evalsha] (claim, release)", got)
	}
}

func TestRedisClaimBatchOneRoundTrip(t *testing.T) {
	t.Parallel()
	store, _, rt := countedRedisStore(t, 4)
	ctx := context.Background()
	if _, err := store.Claim(ctx, "busy", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, "done", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, "done", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	rt.take()
	got, err := store.ClaimBatch(ctx, []string{"fresh", "busy", "done"}, "batch-owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []idempotency.ClaimResult{idempotency.Acquired, idempotency.Busy, idempotency.Done}
	if !slices.Equal(got, want) {
		t.Fatalf("ClaimBatch = %v, want %v", got, want)
	}
	if trips := rt.take(); !slices.Equal(trips, []string{"pipeline:set,set,set", "pipeline:get,get"}) {
		t.Fatalf("round trips %v, want a SET pipeline and a GET pipeline for the held keys", trips)
	}
	if _, err := store.ClaimBatch(ctx, []string{"f1", "f2"}, "batch-owner", time.Minute); err != nil {
		t.Fatal(err)
	}
	if trips := rt.take(); !slices.Equal(trips, []string{"pipeline:set,set"}) {
		t.Fatalf("round trips %v, want one pipeline when every key is free", trips)
	}
	if err := store.Complete(ctx, "fresh", "batch-owner", time.Minute); err != nil {
		t.Fatalf("Complete of a batch-claimed key: %v", err)
	}
	if _, err := store.ClaimBatch(ctx, []string{"ok", ""}, "batch-owner", time.Minute); !errors.Is(err, idempotency.ErrInvalidArgument) {
		t.Fatalf("ClaimBatch with an empty key = %v, want ErrInvalidArgument", err)
	}
}
