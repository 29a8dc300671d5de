package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// A router with telemetry on the OpenTelemetry SDK (here a manual reader; in production a
// Prometheus exporter or an OTLP periodic reader): one message succeeds, one is retried once,
// one is dead-lettered; the deliveries counter says so by outcome.
func Example() {
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(telemetry.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		panic(err)
	}
	a, _ := memory.New(memory.Config{})
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter:   a,
		Policy:    millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Millisecond)},
		Telemetry: tel,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	r.Handle("orders", "orders", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		switch {
		case string(msg.Payload) == "flaky" && at.Number == 1, string(msg.Payload) == "broken":
			return errors.New("dependency down")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for _, p := range []string{"ok", "flaky", "broken"} {
		_ = a.Publish("orders", message.NewMessage(p, []byte(p)))
	}
	for a.Outstanding("orders") > 0 {
		time.Sleep(time.Millisecond)
	}
	_ = r.Close()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				outcome, _ := dp.Attributes.Value(telemetry.KeyOutcome)
				reason, _ := dp.Attributes.Value(telemetry.KeyReason)
				lines = append(lines, fmt.Sprintf("%s %s %s = %d", m.Name, outcome.AsString(), reason.AsString(), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// millrace.dead_letters  exhausted = 1
	// millrace.deliveries RETRY handler = 3
	// millrace.deliveries SUCCESS handler = 2
	// millrace.retries   = 2
}
