package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/testenv"
)

// envURL names the environment variable that points the tests at another Redis.
const envURL = "MILLRACE_REDIS_URL"

func redisURL() string { return testenv.Getenv(envURL, DefaultURL) }

// testClient returns a client of the test Redis, or skips (fails in CI) when it is unreachable.
func testClient(tb testing.TB) *redis.Client {
	tb.Helper()
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		tb.Fatalf("%s=%q: %v", envURL, redisURL(), err)
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		testenv.Unreachable(tb, "Redis", opts.Addr, envURL, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// testConfig is a configuration with test timings: budget 200 ms, reclaim every 50 ms.
func testConfig() Config {
	return Config{
		URL:              redisURL(),
		Group:            "millrace-test",
		ProcessingBudget: 200 * time.Millisecond,
		ReclaimInterval:  50 * time.Millisecond,
		ReadBlock:        50 * time.Millisecond,
	}
}

// newTestAdapter returns an adapter on the test Redis; the streams it joined (and their
// dead-letter streams) are deleted when the test ends, after the adapter is closed.
func newTestAdapter(tb testing.TB, cfg Config) *Adapter {
	tb.Helper()
	c := testClient(tb)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		_ = a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range a.Streams() {
			c.Del(ctx, s, a.DeadLetterTopic(s), a.retryKey(s), a.traceKey(s))
		}
	})
	return a
}

// uniqueStream returns a stream name unique to the test.
func uniqueStream(tb testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	return fmt.Sprintf("millrace-test.%s.%08x", strings.ToLower(name), rand.Uint32())
}

// testClusterClient returns a cluster client of the test Redis Cluster
// (.ci/services/redis-cluster.sh, $MILLRACE_REDIS_CLUSTER_ADDRS), or skips (fails in CI) when a
// node is down. It is closed when the test ends.
func testClusterClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	addrs := testenv.RedisClusterAddrs(tb)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		_ = c.Close()
		testenv.Unreachable(tb, "Redis Cluster", strings.Join(addrs, ","), "MILLRACE_REDIS_CLUSTER_ADDRS", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterTopic gives name a hash tag of its own, "{name}", so that the stream, its dead-letter
// stream and its retry schedule share a slot: the topic-name hook of the suites on a cluster.
func clusterTopic(name string) string { return "{" + name + "}" }

// newClusterTestAdapter is newTestAdapter on the test Redis Cluster: cfg.Client is a cluster
// client of its own (closed when the test ends), and the streams the adapter joined are deleted
// key by key (keys of different streams hash to different slots).
func newClusterTestAdapter(tb testing.TB, cfg Config) *Adapter {
	tb.Helper()
	c := testClusterClient(tb)
	cfg.Client = c
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		_ = a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range a.Streams() {
			for _, k := range []string{s, a.DeadLetterTopic(s), a.retryKey(s)} {
				c.Del(ctx, k)
			}
		}
	})
	return a
}

// subscribePublished subscribes to stream on a until the test ends, then publishes msgs to it,
// and returns the subscription's channel.
func subscribePublished(tb testing.TB, a *Adapter, stream string, msgs ...*message.Message) <-chan *message.Message {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	out, err := a.Subscriber().Subscribe(ctx, stream)
	if err != nil {
		tb.Fatal(err)
	}
	if err := a.Publisher().Publish(stream, msgs...); err != nil {
		tb.Fatal(err)
	}
	return out
}
