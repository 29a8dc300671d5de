package idempotency_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// Benchmarks against the local Redis (skipped when it is down). Keys expire within a minute and
// are deleted at cleanup. Run them with:
//
//	go test ./idempotency -run '^$' -bench . -benchtime 2s -count 3

const (
	benchConcurrency = 16
	benchBatch       = 64
	benchLease       = 30 * time.Second
	benchDone        = time.Minute
)

// completeLua is the hand-written baseline's copy of the field report's complete script.
const completeLua = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
return 1`

// runConcurrent runs op with benchConcurrency goroutines in total, each op getting an index
// from seq, which the caller keeps across the benchmark's runs so that keys never repeat.
func runConcurrent(b *testing.B, seq *atomic.Int64, op func(ctx context.Context, i int64) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchConcurrency + procs - 1) / procs)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, seq.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// reportPerMessage adds ns/msg (and msg/s) when one op handles perOp messages.
func reportPerMessage(b *testing.B, perOp int) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N*perOp)
	b.ReportMetric(ns, "ns/msg")
	b.ReportMetric(1e9/ns, "msg/s")
}

// BenchmarkRoundTripsPerMessage reports Redis round trips per message through the middleware
// on the happy path (TestRedisRoundTripsPerMessage asserts the exact 2).
func BenchmarkRoundTripsPerMessage(b *testing.B) {
	store, _, rt := countedRedisStore(b, 4)
	m, err := idempotency.New(idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: benchLease, DoneTTL: benchDone})
	if err != nil {
		b.Fatal(err)
	}
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	i := 0
	for b.Loop() {
		i++
		if _, err := h(message.NewMessage("m"+strconv.Itoa(i), nil)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rt.take()))/float64(i), "roundtrips/msg")
}

// BenchmarkThroughput compares, at concurrency 16 and one message per op: a plain SET, the
// hand-written SET NX PX + EVALSHA pair, the store's Claim+Complete, and the whole middleware.
func BenchmarkThroughput(b *testing.B) {
	store, c := benchRedisStore(b)
	ctx := context.Background()
	sha, err := c.ScriptLoad(ctx, completeLua).Result()
	if err != nil {
		b.Fatal(err)
	}
	pfx := testPrefix(b, c)
	var seq atomic.Int64
	leaseMs, doneMs := benchLease.Milliseconds(), benchDone.Milliseconds()

	b.Run("PlainSET", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			return c.Set(ctx, pfx+"plain:"+strconv.FormatInt(i, 10), "done", benchDone).Err()
		})
		reportPerMessage(b, 1)
	})
	b.Run("HandSETNX+EVALSHA", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			key := pfx + "hand:{" + strconv.FormatInt(i, 10) + "}"
			if err := c.Do(ctx, "set", key, "owner-x", "px", leaseMs, "nx").Err(); err != nil {
				return err
			}
			return c.EvalSha(ctx, sha, []string{key}, "owner-x", doneMs).Err()
		})
		reportPerMessage(b, 1)
	})
	b.Run("ClaimComplete", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			key := "cc" + strconv.FormatInt(i, 10)
			if _, err := store.Claim(ctx, key, "owner-x", benchLease); err != nil {
				return err
			}
			return store.Complete(ctx, key, "owner-x", benchDone)
		})
		reportPerMessage(b, 1)
	})
	b.Run("Middleware", func(b *testing.B) {
		m, err := idempotency.New(idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: benchLease, DoneTTL: benchDone})
		if err != nil {
			b.Fatal(err)
		}
		h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })
		runConcurrent(b, &seq, func(_ context.Context, i int64) error {
			_, err := h(message.NewMessage("mw"+strconv.FormatInt(i, 10), nil))
			return err
		})
		reportPerMessage(b, 1)
	})
}

// BenchmarkBatchClaim compares per-message cost at concurrency 16: plain SET one by one, plain
// SET pipelined in batches of 64, and ClaimBatch (SET NX PX pipelined) in batches of 64.
func BenchmarkBatchClaim(b *testing.B) {
	store, c := benchRedisStore(b)
	pfx := testPrefix(b, c)
	var seq atomic.Int64
	batchKeys := func(i int64, tag string) []string {
		keys := make([]string, benchBatch)
		base := strconv.FormatInt(i, 10) + ":"
		for j := range keys {
			keys[j] = tag + base + strconv.Itoa(j)
		}
		return keys
	}

	b.Run("PlainSET", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			return c.Set(ctx, pfx+"bplain:"+strconv.FormatInt(i, 10), "owner-x", benchLease).Err()
		})
		reportPerMessage(b, 1)
	})
	b.Run("PipelinedSET", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			pipe := c.Pipeline()
			for _, k := range batchKeys(i, pfx+"bpipe:") {
				pipe.Set(ctx, k, "owner-x", benchLease)
			}
			_, err := pipe.Exec(ctx)
			return err
		})
		reportPerMessage(b, benchBatch)
	})
	b.Run("ClaimBatch", func(b *testing.B) {
		runConcurrent(b, &seq, func(ctx context.Context, i int64) error {
			res, err := store.ClaimBatch(ctx, batchKeys(i, "cb"), "owner-x", benchLease)
			if err == nil && res[0] != idempotency.Acquired {
				b.Errorf("ClaimBatch result %s", res[0])
			}
			return err
		})
		reportPerMessage(b, benchBatch)
	})
}

// benchRedisStore returns a Redis store and its client (no hooks), scripts preloaded.
func benchRedisStore(b *testing.B) (*idempotency.RedisStore, *redis.Client) {
	c := testenv.Redis(b, &redis.Options{PoolSize: 2 * benchConcurrency})
	prefix := testenv.Prefix(b)
	testenv.DeleteRedisPrefix(b, c, prefix)
	s, err := idempotency.NewRedisStore(c, idempotency.StoreOptions{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.LoadScripts(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s, c
}

// testPrefix returns a key prefix for raw-client benchmarks, deleted at cleanup.
func testPrefix(b *testing.B, c *redis.Client) string {
	p := testenv.Prefix(b)
	testenv.DeleteRedisPrefix(b, c, p)
	return p
}
