package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// TestRetriesLinkAttemptSpans: with tracing on, a retry to the first tier (every retry of a
// Fixed backoff, which the broker would dead-letter with the headers the delivery arrived
// with) is a confirmed copy carrying the attempt's span context, so attempt 2's span links to
// attempt 1's and attempt 3's to attempt 2's. On the old code (reject into the tier) no span
// had a link.
func TestRetriesLinkAttemptSpans(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("trace")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		dlq := watchDLQ(t, a, topic)
		spans := tracetest.NewSpanRecorder()
		tel, err := telemetry.New(telemetry.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
		if err != nil {
			t.Fatal(err)
		}
		r, err := router.New(router.Config{
			Adapter: a, Telemetry: tel, CloseTimeout: 5 * time.Second,
			Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(200 * time.Millisecond)},
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Handle("trace", topic, func(context.Context, *message.Message, millrace.Attempt) error {
			return errors.New("down")
		})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			_ = r.Close()
			<-done
		})
		<-r.Running()
		publishKey(t, a, topic, topic, `{"id":"traced"}`)
		waitFor(t, 30*time.Second, "the dead letter", func() bool { return len(dlq()) == 1 })
		byAttempt := map[int64]sdktrace.ReadOnlySpan{}
		waitFor(t, 10*time.Second, "the spans of attempts 1-3", func() bool {
			for _, s := range spans.Ended() {
				if s.SpanKind() != trace.SpanKindConsumer {
					continue
				}
				for _, kv := range s.Attributes() {
					if kv.Key == telemetry.KeyAttempt {
						byAttempt[kv.Value.AsInt64()] = s
					}
				}
			}
			return byAttempt[1] != nil && byAttempt[2] != nil && byAttempt[3] != nil
		})
		for n := int64(2); n <= 3; n++ {
			links := byAttempt[n].Links()
			if len(links) != 1 || links[0].SpanContext.SpanID() != byAttempt[n-1].SpanContext().SpanID() {
				t.Errorf("attempt %d's span has links %v, want one to attempt %d's span %s", n, links, n-1, byAttempt[n-1].SpanContext().SpanID())
			}
		}
	})
}
