package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
	roottestenv "github.com/millrace/millrace/internal/testenv"
)

// backend names a store implementation the middleware tests run against.
type backend struct {
	name string
	new  func(t *testing.T) idempotency.Store
}

// backends lists memory, Redis and PostgreSQL; the integration ones skip (fail under CI=true)
// inside their subtest when the service is down.
func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T) idempotency.Store {
			return newMemory(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
		{"redis", func(t *testing.T) idempotency.Store {
			return newRedis(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
		{"postgres", func(t *testing.T) idempotency.Store {
			return newPostgres(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
	}
}

// forEachBackend runs f in a parallel subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, store idempotency.Store)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.new(t))
		})
	}
}

// deliver hands the message id to the wrapped handler the way a broker redelivers it: a fresh
// *message.Message with the same UUID, carrying attempt number n.
func deliver(h message.HandlerFunc, id string, n, maxAttempts int) error {
	msg := message.NewMessage(id, []byte(`{"user":"u1"}`))
	msg.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: n, MaxAttempts: maxAttempts}))
	_, err := h(msg)
	return err
}

// outcome returns the outcome the router would derive from a handler error.
func outcome(err error) millrace.Outcome {
	if err == nil {
		return millrace.OutcomeSuccess
	}
	return millrace.Classify(err, nil).Outcome
}

// retryDelay is the delay a broker would wait after err: the explicit RetryAfter delay, else
// the policy delay.
func retryDelay(err error, p millrace.RetryPolicy, attempt int) time.Duration {
	var oe *millrace.OutcomeError
	if errors.As(err, &oe) && oe.Delay > 0 {
		return oe.Delay
	}
	return p.Delay(attempt)
}

func fixedPolicy(attempts int, delay time.Duration) millrace.RetryPolicy {
	return millrace.RetryPolicy{MaxAttempts: attempts, Backoff: millrace.Fixed(delay)}
}

func mustNew(t *testing.T, cfg idempotency.Config) *idempotency.Middleware {
	t.Helper()
	m, err := idempotency.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// newRedisCluster returns a RedisStore on the test Redis Cluster (.ci/services/redis-cluster.sh)
// with a cluster client of its own, or skips (fails under CI=true) when a node is down. The
// keys under opts.Prefix are deleted from every master when the test ends, one at a time
// (they hash to different slots).
func newRedisCluster(t *testing.T, opts idempotency.StoreOptions) *idempotency.RedisStore {
	t.Helper()
	addrs := roottestenv.RedisClusterAddrs(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		roottestenv.Unreachable(t, "Redis Cluster", strings.Join(addrs, ","), "MILLRACE_REDIS_CLUSTER_ADDRS", err)
	}
	prefix := opts.Prefix
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				m.Unlink(ctx, iter.Val())
			}
			return iter.Err()
		})
	})
	s, err := idempotency.NewRedisStore(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
