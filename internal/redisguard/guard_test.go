package redisguard

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/testenv"
)

// probe is a dial hook that records Guards of every connection it receives; added to a client
// before Install, it runs outside the guard.
type probe struct {
	mu     sync.Mutex
	guards []int
}

func (p *probe) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			p.mu.Lock()
			p.guards = append(p.guards, Guards(c))
			p.mu.Unlock()
		}
		return c, err
	}
}

func (p *probe) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *probe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func redisAddr(t *testing.T) string {
	u := os.Getenv("MILLRACE_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("MILLRACE_REDIS_URL: %v", err)
	}
	return o.Addr
}

// checkOneGuard runs concurrent pings that the client dials several connections, and
// checks that each one carries exactly one guard.
func checkOneGuard(t *testing.T, p *probe, ping func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- ping(ctx) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			testenv.Unreachable(t, "Redis", redisAddr(t), "MILLRACE_REDIS_URL", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.guards) == 0 {
		t.Fatal("no connection dialled; the test proves nothing")
	}
	for _, n := range p.guards {
		if n != 1 {
			t.Fatalf("guards per connection %v, want 1 each", p.guards)
		}
	}
	t.Logf("%d connections, one guard each", len(p.guards))
}

// TestInstallTwiceOneGuard: Install twice on one client (two adapters or stores sharing it)
// guards its connections once, not twice.
func TestInstallTwiceOneGuard(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	p := &probe{}
	c.AddHook(p)
	Install(c)
	Install(c)
	checkOneGuard(t, p, func(ctx context.Context) error { return c.Ping(ctx).Err() })
}

// TestInstallRingExistingShards: a ring's shards are created with the ring, before Install can
// register an OnNewNode callback, so Install guards them where they are; twice, once.
func TestInstallRingExistingShards(t *testing.T) {
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr(t)}})
	t.Cleanup(func() { _ = r.Close() })
	p := &probe{}
	if err := r.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		n.AddHook(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	Install(r)
	Install(r)
	checkOneGuard(t, p, func(ctx context.Context) error {
		return r.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
	})
}
