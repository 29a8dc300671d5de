package nats

// Benchmarks (not run by go test without -bench), side by side on the same server:
//
//	go test -run '^$' -bench 'Consume' -benchtime 20000x -count 3 ./adapters/nats/
//
// One op is one message consumed and acknowledged (the handler returns nil).
//
// BenchmarkConsumeAnchors runs four consumers of b.N messages each, in rounds interleaved
// A, B, C, D, A, B, C, D (-nats.rounds rounds, 3 by default; internal/benchround), each on a
// stream of its own filled before its turn: the millrace router on this adapter (Window 64);
// a raw jetstream loop (Messages with PullMaxMessages(64), Ack per message); watermill-nats's JetStream
// subscriber (pkg/jetstream, AckAsync, PullMaxMessages(64)) read in a loop that acks every
// message; and that subscriber behind a plain Watermill router. All four read the same
// durable consumer configuration. It prints, as benchround lines, each variant's msg/s and
// the per-round ratios millrace / each other variant (same round, seconds apart), each as
// min / median / max, and reports the medians; go test's first run with b.N = 1 measures
// nothing. `go run ./tools/bench -only nats` runs it with the other ratio benchmarks:
//
//	go test -run '^$' -bench 'ConsumeAnchors' -benchtime 20000x -count 1 ./adapters/nats/ -nats.rounds 7
//
// BenchmarkConsume runs the other variants once per benchmark run: the raw loop, this
// adapter's subscriber behind a plain Watermill router (Window 64), and the millrace router
// with Window 64 and Window 1.

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/benchround"
	"github.com/millrace/millrace/router"
)

var benchRounds = flag.Int("nats.rounds", 3, "BenchmarkConsumeAnchors: interleaved rounds per benchmark run")

var quiet = slog.New(slog.DiscardHandler)

// fillSubject publishes n messages to subject with asynchronous publishes (fillChunk at a
// time), waiting for every PubAck.
func fillSubject(b *testing.B, a *Adapter, subject string, n int) {
	b.Helper()
	if err := a.ensureStream(context.Background(), subject); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		m, err := natsMsg(subject, func() *message.Message {
			msg := message.NewMessage(strconv.Itoa(i), []byte(`{"user":"u-1","event":"subscription.renewed"}`))
			msg.Metadata.Set("tenant", "acme")
			return msg
		}())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		if (i+1)%fillChunk == 0 || i == n-1 { // see fill: never near nats.go's async limit
			select {
			case <-a.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publishes not acknowledged within a minute")
			}
		}
	}
}

// dropSubject deletes the streams of subject (and of its dead-letter subject) after its run,
// so that the server holds one filled stream at a time.
func dropSubject(a *Adapter, subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.js.DeleteStream(ctx, a.cfg.StreamName(subject))
	_ = a.js.DeleteStream(ctx, a.cfg.StreamName(a.DeadLetterTopic(subject)))
	a.mu.Lock()
	delete(a.streams, subject)
	a.mu.Unlock()
}

func benchAdapter(b *testing.B, window int) *Adapter {
	b.Helper()
	cfg := testConfig()
	cfg.Durable, cfg.Window, cfg.Logger = "bench", window, quiet
	return newTestAdapter(b, cfg)
}

// runUntil runs r until n reaches want (done is closed then) and returns the messages per
// second from the start of r.Run.
func runUntil(b *testing.B, r interface {
	Run(context.Context) error
	Close() error
}, n *atomic.Int64, want int, done chan struct{}) float64 {
	b.Helper()
	start := time.Now()
	go func() { _ = r.Run(context.Background()) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d messages consumed in 5 minutes", n.Load(), want)
	}
	rate := float64(want) / time.Since(start).Seconds()
	_ = r.Close()
	return rate
}

// countTo returns a handler count and the channel closed when it reaches want.
func countTo(want int) (*atomic.Int64, chan struct{}, func()) {
	var n atomic.Int64
	done := make(chan struct{})
	return &n, done, func() {
		if n.Add(1) == int64(want) {
			close(done)
		}
	}
}

// consumeRaw consumes n messages of subject with a raw jetstream loop on the adapter's
// durable consumer: Messages(PullMaxMessages(64)), Ack per message. It returns msg/s.
func consumeRaw(b *testing.B, a *Adapter, subject string, n int) float64 {
	b.Helper()
	cons, err := a.ensureConsumer(context.Background(), subject)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		b.Fatal(err)
	}
	missed := 0
	for i := 0; i < n; {
		m, err := it.Next()
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			// Not terminal: the iterator pulls again. The consumption stalled for two
			// heartbeat intervals (the pull-stall of README.md), which the rate includes.
			missed++
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		_ = m.Ack()
		i++
	}
	rate := float64(n) / time.Since(start).Seconds()
	it.Stop()
	if missed > 0 {
		b.Logf("raw jetstream loop: %d missed heartbeats (ErrNoHeartbeat) while consuming %d messages at %.0f msg/s", missed, n, rate)
	}
	return rate
}

// consumeMillrace consumes n messages of subject with the millrace router on a (its Window).
func consumeMillrace(b *testing.B, a *Adapter, subject string, n int) float64 {
	b.Helper()
	r, err := router.New(router.Config{Adapter: a, Logger: quiet,
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}})
	if err != nil {
		b.Fatal(err)
	}
	count, done, inc := countTo(n)
	r.Handle("bench", subject, func(context.Context, *message.Message, millrace.Attempt) error {
		inc()
		return nil
	})
	return runUntil(b, r, count, n, done)
}

