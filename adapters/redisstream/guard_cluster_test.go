package redisstream

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
	"github.com/millrace/millrace/internal/testenv"
)

// guardProbe is a dial hook that records, per node address, how many connection guards wrap
// each connection it receives. Added to a node client before New installs the guard, it sits
// outside the guard (go-redis runs the hooks added first outermost) and so sees the guarded
// connection.
type guardProbe struct {
	mu     sync.Mutex
	guards map[string][]int // addr -> redisguard.Guards of each dial
}

func newGuardProbe() *guardProbe { return &guardProbe{guards: map[string][]int{}} }

func (p *guardProbe) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			p.mu.Lock()
			p.guards[addr] = append(p.guards[addr], redisguard.Guards(c))
			p.mu.Unlock()
		}
		return c, err
	}
}

func (p *guardProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *guardProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// check fails t unless every one of the masters was dialled and every
// connection carries exactly one guard.
func (p *guardProbe) check(t *testing.T, masters []string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range masters {
		got := p.guards[m]
		if len(got) == 0 {
			t.Errorf("node %s: no connection dialled; the test proves nothing for it", m)
			continue
		}
		bad := 0
		for _, n := range got {
			if n != 1 {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("node %s: %d of %d new connections do not carry exactly one connection guard (guards per connection: %v)", m, bad, len(got), got)
		} else {
			t.Logf("node %s: %d new connections, each with one guard", m, len(got))
		}
	}
}

// clusterMasters returns the address of every master of c's cluster.
func clusterMasters(t *testing.T, c *redis.ClusterClient) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	if err := c.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		out = append(out, m.Options().Addr)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// dialEveryMaster runs enough concurrent commands, on keys spread over all slots, that every
// node client dials new connections.
func dialEveryMaster(t *testing.T, c *redis.ClusterClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("{guard-%d}", i)
			_ = c.Set(ctx, k, "x", time.Minute).Err()
			_ = c.Del(ctx, k).Err()
		}()
	}
	wg.Wait()
}

// TestGuardClusterClientUsedBeforeNew: a cluster client the application used before handing it
// to New (its node clients exist already, so no OnNewNode callback runs for them) gets the
// connection guard on every node client, once, even with two adapters on it: every connection
// a node dials afterwards carries exactly one guard. It fails on the Install that only used
// OnNewNode (the connections carry none).
func TestGuardClusterClientUsedBeforeNew(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis Cluster", fmt.Sprint(c.Options().Addrs), "MILLRACE_REDIS_CLUSTER_ADDRS", err)
	}
	for i := range 10 {
		k := fmt.Sprintf("{before-%d}", i)
		if err := c.Set(ctx, k, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters := clusterMasters(t, c)
	probe := newGuardProbe()
	if err := c.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		n.AddHook(probe)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		a, err := New(Config{Client: c, Group: "millrace-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
	}
	dialEveryMaster(t, c)
	probe.check(t, masters)
}

// TestGuardClusterClientTwoAdapters: two adapters on one fresh cluster client put one guard on
// each node client, not one per adapter (each Install used to add an OnNewNode callback with a
// guard of its own, so every node client carried two, and the callbacks grew with every New).
func TestGuardClusterClientTwoAdapters(t *testing.T) {
	addrs := testClusterClient(t).Options().Addrs // checks the cluster answers
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	probe := newGuardProbe()
	c.OnNewNode(func(n *redis.Client) { n.AddHook(probe) }) // before New's: outside the guard
	for range 2 {
		a, err := New(Config{Client: c, Group: "millrace-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
	}
	masters := clusterMasters(t, c)
	dialEveryMaster(t, c)
	probe.check(t, masters)
}
