package redisstream

// Benchmarks, run side by side on the same Redis with one command:
//
//	go test -run '^$' -bench . -benchtime 20000x ./adapters/redisstream/
//
// (BenchmarkReclaim ignores b.N beyond repeating its scenario; -benchtime 20000x runs it
// 20000 times only if you let it: use -bench 'Consume' and -bench 'Reclaim' with -benchtime 3x
// for the latter, as in the package README.)

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

var quiet = slog.New(slog.DiscardHandler)

// fillStream appends n watermill-format messages to stream, pipelined.
func fillStream(b *testing.B, a *Adapter, stream string, n int) {
	b.Helper()
	const chunk = 5000
	for i := 0; i < n; i += chunk {
		msgs := make([]*message.Message, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			m := message.NewMessage(strconv.Itoa(j), []byte(`{"user":"u-1","event":"subscription.renewed"}`))
			m.Metadata.Set("tenant", "acme")
			msgs = append(msgs, m)
		}
		if err := a.Publisher().Publish(stream, msgs...); err != nil {
			b.Fatalf("publish: %v", err)
		}
	}
}

func benchAdapter(b *testing.B, cfg Config) *Adapter {
	b.Helper()
	cfg.URL = redisURL()
	if cfg.Group == "" {
		cfg.Group = "bench"
	}
	cfg.Logger = quiet
	return newTestAdapter(b, cfg)
}

// BenchmarkConsume compares the happy path (handler returns nil) of the bare
// watermill-redisstream subscriber behind a plain Watermill router with this adapter behind the
// full millrace stack, on the same Redis. One op is one message consumed and acknowledged.
func BenchmarkConsume(b *testing.B) {
	b.Run("watermill-redisstream", func(b *testing.B) {
		a := benchAdapter(b, Config{}) // publisher and clean-up only
		stream := uniqueStream(b)
		fillStream(b, a, stream, b.N)
		client := redis.NewClient(mustParseURL(b))
		sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{Client: client, ConsumerGroup: "bench-wm"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		a.mu.Lock()
		a.groups[stream] = struct{}{} // delete the stream at the end
		a.mu.Unlock()
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(quiet)) // as millrace's router logs
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		done := make(chan struct{})
		r.AddConsumerHandler("bench", stream, sub, func(*message.Message) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		})
		runAndWait(b, r.Run, r.Close, done)
	})
	for _, window := range []int{1, DefaultWindow, 128} {
		b.Run(fmt.Sprintf("millrace-window-%d", window), func(b *testing.B) {
			a := benchAdapter(b, Config{Window: window})
			stream := uniqueStream(b)
			fillStream(b, a, stream, b.N)
			r, err := router.New(router.Config{Adapter: a, Policy: fixed(3, time.Minute), Budget: 10 * time.Second, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			done := make(chan struct{})
			r.Handle("bench", stream, func(context.Context, *message.Message, millrace.Attempt) error {
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			runAndWait(b, r.Run, r.Close, done)
		})
	}
}

func mustParseURL(b *testing.B) *redis.Options {
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		b.Fatal(err)
	}
	testClient(b)
	return opts
}

// runAndWait times run from its start until done closes, then closes the router.
func runAndWait(b *testing.B, run func(context.Context) error, closeFn func() error, done chan struct{}) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	errs := make(chan error, 1)
	go func() { errs <- run(ctx) }()
	select {
	case <-done:
	case err := <-errs:
		b.Fatalf("router stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("timed out")
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	_ = closeFn()
	<-errs
}

// BenchmarkReclaim measures the reclaimer with per-entry backoff: a PEL of `pending` entries
// held by a dead consumer, of which `due` have been idle past the policy delay of their
// delivery count and the rest have not. One op is one whole scenario: a fresh subscription
// claims and hands out every due entry (a consumer acks each at once); the metric is due
// entries per second. Two PEL sizes with the same number of due entries show that the cost
// follows the due entries, not the PEL.
func BenchmarkReclaim(b *testing.B) {
	for _, sc := range []struct{ pending, due, window int }{
		{100_000, 10_000, DefaultWindow},
		{100_000, 10_000, 1000},
		{300_000, 10_000, 1000},
	} {
		b.Run(fmt.Sprintf("pending-%d-due-%d-window-%d", sc.pending, sc.due, sc.window), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += reclaimScenario(b, sc.pending, sc.due, sc.window)
			}
			b.ReportMetric(float64(sc.due*b.N)/total.Seconds(), "due/s")
		})
	}
}

// reclaimScenario builds the PEL (not timed) and returns how long the reclaim took.
func reclaimScenario(b *testing.B, pending, due, window int) time.Duration {
	b.StopTimer()
	ctx := context.Background()
	cfg := Config{Window: window, ReclaimBatch: 1000, ReclaimInterval: 50 * time.Millisecond, ProcessingBudget: time.Second}
	a := benchAdapter(b, cfg)
	c := testClient(b)
	stream := uniqueStream(b)
	if err := a.ensureGroup(ctx, stream); err != nil {
		b.Fatal(err)
	}
	fillStream(b, a, stream, pending)
	// A consumer takes everything and dies.
	var ids []string
	for len(ids) < pending {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: cfg.groupOr("bench"), Consumer: "dead", Streams: []string{stream, ">"}, Count: 10_000, Block: -1}).Result()
		if err != nil {
			b.Fatalf("XREADGROUP: %v", err)
		}
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
	}
	// Policy delay 1 h: only the entries aged past it (every pending/due-th) are due.
	policy := fixed(3, time.Hour)
	if err := a.Provision(ctx, stream, policy); err != nil {
		b.Fatal(err)
	}
	step := pending / due
	pipe := c.Pipeline()
	for i := 0; i < pending; i += step {
		pipe.Do(ctx, "XCLAIM", stream, "bench", "dead", 0, ids[i], "IDLE", (2 * time.Hour).Milliseconds(), "JUSTID")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatalf("age entries: %v", err)
	}

	sub := a.Subscriber()
	defer sub.Close()
	b.StartTimer()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < due; n++ {
		m := <-ch
		if at := a.DecodeAttempt(m); at.Number != 2 {
			b.Fatalf("reclaimed entry %s with attempt %d, want 2", m.UUID, at.Number)
		}
		m.Ack()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if got := a.Stats().Reclaimed; got != uint64(due) {
		b.Fatalf("reclaimed %d, want %d", got, due)
	}
	return elapsed
}

func (c Config) groupOr(def string) string {
	if c.Group == "" {
		return def
	}
	return c.Group
}
