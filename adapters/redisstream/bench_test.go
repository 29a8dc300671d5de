package redisstream

// Benchmarks (not run by go test without -bench), side by side on the same Redis:
//
//	go test -run '^$' -bench 'Consume' -benchtime 30000x -count 5 ./adapters/redisstream/
//	go test -run '^$' -bench 'Reclaim|RecoverPass' -benchtime 3x ./adapters/redisstream/
//	go test -run '^$' -bench 'ConsumeAnchors' -benchtime 1x ./adapters/redisstream/ -redisstream.msgs 20000 -redisstream.rounds 7
//
// One op of BenchmarkConsume is one message; one op of BenchmarkReclaim is a whole scenario;
// one op of BenchmarkConsumeAnchors is every round of it (run it with -benchtime 1x).

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/benchround"
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
	// This adapter's subscriber behind the same plain router: the cost of the subscriber alone.
	b.Run("redisstream-subscriber-plain-router", func(b *testing.B) {
		a := benchAdapter(b, Config{})
		stream := uniqueStream(b)
		fillStream(b, a, stream, b.N)
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		done := make(chan struct{})
		r.AddConsumerHandler("bench", stream, a.Subscriber(), func(*message.Message) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		})
		runAndWait(b, r.Run, r.Close, done)
	})
	// This adapter's subscriber with no router at all: a goroutine per message acks it, as a
	// router's per-message goroutine would. Its cost is the adapter's alone (reads, decoding,
	// hand-out, ack tracking, batched XACKs); the gap to redisstream-subscriber-plain-router is
	// the Watermill router's, and from there to millrace-window-64 the millrace stack's.
	b.Run("redisstream-subscriber-bare", func(b *testing.B) {
		a := benchAdapter(b, Config{})
		stream := uniqueStream(b)
		fillStream(b, a, stream, b.N)
		sub := a.Subscriber()
		var n atomic.Int64
		done := make(chan struct{})
		consume := func(ctx context.Context) error {
			msgs, err := sub.Subscribe(ctx, stream)
			if err != nil {
				return err
			}
			for m := range msgs {
				go func() {
					if n.Add(1) == int64(b.N) {
						close(done)
					}
					m.Ack()
				}()
			}
			return nil
		}
		runAndWait(b, consume, sub.Close, done)
	})
	for _, v := range []struct {
		window int
		budget time.Duration
	}{{1, 10 * time.Second}, {DefaultWindow, 10 * time.Second}, {128, 10 * time.Second}, {DefaultWindow, 0}} {
		name := fmt.Sprintf("millrace-window-%d", v.window)
		if v.budget == 0 {
			name += "-no-budget" // the Budget middleware's per-message timer is not the adapter's cost
		}
		b.Run(name, func(b *testing.B) {
			a := benchAdapter(b, Config{Window: v.window})
			stream := uniqueStream(b)
			fillStream(b, a, stream, b.N)
			r, err := router.New(router.Config{Adapter: a, Policy: fixed(3, time.Minute), Budget: v.budget, Logger: quiet})
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
	// allocs/msg is testing's allocs/op without its rounding down to a whole number: issue 16
	// counts allocations per message to the tenth.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
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
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/msg")
	_ = closeFn()
	<-errs
}

// BenchmarkReclaim measures the reclaimer with per-entry backoff: a PEL of `pending` entries
// taken by a consumer, of which `due` are due and the others are not. One op is one whole
// scenario: a fresh subscription claims and hands out every due entry (a consumer acks each at
// once); the metric is due entries per second. Two sources:
//   - retry: every entry failed and was scheduled through the retry schedule, as ScheduleRetry
//     does; `due` of them are past their due time, the others due in an hour.
//   - recover: the consumer died holding them all; `due` have been idle past the policy delay of
//     their delivery count, the others were delivered just now.
//
// Two PEL sizes with the same number of due entries show what the cost follows.
func BenchmarkReclaim(b *testing.B) {
	for _, sc := range []struct {
		source               string
		pending, due, window int
	}{
		{"retry", 100_000, 10_000, DefaultWindow},
		{"retry", 100_000, 10_000, 1000},
		{"retry", 300_000, 10_000, 1000},
		{"recover", 100_000, 10_000, 1000},
		{"recover", 300_000, 10_000, 1000},
	} {
		b.Run(fmt.Sprintf("%s-pending-%d-due-%d-window-%d", sc.source, sc.pending, sc.due, sc.window), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += reclaimScenario(b, sc.source, sc.pending, sc.due, sc.window)
			}
			b.ReportMetric(float64(sc.due*b.N)/total.Seconds(), "due/s")
		})
	}
}

