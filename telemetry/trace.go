package telemetry

import (
	"context"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// AttemptTraceHeader prefixes the metadata keys that carry an attempt's span context
// ("millrace-attempt-traceparent", "millrace-attempt-tracestate" with the W3C propagator). Outer
// writes them on each delivery; an adapter that declares millrace.Capabilities.CarriesAttemptTrace
// brings them back with the next delivery, so the next attempt's span links to the attempt
// before (memory, Kafka, RabbitMQ, Redis Streams; SQS and NATS deliver the original again,
// unchanged). A dead letter records the last attempt's span context
// in its record instead (deadletter.Record.Trace, read by RecordTrace), which survives on every
// adapter. The producer's own trace context ("traceparent") is read, never rewritten: every
// attempt is a child of the producer's span.
const AttemptTraceHeader = millrace.HeaderAttemptTracePrefix

// metadataCarrier reads and writes message metadata as a TextMapCarrier.
type metadataCarrier message.Metadata

func (c metadataCarrier) Get(key string) string { return message.Metadata(c).Get(key) }
func (c metadataCarrier) Set(key, value string) { message.Metadata(c).Set(key, value) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// attemptCarrier is metadataCarrier under the AttemptTraceHeader prefix.
type attemptCarrier message.Metadata

func (c attemptCarrier) Get(key string) string {
	return message.Metadata(c).Get(AttemptTraceHeader + key)
}
func (c attemptCarrier) Set(key, value string) {
	message.Metadata(c).Set(AttemptTraceHeader+key, value)
}
func (c attemptCarrier) Keys() []string {
	var keys []string
	for k := range c {
		if rest, ok := strings.CutPrefix(k, AttemptTraceHeader); ok {
			keys = append(keys, rest)
		}
	}
	return keys
}

var _ propagation.TextMapCarrier = metadataCarrier(nil)
var _ propagation.TextMapCarrier = attemptCarrier(nil)

// startSpan starts the delivery's span under the producer's trace context, linked to the
// previous attempt's span when the metadata carries one, and writes its own span context
// under AttemptTraceHeader.
func (h *Handler) startSpan(ctx context.Context, msg *message.Message) (context.Context, trace.Span) {
	if msg.Metadata == nil {
		msg.Metadata = message.Metadata{}
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(h.base...)}
	prev := trace.SpanContextFromContext(h.t.prop.Extract(context.Background(), attemptCarrier(msg.Metadata)))
	if prev.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev}))
	}
	ctx = h.t.prop.Extract(ctx, metadataCarrier(msg.Metadata))
	ctx, span := h.t.tracer.Start(ctx, h.spanName, opts...)
	h.t.prop.Inject(ctx, attemptCarrier(msg.Metadata))
	return ctx, span
}

// LinkedAttempt returns the span context of the attempt a message carries under
// AttemptTraceHeader, read with the W3C trace-context propagator; invalid when it carries none.
// Use it for a retry copy (the next attempt's span links to it). For a dead letter use
// RecordTrace: the metadata of a dead letter carries the attempt's context only where the
// adapter wrote it from the message as the handler saw it (memory, RabbitMQ, SQS), not where it
// copies the broker's original content (Redis Streams, NATS, and Kafka for a record consumed
// through its subscriber), as the conformance test TraceContextSurvivesRetries logs.
func LinkedAttempt(md message.Metadata) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), attemptCarrier(md)))
}

// RecordTrace returns the span context of the attempt that gave up a dead letter, read from
// its record (rec.Trace, the record key deadletter.KeyTrace, which every adapter and store
// keeps); invalid when the record has none (tracing was off, or the record was written before
// it was recorded) or it is not a valid traceparent. The context is remote, as read from a
// traceparent: use it as a span link, or print its trace id (as `millrace dlq show` does).
func RecordTrace(rec deadletter.Record) trace.SpanContext {
	if !deadletter.ValidTrace(rec.Trace) {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": rec.Trace}))
}
