package sqs_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// BenchmarkPublish measures one confirmed SendMessage through the adapter's publisher
// (marshaling and text checks included).
func BenchmarkPublish(b *testing.B) {
	a := newAdapter(b, testConfig(b))
	topic := uniqueTopic("bench-pub")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"user":"u-1","devices":["a","b"],"text":"naïve café ✓"}`)
	b.ResetTimer()
	for b.Loop() {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandle measures receive, the millrace stack, a successful handler and the delete,
// for one subscription (one message in flight, as configured): the per-message cost of the
// consume path. Messages are published before the timer starts.
func BenchmarkHandle(b *testing.B) {
	a := newAdapter(b, testConfig(b))
	topic := uniqueTopic("bench-handle")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		b.Fatal(err)
	}
	n := b.N
	for range n {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))); err != nil {
			b.Fatal(err)
		}
	}
	var handled atomic.Int64
	done := make(chan struct{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("bench", topic, func(context.Context, *message.Message, millrace.Attempt) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.StopTimer()
	_ = r.Close()
}
