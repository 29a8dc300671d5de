package router_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The three benchmarks push b.N messages through one handler that succeeds, on the memory
// adapter, and differ only in the middleware: none (bare Watermill router), Watermill's typical
// stack (Recoverer + Retry + PoisonQueue), and millrace's full stack. Per-message overhead is
// the difference in ns/op and allocs/op:
//
//	go test ./router -run '^$' -bench 'Router' -benchmem -count 10 | tee bench.txt && benchstat bench.txt

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func BenchmarkBareWatermillRouter(b *testing.B) {
	benchRouter(b, func(a *memory.Adapter, h message.NoPublishHandlerFunc) (run func(context.Context) error, running chan struct{}, closeFn func() error) {
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(discard))
		if err != nil {
			b.Fatal(err)
		}
		r.AddConsumerHandler("bench", "bench", a.Subscriber(), h)
		return r.Run, r.Running(), r.Close
	})
}

func BenchmarkWatermillTypicalStackRouter(b *testing.B) {
	benchRouter(b, func(a *memory.Adapter, h message.NoPublishHandlerFunc) (func(context.Context) error, chan struct{}, func() error) {
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(discard))
		if err != nil {
			b.Fatal(err)
		}
		poison, err := wmmiddleware.PoisonQueue(a, "bench.poison")
		if err != nil {
			b.Fatal(err)
		}
		r.AddMiddleware(
			wmmiddleware.Recoverer,
			poison,
			wmmiddleware.Retry{MaxRetries: 4, InitialInterval: time.Millisecond, Logger: watermill.NewSlogLogger(discard)}.Middleware,
		)
		r.AddConsumerHandler("bench", "bench", a.Subscriber(), h)
		return r.Run, r.Running(), r.Close
	})
}

func BenchmarkMillraceRouter(b *testing.B) {
	benchRouter(b, func(a *memory.Adapter, h message.NoPublishHandlerFunc) (func(context.Context) error, chan struct{}, func() error) {
		r, err := router.New(router.Config{
			Adapter: a,
			Policy:  millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
			Logger:  discard,
		})
		if err != nil {
			b.Fatal(err)
		}
		r.HandleMessage("bench", "bench", h)
		return r.Run, r.Running(), r.Close
	})
}

type routerFactory func(*memory.Adapter, message.NoPublishHandlerFunc) (run func(context.Context) error, running chan struct{}, closeFn func() error)

func benchRouter(b *testing.B, build routerFactory) {
	a, err := memory.New(memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	run, running, closeFn := build(a, func(*message.Message) error {
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	})
	msgs := make([]*message.Message, b.N)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewULID(), []byte(`{"id":1}`))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = run(ctx) }()
	<-running
	b.ReportAllocs()
	b.ResetTimer()
	if err := a.Publish("bench", msgs...); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.StopTimer()
	_ = closeFn()
}

// BenchmarkHandlerChain isolates the middleware's own cost per message: the same succeeding
// handler called directly, behind Watermill's typical stack, and behind millrace's stack, on one
// goroutine with no broker, so scheduler noise does not drown nanoseconds.
//
//	go test ./router -run '^$' -bench HandlerChain -benchmem -count 10 > chain.txt && benchstat chain.txt
func BenchmarkHandlerChain(b *testing.B) {
	a, err := memory.New(memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	handler := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	poison, err := wmmiddleware.PoisonQueue(a, "bench.poison")
	if err != nil {
		b.Fatal(err)
	}
	typical := []message.HandlerMiddleware{
		wmmiddleware.Recoverer,
		poison,
		wmmiddleware.Retry{MaxRetries: 4, InitialInterval: time.Millisecond, Logger: watermill.NewSlogLogger(discard)}.Middleware,
	}
	millraceStack, err := router.Stack(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
		Logger:  discard,
	})
	if err != nil {
		b.Fatal(err)
	}
	stackWith := func(tel *telemetry.Telemetry) []message.HandlerMiddleware {
		st, err := router.Stack(router.Config{
			Adapter:   a,
			Policy:    millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)},
			Logger:    discard,
			Telemetry: tel,
		})
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	noopTel, err := telemetry.New(telemetry.Config{})
	if err != nil {
		b.Fatal(err)
	}
	sdkTel, err := telemetry.New(telemetry.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())),
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stack []message.HandlerMiddleware
	}{{"bare", nil}, {"watermill-typical", typical}, {"millrace", millraceStack},
		{"millrace-telemetry-noop", stackWith(noopTel)}, {"millrace-telemetry-sdk", stackWith(sdkTel)}} {
		h := message.HandlerFunc(handler)
		for i := len(tc.stack) - 1; i >= 0; i-- {
			h = tc.stack[i](h)
		}
		b.Run(tc.name, func(b *testing.B) {
			msg := message.NewMessage("bench", []byte(`{"id":1}`))
			base := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				msg.SetContext(base)
				if _, err := h(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
