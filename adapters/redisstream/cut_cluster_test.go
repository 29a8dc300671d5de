package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/conformance/cutbattery"
)

// clusterCutTarget is cutTarget on the Redis Cluster: the adapter's cluster client reaches
// every node through the battery's proxies (its Dialer maps each node's address, as CLUSTER
// SLOTS announces it, to that node's proxy), so a cut cuts the whole cluster; the workload is
// published, and dead letters read, on a direct cluster client. The topic gets a hash tag.
type clusterCutTarget struct{}

func (clusterCutTarget) Name() string { return "redisstream-cluster" }

func (clusterCutTarget) Upstreams(t testing.TB) []string {
	return testClusterClient(t).Options().Addrs
}

func (clusterCutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	direct := testClusterClient(t)
	via := map[string]string{}
	for i, a := range direct.Options().Addrs {
		via[a] = proxied[i]
	}
	var d net.Dialer
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: direct.Options().Addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			p, ok := via[addr]
			if !ok {
				return nil, fmt.Errorf("cluster cut battery: node %s has no proxy (only %v)", addr, via)
			}
			return d.DialContext(ctx, network, p)
		},
	})
	t.Cleanup(func() { _ = client.Close() })
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := New(Config{Client: client, Group: "cutbattery", ProcessingBudget: cutBudget,
		ReclaimInterval: cutReclaim, Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	tools, err := New(Config{Client: direct, Group: "cutbattery-tools", Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	t.Cleanup(func() {
		_ = tools.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, k := range []string{topic, a.DeadLetterTopic(topic), a.retryKey(topic)} {
			direct.Del(ctx, k)
		}
	})
	opts := redis.Options{ReadTimeout: client.Options().ReadTimeout}
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.DeadLetterSubscriber(),
		Pending: func(ctx context.Context, stream string) (int, error) {
			return streamBacklog(ctx, direct, stream, "cutbattery", a.retryKey(stream))
		},
		Bound: redisCutBound(opts, cutBudget),
	}, nil
}

// TestCutBatteryCluster is TestCutBattery on the Redis Cluster, every node cut at once.
func TestCutBatteryCluster(t *testing.T) {
	cutbattery.Run(t, clusterCutTarget{}, cutbattery.Options{TopicName: clusterTopic})
}
