package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance/killbattery"
)

// clusterKillTarget is killTarget on the test Redis Cluster: every adapter (the parent's and
// each child's) has a cluster client of its own, closed when the test ends in its process (a
// client, not broker state: the Target's rule against clean-ups in t does not concern it), and
// the battery's topic gets a hash tag (clusterTopic).
type clusterKillTarget struct {
	killTarget
	t     testing.TB
	addrs []string
}

func (k clusterKillTarget) NewAdapter(context.Context) (millrace.Adapter, error) {
	cfg := k.cfg
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: k.addrs})
	k.t.Cleanup(func() { _ = c.Close() })
	cfg.Client = c
	return New(cfg)
}

func (k clusterKillTarget) Cleanup(ctx context.Context, a millrace.Adapter, stream string) error {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: k.addrs})
	defer c.Close()
	for _, key := range []string{stream, a.DeadLetterTopic(stream), killAdapterOf(a).retryKey(stream), killAdapterOf(a).traceKey(stream)} {
		if err := c.Del(ctx, key).Err(); err != nil {
			return err
		}
	}
	return nil
}

// TestKillBatteryCluster is TestKillBattery on the Redis Cluster, with 10 kills instead of 20
// (the cluster adds the battery's run time to CI once more): nothing lost, nothing pending, the
// same bound as on one Redis. Handler calls sleep up to 60 ms (default 20 ms), so that 10 kills
// interrupt some: with 20 ms, seed 14066999236977760651 interrupted none.
func TestKillBatteryCluster(t *testing.T) {
	t.Parallel()
	addrs := testClusterClient(t).Options().Addrs // skip locally, fail in CI, when a node is down
	killbattery.Run(t, clusterKillTarget{newKillTarget(), t, addrs}, killbattery.Options{Kills: 10, HandlerSleep: 60 * time.Millisecond, TopicName: clusterTopic})
}
