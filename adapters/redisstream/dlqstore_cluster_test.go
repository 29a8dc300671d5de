package redisstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

// clusterClient returns a cluster client of the test Redis Cluster, or skips (fails in CI)
// when a node is down.
func clusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		_ = c.Close()
		testenv.Unreachable(t, "Redis Cluster", strings.Join(addrs, ","), "MILLRACE_REDIS_CLUSTER_ADDRS", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestStoreCluster runs the dead-letter store suite on the Redis Cluster with a cluster client.
// Each store is one stream, so one slot; the streams of the subtests spread over the masters.
func TestStoreCluster(t *testing.T) {
	c := clusterClient(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store {
		stream := "{" + uniqueStream() + "}.dlq"
		t.Cleanup(func() { c.Del(context.Background(), stream) })
		s, err := redisstream.NewDeadLetterStore(c, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{NoDedup: true})
}
