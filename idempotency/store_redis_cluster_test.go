package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
	"github.com/millrace/millrace/idempotency/storetest"
)

// TestRedisStoreCluster runs the store suite on the Redis Cluster with redis.NewClusterClient.
func TestRedisStoreCluster(t *testing.T) {
	t.Parallel()
	newRedisCluster(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)}) // skip (or fail under CI) once
	storetest.RunStoreTests(t, func(t *testing.T, opts idempotency.StoreOptions) idempotency.Store {
		return newRedisCluster(t, opts)
	})
}

// clusterHostileKeys are keys whose braces matter to Redis Cluster's hash tags (issue 19: for
// "}x" the lease and its fan-out set used to land in different slots, and MarkSent failed with
// CROSSSLOT), plus a long and a binary one.
var clusterHostileKeys = []string{"}", "}x", "{}", "{", "{}}", "~}", "~", "{a}b", "a{b}c", "}{x}",
	strings.Repeat("{}", 5000) + "}", "\x00{\xff}\x80", "\xff}\x00"}

// TestRedisStoreClusterHostileKeys: on the cluster, every step of a lease and its fan-out set
// works for each hostile key: Claim, MarkSent, WasSent, Complete, and the key is then done.
func TestRedisStoreClusterHostileKeys(t *testing.T) {
	t.Parallel()
	s := newRedisCluster(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
	if err := s.LoadScripts(context.Background()); err != nil {
		t.Fatalf("LoadScripts on the cluster: %v", err)
	}
	ctx := context.Background()
	for _, key := range clusterHostileKeys {
		name := key
		if len(name) > 20 {
			name = name[:20] + "..."
		}
		if r, err := s.Claim(ctx, key, "owner", 30*time.Second); err != nil || r != idempotency.Acquired {
			t.Errorf("Claim(%q) = %v, %v", name, r, err)
			continue
		}
		if err := s.MarkSent(ctx, key, "owner", "recipient-a"); err != nil {
			t.Errorf("MarkSent(%q): %v", name, err)
		}
		if sent, err := s.WasSent(ctx, key, "recipient-a"); err != nil || !sent {
			t.Errorf("WasSent(%q) = %v, %v, want true", name, sent, err)
		}
		if sent, err := s.WasSent(ctx, key, "recipient-b"); err != nil || sent {
			t.Errorf("WasSent(%q, b) = %v, %v, want false", name, sent, err)
		}
		if err := s.Complete(ctx, key, "owner", time.Minute); err != nil {
			t.Errorf("Complete(%q): %v", name, err)
		}
		if r, err := s.Claim(ctx, key, "other", 30*time.Second); err != nil || r != idempotency.Done {
			t.Errorf("Claim(%q) after Complete = %v, %v, want Done", name, r, err)
		}
	}
}

// TestFanOutClusterHostileKey is issue 19's fan-out finding through the middleware on the
// cluster: with key "}x", recipient A succeeds on the first delivery and B fails twice; A must
// be sent once in the three deliveries (it was sent on every one when MarkSent failed).
func TestFanOutClusterHostileKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"}x", "{}", "8c1e0c4a-0c9e-4d47-bc0c-2f4d3f1f2a6e"} {
		t.Run(key, func(t *testing.T) {
			store := newRedisCluster(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
			m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
			attempt := 0
			p := newProvider(func(r string) error {
				if r == "device-b" && attempt < 3 {
					return errors.New("provider 503")
				}
				return nil
			})
			h := m.Wrap(fanOutHandler(p, []string{"device-a", "device-b"}))
			for attempt = 1; attempt <= 3; attempt++ {
				err := deliver(h, key, attempt, 5)
				want := millrace.OutcomeRetry
				if attempt == 3 {
					want = millrace.OutcomeSuccess
				}
				if got := outcome(err); got != want {
					t.Fatalf("delivery %d: %v (%v), want %v", attempt, got, err, want)
				}
			}
			delivered, calls := p.snapshot()
			if delivered["device-a"] != 1 || calls["device-a"] != 1 || delivered["device-b"] != 1 || calls["device-b"] != 3 {
				t.Fatalf("delivered %v, calls %v: want device-a sent once in 3 deliveries, device-b called 3 times", delivered, calls)
			}
		})
	}
}

// TestRedisStoreClusterMemory: on the cluster, Memory reads every master (three here), each
// by its address, and CheckEviction passes on the test cluster's noeviction nodes.
func TestRedisStoreClusterMemory(t *testing.T) {
	t.Parallel()
	store := newRedisCluster(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t), Eviction: idempotency.EvictionRefuse})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := store.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.Addr == "" || n.Policy == "" || n.UsedMemory == 0 {
			t.Errorf("node %+v: address, policy and used memory expected", n)
		}
		seen[n.Addr] = true
	}
	if len(seen) != 3 {
		t.Fatalf("Memory read %d distinct masters (%+v), want 3", len(seen), nodes)
	}
	for _, n := range nodes {
		if n.Evicts() {
			t.Skipf("the test cluster's node %s runs %s; CheckEviction would refuse it", n.Addr, n.Policy)
		}
	}
	if err := store.CheckEviction(ctx); err != nil {
		t.Fatal(err)
	}
}
