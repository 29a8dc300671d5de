package router_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/metric"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// countingGuard is an Idempotency that passes messages through and counts Instrument calls
// and stops.
type countingGuard struct{ instruments, stops *atomic.Int32 }

func (g countingGuard) Middleware(router.HandlerSettings) (message.HandlerMiddleware, error) {
	return func(h message.HandlerFunc) message.HandlerFunc { return h }, nil
}

func (g countingGuard) Instrument(metric.Meter) (func(), error) {
	g.instruments.Add(1)
	return func() { g.stops.Add(1) }, nil
}

// uncomparableGuard is one whose type cannot be a map key or be compared: each handler's is
// its own guard.
type uncomparableGuard struct {
	countingGuard
	_ []int
}

// TestRunInstrumentsEachGuardOnce: with Telemetry set, Run calls Instrument once per distinct
// guard (three handlers sharing one guard: once; two handlers with uncomparable guards: once
// each, without a panic), and every stop when it returns; without Telemetry, never.
func TestRunInstrumentsEachGuardOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		telemetry bool
		want      int32
	}{{"telemetry", true, 3}, {"no telemetry", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := memory.New(memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var instruments, stops atomic.Int32
			shared := countingGuard{&instruments, &stops}
			cfg := router.Config{Adapter: a, Idempotency: shared, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}}
			if tc.telemetry {
				if cfg.Telemetry, err = telemetry.New(telemetry.Config{}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := router.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			nop := func(context.Context, *message.Message, millrace.Attempt) error { return nil }
			for _, name := range []string{"a", "b", "c"} {
				r.Handle(name, "t-"+name, nop)
			}
			r.Handle("d", "t-d", nop, router.WithIdempotency(uncomparableGuard{countingGuard: shared}))
			r.Handle("e", "t-e", nop, router.WithIdempotency(uncomparableGuard{countingGuard: shared}))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			<-r.Running()
			if got := instruments.Load(); got != tc.want {
				t.Errorf("Instrument called %d times, want %d", got, tc.want)
			}
			cancel()
			_ = r.Close()
			<-done
			if got := stops.Load(); got != tc.want {
				t.Errorf("%d stops after Run returned, want %d", got, tc.want)
			}
		})
	}
}
