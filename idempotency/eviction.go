package idempotency

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrEvictingStore is wrapped by CheckEviction's error, with StoreOptions.Eviction set to
// EvictionRefuse, when a Redis node may evict the store's records before their time.
var ErrEvictingStore = errors.New("idempotency: the Redis server may evict leases and done markers early")

// EvictionMode says what RedisStore.CheckEviction does when a node may evict records early.
type EvictionMode uint8

const (
	// EvictionWarn (the default) logs a warning naming the node, its policy and what it costs.
	EvictionWarn EvictionMode = iota
	// EvictionRefuse returns an error wrapping ErrEvictingStore: the router does not start.
	EvictionRefuse
	// EvictionIgnore checks nothing.
	EvictionIgnore
)

// NodeMemory is what a Redis node reports of its memory, from INFO memory and INFO stats.
type NodeMemory struct {
	// Addr is the node's address ("" for a failover client: the master it reaches).
	Addr string
	// Policy is maxmemory_policy, e.g. "noeviction" or "allkeys-lru".
	Policy string
	// MaxMemory is maxmemory in bytes; 0 = no limit.
	MaxMemory uint64
	// UsedMemory is used_memory in bytes.
	UsedMemory uint64
	// EvictedKeys is evicted_keys: keys the node has evicted since it started (or since
	// CONFIG RESETSTAT). Any rise while the store is in use may be a lease or a done marker
	// gone early: a duplicate run.
	EvictedKeys uint64
}

// Evicts reports whether the node's policy lets it evict the store's records before their
// TTL: every policy but noeviction. allkeys-* policies evict any key; volatile-* policies evict
// keys that have a TTL, and every record of the store has one (the lease's PX, the done
// marker's DoneTTL, the fan-out set's SentTTL). Under noeviction a full node refuses writes
// instead: claims fail, and the middleware fails closed (or open, when configured).
func (n NodeMemory) Evicts() bool { return n.Policy != "noeviction" }

// Memory reads every node the store writes to (each master of a Redis Cluster, each shard of
// a Ring, else the client's server): policy, limits, use and evictions.
func (s *RedisStore) Memory(ctx context.Context) ([]NodeMemory, error) {
	var (
		mu    sync.Mutex
		nodes []NodeMemory
	)
	read := func(ctx context.Context, c redis.Cmdable, addr string) error {
		n, err := nodeMemory(ctx, c)
		if err != nil {
			return fmt.Errorf("idempotency: read memory of Redis node %s: %w", addr, err)
		}
		n.Addr = addr
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return read(ctx, n, n.Options().Addr) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return read(ctx, n, n.Options().Addr) })
	case *redis.Client:
		err = read(ctx, c, c.Options().Addr)
	default: // a failover client: the master it is connected to
		err = read(ctx, s.client, "")
	}
	return nodes, err
}

// CheckEviction reads every node's maxmemory-policy (Memory) and, where a node may evict the
// store's records early (NodeMemory.Evicts), does what StoreOptions.Eviction says: warn (the
// default), refuse, or nothing. An evicted lease lets a second consumer run a message that is
// still running; an evicted done marker lets a redelivery run a finished message again: both
// are duplicate sends. Field report 3: watch evicted_keys and used_memory, and run the lease
// store under noeviction. The router calls it at Run through ForRouter's guard; a store used
// by hand should be checked once at start-up. A node that cannot be read (an ACL without INFO,
// a node down) is an error with EvictionRefuse and a warning with EvictionWarn: the policy
// cannot be known, and a start-up that fails on it would make the lease store's INFO access a
// dependency of every consumer.
func (s *RedisStore) CheckEviction(ctx context.Context) error {
	if s.opts.Eviction == EvictionIgnore {
		return nil
	}
	nodes, err := s.Memory(ctx)
	if err != nil {
		if s.opts.Eviction == EvictionRefuse {
			return err
		}
		s.opts.Logger.Warn("idempotency: could not read the lease store's maxmemory-policy; leases and done markers may be evicted early if it is not noeviction",
			"error", err)
	}
	var refused []error
	for _, n := range nodes {
		if !n.Evicts() {
			continue
		}
		what := fmt.Sprintf("Redis node %s has maxmemory-policy %s (maxmemory %d bytes, %d keys evicted so far): "+
			"it may evict leases and done markers before their TTL, and a message whose record is evicted runs again (a duplicate); "+
			"use noeviction for the lease store", orClient(n.Addr), n.Policy, n.MaxMemory, n.EvictedKeys)
		if s.opts.Eviction == EvictionRefuse {
			refused = append(refused, fmt.Errorf("%w: %s (StoreOptions.Eviction is EvictionRefuse)", ErrEvictingStore, what))
			continue
		}
		s.opts.Logger.Warn("idempotency: "+what, "node", orClient(n.Addr), "maxmemory_policy", n.Policy,
			"maxmemory", n.MaxMemory, "evicted_keys", n.EvictedKeys)
	}
	return errors.Join(refused...)
}

func orClient(addr string) string {
	if addr == "" {
		return "(the client's)"
	}
	return addr
}

// maxInfoBytes bounds the INFO replies parsed: a real reply of these sections is a few KiB.
const maxInfoBytes = 1 << 20

// nodeMemory reads one node's INFO memory and INFO stats (two commands: INFO with several
// sections needs Redis 7). Everything in the replies is untrusted: a field that is missing or
// does not parse is an error, not a zero.
func nodeMemory(ctx context.Context, c redis.Cmdable) (NodeMemory, error) {
	mem, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return NodeMemory{}, err
	}
	stats, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return NodeMemory{}, err
	}
	return parseNodeMemory(mem, stats)
}

// parseNodeMemory reads the fields of NodeMemory from the two INFO replies.
func parseNodeMemory(mem, stats string) (NodeMemory, error) {
	f := infoFields(mem)
	for k, v := range infoFields(stats) {
		f[k] = v
	}
	var n NodeMemory
	var ok bool
	if n.Policy, ok = f["maxmemory_policy"]; !ok || n.Policy == "" {
		return NodeMemory{}, errors.New("INFO memory has no maxmemory_policy")
	}
	for name, dst := range map[string]*uint64{"maxmemory": &n.MaxMemory, "used_memory": &n.UsedMemory, "evicted_keys": &n.EvictedKeys} {
		v, err := strconv.ParseUint(f[name], 10, 64)
		if err != nil {
			return NodeMemory{}, fmt.Errorf("INFO field %s: %q is not a count", name, truncate(f[name], 32))
		}
		*dst = v
	}
	return n, nil
}

// infoFields parses the "name:value" lines of an INFO reply, at most maxInfoBytes of it.
func infoFields(reply string) map[string]string {
	if len(reply) > maxInfoBytes {
		reply = reply[:maxInfoBytes]
	}
	f := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(reply))
	sc.Buffer(make([]byte, 0, 4096), maxInfoBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[k] = v
		}
	}
	return f
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
