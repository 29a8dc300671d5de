package testenv

import (
	"net"
	"strings"
	"testing"
	"time"
)

// RedisClusterAddrs returns the seed addresses of the test Redis Cluster that
// .ci/services/redis-cluster.sh starts (MILLRACE_REDIS_CLUSTER_ADDRS, default
// 127.0.0.1:17001-17003), after checking that every one accepts a TCP connection; when one does
// not, the test fails in CI and skips elsewhere (Unreachable). It imports no Redis client, so
// that every package's tests can share it.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	v := Getenv("MILLRACE_REDIS_CLUSTER_ADDRS", "127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003")
	addrs := strings.Split(v, ",")
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err != nil {
			if InCI() {
				t.Fatalf("Redis Cluster node %s is unreachable in CI (CI=true): %v; `. .ci/services/redis-cluster.sh` starts the cluster", a, err)
			}
			t.Skipf("Redis Cluster node %s is unreachable (%v); `. .ci/services/redis-cluster.sh` starts it, or set MILLRACE_REDIS_CLUSTER_ADDRS", a, err)
		}
		c.Close()
	}
	return addrs
}
