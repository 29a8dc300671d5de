package conformance

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
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// producerTraceparent is the W3C trace context of a producer that is not millrace.
const producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testTraceContextSurvivesRetries: with telemetry on, a message from a producer with a
// traceparent fails every attempt (3) and is dead-lettered. Every attempt's span is a child of
// the producer's span; a span that links links to the attempt before, and where the adapter
// declares Capabilities.CarriesAttemptTrace, attempts 2 and 3 each link to the one before; the dead letter keeps the producer's traceparent byte for byte and its record
// carries the last attempt's span context (Record.Trace, read by telemetry.RecordTrace), also
// where the dead letter is written from the broker's original content.
func testTraceContextSurvivesRetries(t *testing.T, h Harness, opts Options) {
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	spans := tracetest.NewSpanRecorder()
	tel, err := telemetry.New(telemetry.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		t.Fatal(err)
	}
	f.run(router.Config{Policy: f.policy(3, opts.Delay), Telemetry: tel}, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("down")
	})
	msg := newMsg(`{"id":"traced"}`)
	msg.Metadata.Set("traceparent", producerTraceparent)
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	if got := recs[0].Metadata["traceparent"]; got != producerTraceparent {
		t.Errorf("dead letter traceparent %q, want the producer's %q unchanged", got, producerTraceparent)
	}
	// The last attempt's span ends when the stack returns, after the dead letter was written.
	var ended []sdktrace.ReadOnlySpan
	var byAttempt map[int64]sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(opts.Timeout); ; time.Sleep(10 * time.Millisecond) {
		ended = spans.Ended()
		byAttempt = attemptSpans(ended)
		if byAttempt[1] != nil && byAttempt[2] != nil && byAttempt[3] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for the spans of attempts 1-3 (spans by attempt: %d)", opts.Timeout, len(byAttempt))
		}
	}
	for _, s := range ended {
		if s.SpanKind() == trace.SpanKindConsumer &&
			(s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7") {
			t.Errorf("span %q: parent %s/%s, want the producer's span", s.Name(), s.Parent().TraceID(), s.Parent().SpanID())
		}
	}
	links := 0
	for n := int64(2); n <= 3; n++ {
		for _, l := range byAttempt[n].Links() {
			links++
			if l.SpanContext.SpanID() != byAttempt[n-1].SpanContext().SpanID() {
				t.Errorf("attempt %d links span %s, want attempt %d's %s", n, l.SpanContext.SpanID(), n-1, byAttempt[n-1].SpanContext().SpanID())
			}
		}
	}
	if f.adapter.Capabilities().CarriesAttemptTrace && links != 2 {
		t.Errorf("%d links between the 3 attempts' spans, want 2: the adapter declares CarriesAttemptTrace", links)
	}
	want := byAttempt[3].SpanContext()
	if recs[0].Trace != "00-"+want.TraceID().String()+"-"+want.SpanID().String()+"-01" {
		t.Errorf("dead letter's %s %q, want the last attempt's span %s/%s, sampled",
			deadletter.KeyTrace, recs[0].Trace, want.TraceID(), want.SpanID())
	}
	last := telemetry.RecordTrace(recs[0])
	if last.SpanID() != want.SpanID() || last.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("dead letter links span %s/%s, want the last attempt's %s/%s", last.TraceID(), last.SpanID(), want.TraceID(), want.SpanID())
	}
	inMetadata := "not carried"
	if telemetry.LinkedAttempt(recs[0].Metadata).IsValid() {
		inMetadata = "carried"
	}
	t.Logf("3 attempt spans under the producer's trace, %d links between attempts; the dead letter's record trace %s (the attempt's context in its metadata: %s)",
		links, recs[0].Trace, inMetadata)
}

// attemptSpans returns the consumer spans of spans by their attempt number.
func attemptSpans(spans []sdktrace.ReadOnlySpan) map[int64]sdktrace.ReadOnlySpan {
	byAttempt := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.KeyAttempt {
				byAttempt[kv.Value.AsInt64()] = s
			}
		}
	}
	return byAttempt
}
