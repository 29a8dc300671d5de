package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

// TestCheckEvictionByPolicy runs a private redis-server per maxmemory-policy: noeviction
// passes silently; allkeys-lru and volatile-ttl (every record of the store has a TTL) warn by
// default and are refused with EvictionRefuse, naming the node and the policy.
func TestCheckEvictionByPolicy(t *testing.T) {
	t.Parallel()
	for i, policy := range []string{"noeviction", "allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			port := freeRedisPort(t, 17310+i*10, 17320+i*10)
			client := startRedisServer(t, port, "--maxmemory", "64mb", "--maxmemory-policy", policy)
			var logs bytes.Buffer
			warn, err := NewRedisStore(client, StoreOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := warn.CheckEviction(ctx); err != nil {
				t.Fatalf("EvictionWarn: %v", err)
			}
			warned := strings.Contains(logs.String(), "maxmemory-policy "+policy)
			if warned != (policy != "noeviction") {
				t.Fatalf("policy %s: warned %v; log %q", policy, warned, logs.String())
			}
			refuse, _ := NewRedisStore(client, StoreOptions{Eviction: EvictionRefuse})
			err = refuse.CheckEviction(ctx)
			if policy == "noeviction" {
				if err != nil {
					t.Fatalf("noeviction refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrEvictingStore) || !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
				t.Fatalf("EvictionRefuse on %s: %v", policy, err)
			}
			ignore, _ := NewRedisStore(client, StoreOptions{Eviction: EvictionIgnore})
			if err := ignore.CheckEviction(ctx); err != nil {
				t.Fatalf("EvictionIgnore: %v", err)
			}
		})
	}
}

// TestMemoryCountsEvictions: a node with a 2 MB limit under allkeys-lru, filled with 8 MB,
// evicts; Memory reports the limit, the policy and the evictions.
func TestMemoryCountsEvictions(t *testing.T) {
	t.Parallel()
	client := startRedisServer(t, freeRedisPort(t, 17350, 17360), "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	store, err := NewRedisStore(client, StoreOptions{Eviction: EvictionIgnore})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	value := strings.Repeat("x", 64<<10)
	for i := range 128 {
		if err := client.Set(ctx, fmt.Sprintf("fill:%d", i), value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := store.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 {
		t.Fatalf("nodes %+v, want one", nodes)
	}
	n := nodes[0]
	if n.Policy != "allkeys-lru" || n.MaxMemory != 2<<20 || n.EvictedKeys == 0 || n.UsedMemory == 0 || !n.Evicts() {
		t.Fatalf("memory %+v: want allkeys-lru, maxmemory 2 MiB, evictions counted", n)
	}
}

// TestRouterRefusesEvictingLeaseStore: a router whose guard's store refuses eviction does not
// start on an allkeys-lru node: Run names the handler and the policy, and no handler runs.
func TestRouterRefusesEvictingLeaseStore(t *testing.T) {
	t.Parallel()
	client := startRedisServer(t, freeRedisPort(t, 17360, 17370), "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu")
	store, err := NewRedisStore(client, StoreOptions{Eviction: EvictionRefuse})
	if err != nil {
		t.Fatal(err)
	}
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter:     a,
		Policy:      millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		Idempotency: ForRouter(Config{Store: store}),
	})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	r.Handle("push", "push", func(context.Context, *message.Message, millrace.Attempt) error { called = true; return nil })
	_ = a.Publish("push", message.NewMessage("m", []byte("x")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, ErrEvictingStore) || !strings.Contains(err.Error(), `handler "push"`) || !strings.Contains(err.Error(), "allkeys-lfu") {
		t.Fatalf("Run: %v, want the evicting store refused for handler push", err)
	}
	if called {
		t.Fatal("the handler ran although Run refused to start")
	}
}

// TestParseNodeMemoryRefusesGarbage: INFO replies are untrusted; a missing or unparsable field
// is an error, never a zero that would read as "no limit" or "no evictions".
func TestParseNodeMemoryRefusesGarbage(t *testing.T) {
	good := "# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
	stats := "# Stats\r\nevicted_keys:7\r\n"
	n, err := parseNodeMemory(good, stats)
	if err != nil || n.UsedMemory != 1024 || n.EvictedKeys != 7 || n.Evicts() {
		t.Fatalf("good replies: %+v, %v", n, err)
	}
	for name, c := range map[string][2]string{
		"no policy":       {"used_memory:1\r\nmaxmemory:0\r\n", stats},
		"empty policy":    {"used_memory:1\r\nmaxmemory:0\r\nmaxmemory_policy:\r\n", stats},
		"no evicted_keys": {good, "# Stats\r\n"},
		"negative":        {strings.Replace(good, "maxmemory:0", "maxmemory:-1", 1), stats},
		"overflow":        {good, "evicted_keys:99999999999999999999999\r\n"},
		"not a number":    {strings.Replace(good, "used_memory:1024", "used_memory:lots", 1), stats},
		"huge garbage":    {strings.Repeat("z", 2<<20), stats},
		"binary":          {"\x00\xff:\x01\r\n", "\x00"},
	} {
		if n, err := parseNodeMemory(c[0], c[1]); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, n)
		}
	}
}