// consumeWatermillNATS consumes n messages of subject with watermill-nats's JetStream
// subscriber (watermillNATSSubscriber), reading its channel in a loop that acks every message.
// It returns msg/s.
func consumeWatermillNATS(b *testing.B, a *Adapter, subject string, n int) float64 {
	b.Helper()
	sub := watermillNATSSubscriber(b, a, subject)
	defer func() { _ = sub.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, subject)
	if err != nil {
		b.Fatal(err)
	}
	timeout := time.After(5 * time.Minute)
	for i := range n {
		select {
		case m, ok := <-ch:
			if !ok {
				b.Fatalf("watermill-nats: the channel closed after %d of %d messages", i, n)
			}
			m.Ack()
		case <-timeout:
			b.Fatalf("watermill-nats: only %d of %d messages consumed in 5 minutes", i, n)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// watermillNATSSubscriber is watermill-nats's JetStream subscriber on the adapter's durable
// consumer of subject (the same configuration as the raw loop's), on a connection of its own
// (its Close drains the connection): AckAsync (an ack is not confirmed, as this adapter's and
// the raw loop's), PullMaxMessages(64).
func watermillNATSSubscriber(b *testing.B, a *Adapter, subject string) *wmjs.Subscriber {
	b.Helper()
	if _, err := a.ensureConsumer(context.Background(), subject); err != nil {
		b.Fatal(err)
	}
	stream := a.cfg.StreamName(subject)
	sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
		URL:    natsURL(),
		Logger: watermill.NopLogger{},
		ResourceInitializer: func(ctx context.Context, js jetstream.JetStream, _ string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
			c, err := js.Consumer(ctx, stream, a.cfg.Durable)
			return c, nil, err
		},
		ConsumeOptions: []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(64)},
		AckAsync:       true,
	})
	if err != nil {
		b.Fatal(err)
	}
	return sub
}

// consumeWatermillNATSRouter consumes n messages of subject with watermill-nats's JetStream
// subscriber behind a plain Watermill router whose handler returns nil. It returns msg/s.
func consumeWatermillNATSRouter(b *testing.B, a *Adapter, subject string, n int) float64 {
	b.Helper()
	sub := watermillNATSSubscriber(b, a, subject)
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	count, done, inc := countTo(n)
	r.AddConsumerHandler("bench", subject, sub, func(*message.Message) error {
		inc()
		return nil
	})
	return runUntil(b, r, count, n, done)
}

// BenchmarkConsumeAnchors compares the millrace router (Window 64) with a raw jetstream loop
// and with watermill-nats's JetStream subscriber, in rounds interleaved by benchround (see the
// file comment). Every variant's run consumes b.N messages from a stream of its own, filled
// before its turn with the timer stopped. It prints benchround lines (msg/s per variant, and
// the per-round ratios millrace / each other variant; target: ahead of watermill-nats behind a
// Watermill router), which `go run ./tools/bench` collects. go test's probe run (b.N = 1)
// measures and reports nothing.
func BenchmarkConsumeAnchors(b *testing.B) {
	if b.N == 1 {
		return // go test's probe run: its rates would mean nothing
	}
	a := benchAdapter(b, 64)
	variant := func(name string, consume func(b *testing.B, a *Adapter, subject string, n int) float64) benchround.Variant {
		return benchround.Variant{Name: name, Run: func(b *testing.B) float64 {
			b.StopTimer()
			subject := uniqueSubject(b)
			fillSubject(b, a, subject, b.N)
			b.StartTimer()
			rate := consume(b, a, subject, b.N)
			b.StopTimer()
			dropSubject(a, subject)
			return rate
		}}
	}
	r := benchround.Interleave(b, *benchRounds,
		variant("millrace", consumeMillrace),
		variant("raw-jetstream", consumeRaw),
		variant("watermill-nats", consumeWatermillNATS),
		variant("watermill-nats-router", consumeWatermillNATSRouter),
	)
	benchround.Report(b, r, "msg/s",
		benchround.Pair{A: "millrace", B: "raw-jetstream"},
		benchround.Pair{A: "millrace", B: "watermill-nats"},
		benchround.Pair{A: "millrace", B: "watermill-nats-router", Target: "> 1"},
	)
}

// BenchmarkConsume runs the raw jetstream loop, this adapter's subscriber behind a plain
// Watermill router and behind the full millrace stack (Window 64 and 1), one after another.
func BenchmarkConsume(b *testing.B) {
	b.Run("raw-jetstream-loop", func(b *testing.B) {
		a := benchAdapter(b, 64)
		subject := uniqueSubject(b)
		fillSubject(b, a, subject, b.N)
		b.ResetTimer()
		rate := consumeRaw(b, a, subject, b.N)
		b.StopTimer()
		b.ReportMetric(rate, "msg/s")
	})
	plain := func(window int) func(b *testing.B) {
		return func(b *testing.B) {
			a := benchAdapter(b, window)
			subject := uniqueSubject(b)
			fillSubject(b, a, subject, b.N)
			r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			count, done, inc := countTo(b.N)
			r.AddConsumerHandler("bench", subject, a.Subscriber(), func(*message.Message) error {
				inc()
				return nil
			})
			b.ResetTimer()
			rate := runUntil(b, r, count, b.N, done)
			b.StopTimer()
			b.ReportMetric(rate, "msg/s")
		}
	}
	full := func(window int) func(b *testing.B) {
		return func(b *testing.B) {
			a := benchAdapter(b, window)
			subject := uniqueSubject(b)
			fillSubject(b, a, subject, b.N)
			b.ResetTimer()
			rate := consumeMillrace(b, a, subject, b.N)
			b.StopTimer()
			b.ReportMetric(rate, "msg/s")
		}
	}
	b.Run("adapter-plain-router-window-64", plain(64))
	b.Run("millrace-router-window-64", full(64))
	b.Run("millrace-router-window-1", full(1))
}
