package nats

// Benchmarks (not run by go test without -bench), side by side on the same server:
//
//	go test -run '^$' -bench 'Consume' -benchtime 20000x -count 3 ./adapters/nats/
//
// One op of BenchmarkConsume is one message consumed and acknowledged (the handler returns
// nil). There is no watermill-nats row: the module does not depend on watermill-nats.

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

var quiet = slog.New(slog.DiscardHandler)

// fillSubject publishes n messages to subject with asynchronous publishes, then waits for
// every PubAck.
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
	}
	select {
	case <-a.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishes not acknowledged within a minute")
	}
}

func benchAdapter(b *testing.B, window int) *Adapter {
	b.Helper()
	cfg := testConfig()
	cfg.Durable, cfg.Window, cfg.Logger = "bench", window, quiet
	return newTestAdapter(b, cfg)
}

// consumeWith runs r until b.N messages were handled.
func consumeWith(b *testing.B, r interface {
	Run(context.Context) error
	Close() error
}, n *atomic.Int64, done chan struct{}) {
	b.Helper()
	b.ResetTimer()
	start := time.Now()
	go func() { _ = r.Run(context.Background()) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d messages consumed in 5 minutes", n.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
	_ = r.Close()
}

// BenchmarkConsume compares a raw jetstream consume loop (Messages, Ack per message) with this
// adapter's subscriber behind a plain Watermill router and behind the full millrace stack.
func BenchmarkConsume(b *testing.B) {
	b.Run("raw-jetstream-loop", func(b *testing.B) {
		a := benchAdapter(b, 64)
		subject := uniqueSubject(b)
		fillSubject(b, a, subject, b.N)
		cons, err := a.ensureConsumer(context.Background(), subject)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		it, err := cons.Messages(jetstream.PullMaxMessages(64))
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			_ = m.Ack()
		}
		it.Stop()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
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
			var n atomic.Int64
			done := make(chan struct{})
			r.AddConsumerHandler("bench", subject, a.Subscriber(), func(*message.Message) error {
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			consumeWith(b, r, &n, done)
		}
	}
	full := func(window int) func(b *testing.B) {
		return func(b *testing.B) {
			a := benchAdapter(b, window)
			subject := uniqueSubject(b)
			fillSubject(b, a, subject, b.N)
			r, err := router.New(router.Config{Adapter: a, Logger: quiet,
				Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			done := make(chan struct{})
			r.Handle("bench", subject, func(context.Context, *message.Message, millrace.Attempt) error {
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			consumeWith(b, r, &n, done)
		}
	}
	b.Run("adapter-plain-router-window-64", plain(64))
	b.Run("millrace-router-window-64", full(64))
	b.Run("millrace-router-window-1", full(1))
}