// pendingStream fills a stream with n entries, has consumer "dead" read them all and returns
// their IDs; the adapter is provisioned with a 1 h fixed delay.
func pendingStream(b *testing.B, a *Adapter, c *redis.Client, n int) (string, []string) {
	b.Helper()
	ctx := context.Background()
	stream := uniqueStream(b)
	if err := a.Provision(ctx, stream, fixed(3, time.Hour)); err != nil {
		b.Fatal(err)
	}
	fillStream(b, a, stream, n)
	ids := make([]string, 0, n)
	for len(ids) < n {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: a.cfg.Group, Consumer: "dead", Streams: []string{stream, ">"}, Count: 10_000, Block: -1}).Result()
		if err != nil {
			b.Fatalf("XREADGROUP: %v", err)
		}
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
	}
	return stream, ids
}

// reclaimScenario builds the PEL (not timed) and returns how long the reclaim took.
func reclaimScenario(b *testing.B, source string, pending, due, window int) time.Duration {
	b.StopTimer()
	ctx := context.Background()
	cfg := Config{Window: window, ReclaimInterval: 50 * time.Millisecond, ProcessingBudget: time.Second}
	a := benchAdapter(b, cfg)
	c := testClient(b)
	stream, ids := pendingStream(b, a, c, pending)
	step := pending / due
	pipe := c.Pipeline()
	switch source {
	case "retry":
		now := time.Now()
		zs := make([]redis.Z, 0, pending)
		for i, id := range ids {
			at := now.Add(time.Hour)
			if i%step == 0 {
				at = now.Add(-time.Second)
			}
			zs = append(zs, redis.Z{Score: float64(at.UnixMilli()), Member: id})
		}
		for i := 0; i < len(zs); i += 10_000 {
			pipe.ZAdd(ctx, a.retryKey(stream), zs[i:min(i+10_000, len(zs))]...)
		}
	case "recover":
		for i := 0; i < pending; i += step {
			pipe.Do(ctx, "XCLAIM", stream, a.cfg.Group, "dead", 0, ids[i], "IDLE", (2 * time.Hour).Milliseconds(), "JUSTID")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatalf("prepare %s: %v", source, err)
	}
	b.Cleanup(func() { c.Del(context.Background(), a.retryKey(stream)) })

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

// BenchmarkReclaimTick measures one lookup of due retries when none is due, with every entry of
// a PEL of each size scheduled for later: the cost of a reclaim tick. One op is one lookup.
func BenchmarkReclaimTick(b *testing.B) {
	for _, pending := range []int{10_000, 100_000, 300_000} {
		b.Run(fmt.Sprintf("pending-%d", pending), func(b *testing.B) {
			a := benchAdapter(b, Config{ProcessingBudget: time.Hour})
			c := testClient(b)
			stream, ids := pendingStream(b, a, c, pending)
			later := float64(time.Now().Add(time.Hour).UnixMilli())
			zs := make([]redis.Z, len(ids))
			for i, id := range ids {
				zs[i] = redis.Z{Score: later, Member: id}
			}
			for i := 0; i < len(zs); i += 10_000 {
				c.ZAdd(context.Background(), a.retryKey(stream), zs[i:min(i+10_000, len(zs))]...)
			}
			b.Cleanup(func() { c.Del(context.Background(), a.retryKey(stream)) })
			s := newSubscription(context.Background(), a, stream, false)
			b.ResetTimer()
			for range b.N {
				if n := s.claimDue(1000); n != 0 {
					b.Fatalf("claimed %d entries, none is due", n)
				}
			}
		})
	}
}

// BenchmarkRecoverPass measures one recovery pass when nothing needs recovering (every entry in
// flight): one XPENDING IDLE call that returns nothing, while Redis walks the PEL on its side.
// Recovery runs every RecoverInterval (MinIdle/4 by default), not every tick. One op is one pass.
func BenchmarkRecoverPass(b *testing.B) {
	for _, pending := range []int{10_000, 100_000, 300_000} {
		b.Run(fmt.Sprintf("pending-%d", pending), func(b *testing.B) {
			a := benchAdapter(b, Config{ProcessingBudget: time.Hour})
			c := testClient(b)
			stream, _ := pendingStream(b, a, c, pending)
			s := newSubscription(context.Background(), a, stream, false)
			b.ResetTimer()
			for range b.N {
				s.cursor = "-"
				if n := s.recoverStale(1000); n != 0 || s.moreStale {
					b.Fatalf("recovered %d entries, none is stale", n)
				}
			}
		})
	}
}

var (
	anchorMsgs   = flag.Int("redisstream.msgs", 20000, "BenchmarkConsumeAnchors: messages each variant consumes per round")
	anchorRounds = flag.Int("redisstream.rounds", 5, "BenchmarkConsumeAnchors: interleaved rounds")
)

// BenchmarkConsumeAnchors compares, in interleaved rounds (benchround), the happy path of four
// consumers of -redisstream.msgs messages each, every one on a stream of its own filled before
// its turn (the fill is not timed) and deleted after it:
//   - millrace: the millrace router on this adapter (Window 64, Budget 10 s);
//   - watermill-redisstream: its subscriber behind a plain Watermill router (its defaults);
//   - raw: a go-redis loop, XREADGROUP COUNT 100 then one XACK of the batch, one goroutine;
//   - stack-on-workers: a ceiling, see stackOnWorkers.
//
// The figure is msg/s from the consumer's start until its last message was handled; the
// ratios are millrace's over each anchor's, and the ceiling's over raw, round by round.
func BenchmarkConsumeAnchors(b *testing.B) {
	n := max(*anchorMsgs, 1)
	a := benchAdapter(b, Config{})
	c := testClient(b)
	// round prepares a filled stream (untimed), runs consume on it and drops it again.
	round := func(consume func(b *testing.B, stream string) float64) func(b *testing.B) float64 {
		return func(b *testing.B) float64 {
			b.StopTimer()
			stream := uniqueStream(b)
			fillStream(b, a, stream, n)
			b.StartTimer()
			rate := consume(b, stream)
			b.StopTimer()
			c.Del(context.Background(), stream, a.retryKey(stream))
			b.StartTimer()
			return rate
		}
	}
	millraceV := func(b *testing.B, stream string) float64 {
		r, err := router.New(router.Config{Adapter: a, Policy: fixed(3, time.Minute), Budget: 10 * time.Second, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		count, done := countTo(n)
		r.Handle("bench", stream, func(context.Context, *message.Message, millrace.Attempt) error {
			count()
			return nil
		})
		return timeUntil(b, n, r.Run, r.Close, done)
	}
	watermillV := func(b *testing.B, stream string) float64 {
		client := redis.NewClient(mustParseURL(b))
		defer func() { _ = client.Close() }()
		sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{Client: client, ConsumerGroup: "bench-wm"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		count, done := countTo(n)
		r.AddConsumerHandler("bench", stream, sub, func(*message.Message) error {
			count()
			return nil
		})
		return timeUntil(b, n, r.Run, r.Close, done)
	}
	rawV := func(b *testing.B, stream string) float64 {
		ctx := context.Background()
		if err := c.XGroupCreateMkStream(ctx, stream, "bench-raw", "0").Err(); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for got := 0; got < n; {
			res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "bench-raw", Consumer: "raw",
				Streams: []string{stream, ">"}, Count: 100, Block: time.Second}).Result()
			if err != nil {
				b.Fatalf("XREADGROUP: %v", err)
			}
			ids := make([]string, 0, 100)
			for _, m := range res[0].Messages {
				ids = append(ids, m.ID)
			}
			if err := c.XAck(ctx, stream, "bench-raw", ids...).Err(); err != nil {
				b.Fatalf("XACK: %v", err)
			}
			got += len(ids)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	res := benchround.Interleave(b, *anchorRounds,
		benchround.Variant{Name: "millrace", Run: round(millraceV)},
		benchround.Variant{Name: "watermill-redisstream", Run: round(watermillV)},
		benchround.Variant{Name: "raw", Run: round(rawV)},
		benchround.Variant{Name: "stack-on-workers", Run: round(func(b *testing.B, stream string) float64 {
			return stackOnWorkers(b, a, stream, n)
		})},
	)
	benchround.Report(b, res, "msg/s",
		benchround.Pair{A: "millrace", B: "raw", Target: ">= 0.5"},
		benchround.Pair{A: "millrace", B: "watermill-redisstream", Target: "> 1"},
		benchround.Pair{A: "stack-on-workers", B: "raw"},
		benchround.Pair{A: "millrace", B: "stack-on-workers"})
}

// stackOnWorkers is BenchmarkConsumeAnchors' "stack-on-workers" contender, a ceiling and not a
// configuration millrace offers: millrace's middleware stack (router.Stack, the same settings
// as the millrace contender) run by Window long-lived goroutines that read the subscription's
// channel and settle each message themselves, with no Watermill router. It is what a consumer
// without Watermill's three hand-offs per message (its subscriber decorator's goroutine, its
// handler loop, a fresh goroutine per message whose stack grows under the middleware) would
// reach. Like the millrace contender's, its clock starts before Provision and Subscribe.
//
// Each message is settled as router/settle.go does: with the verdict the message keeps (the
// stack may nack and return nil, as Retry does when the adapter asks for it). A panic is not
// recovered here as settle recovers it: it ends the benchmark.
func stackOnWorkers(b *testing.B, a *Adapter, stream string, n int) float64 {
	cfg := router.Config{Adapter: a, Policy: fixed(3, time.Minute), Budget: 10 * time.Second, Logger: quiet}
	stack, err := router.Stack(cfg)
	if err != nil {
		b.Fatal(err)
	}
	count, done := countTo(n)
	var h message.HandlerFunc = func(*message.Message) ([]*message.Message, error) {
		count()
		return nil, nil
	}
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i](h)
	}
	start := time.Now()
	if err := a.Provision(context.Background(), stream, cfg.Policy); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sub := a.Subscriber()
	var wg sync.WaitGroup
	defer func() { // also after b.Fatalf: the workers end once the subscription closes its channel
		cancel()
		_ = sub.Close()
		wg.Wait()
	}()
	// The promise millrace's router gives: every message is settled (see router/settle.go).
	subCtx, end := millrace.WithRouterSettles(ctx)
	msgs, err := sub.Subscribe(subCtx, stream)
	end()
	if err != nil {
		b.Fatal(err)
	}
	for range a.cfg.Window {
		wg.Go(func() {
			for msg := range msgs {
				if _, err := h(msg); err != nil {
					msg.Nack()
				} else {
					msg.Ack() // no-op if the stack nacked it
				}
				acked := false
				select {
				case <-msg.Acked():
					acked = true
				default:
				}
				if s := millrace.SettlerFrom(msg.Context()); s != nil {
					s.Settle(msg, acked)
				}
			}
		})
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("stack-on-workers: not every message handled after a minute")
	}
	return float64(n) / time.Since(start).Seconds()
}

// countTo returns a handler's counter and the channel closed when it reaches want.
func countTo(want int) (func(), chan struct{}) {
	var n atomic.Int64
	done := make(chan struct{})
	return func() {
		if n.Add(1) == int64(want) {
			close(done)
		}
	}, done
}

// timeUntil runs a router until done closes and returns n messages over the time from its
// start, then closes it.
func timeUntil(b *testing.B, n int, run func(context.Context) error, closeFn func() error, done chan struct{}) float64 {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	start := time.Now()
	go func() { errs <- run(ctx) }()
	select {
	case <-done:
	case err := <-errs:
		b.Fatalf("router stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("timed out")
	}
	rate := float64(n) / time.Since(start).Seconds()
	b.StopTimer()
	_ = closeFn()
	<-errs
	b.StartTimer()
	return rate
}
