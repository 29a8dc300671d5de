package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// HandlerInfo names the handler a Handler instruments.
type HandlerInfo struct {
	// Name is the router handler's name (millrace.handler).
	Name string
	// Topic is the topic it consumes (messaging.destination.name).
	Topic string
	// Broker is the adapter's Capabilities.Broker (messaging.system).
	Broker string
	// ConsumerGroup is the consumer group, durable or queue, when known
	// (messaging.consumer.group.name); "" leaves the attribute out.
	ConsumerGroup string
	// ImmediateAttempts is the handler's RetryPolicy.Immediate. Above 0 a delivery can call the
	// handler more than once, and each call gets a span of its own ("attempt <topic>", a child
	// of the delivery's span, linked to the delivery's attempt before it); at 0 the delivery's
	// span is its one attempt's.
	ImmediateAttempts int
}

// Handler is the instrumentation of one handler: two middlewares (Outer, outermost; Inner,
// right around the classified handler call) and two hooks (OnRetry, OnDeadLetter) that the
// router installs together. Its attribute sets are made once, so recording a delivery
// allocates nothing for the attributes.
type Handler struct {
	t        *Telemetry
	spanName string
	// attemptSpanName is set when a delivery can make several attempts (ImmediateAttempts > 0):
	// Inner then starts a span per handler call.
	attemptSpanName string
	base            []attribute.KeyValue
	// Options are kept as ready slices: passing one with ... allocates nothing per call.
	plainAdd    []metric.AddOption                       // the handler's attributes alone
	plainRecord []metric.RecordOption                    // the same, for histograms
	outcomes    [numKinds][]metric.AddOption             // by deliveryKind
	dead        map[deadletter.Reason][]metric.AddOption // dead letters by reason
}

// deliveryKind is one (outcome, reason) pair a delivery can be counted under: an index into
// deliveryKinds and Handler.outcomes, so counting a delivery looks nothing up by string.
type deliveryKind uint8

const (
	kindNone deliveryKind = iota // no handler call recorded
	kindSuccess
	kindDiscard
	kindMalformed
	kindRetry
	kindPanic
	kindTimeout
	kindUndecodable
	kindOverLimit
	numKinds
)

// deliveryKinds are the outcome and reason of each deliveryKind.
var deliveryKinds = [numKinds][2]string{
	kindSuccess: {OutcomeSuccess, ReasonHandler}, kindDiscard: {OutcomeDiscard, ReasonHandler},
	kindMalformed: {OutcomeMalformed, ReasonHandler}, kindRetry: {OutcomeRetry, ReasonHandler},
	kindPanic: {OutcomeRetry, ReasonPanic}, kindTimeout: {OutcomeRetry, ReasonTimeout},
	kindUndecodable: {OutcomeMalformed, ReasonUndecodable}, kindOverLimit: {OutcomeRetry, ReasonOverLimit},
}

// ForHandler returns the instrumentation of the handler info describes.
func (t *Telemetry) ForHandler(info HandlerInfo) *Handler {
	base := []attribute.KeyValue{KeyMessagingSystem.String(info.Broker), KeyDestination.String(info.Topic), KeyHandler.String(info.Name)}
	if info.ConsumerGroup != "" {
		base = append(base, KeyConsumerGroup.String(info.ConsumerGroup))
	}
	with := func(extra ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), extra...)...)
	}
	plain := metric.WithAttributeSet(with())
	h := &Handler{
		t: t, spanName: "process " + info.Topic, base: base,
		plainAdd:    []metric.AddOption{plain},
		plainRecord: []metric.RecordOption{plain},
		dead:        map[deadletter.Reason][]metric.AddOption{},
	}
	if info.ImmediateAttempts > 0 {
		h.attemptSpanName = "attempt " + info.Topic
	}
	for k := kindSuccess; k < numKinds; k++ {
		pair := deliveryKinds[k]
		h.outcomes[k] = []metric.AddOption{metric.WithAttributeSet(with(KeyOutcome.String(pair[0]), KeyReason.String(pair[1])))}
	}
	for _, r := range []deadletter.Reason{deadletter.Exhausted, deadletter.Malformed, deadletter.Discarded} {
		h.dead[r] = []metric.AddOption{metric.WithAttributeSet(with(KeyReason.String(string(r))))}
	}
	return h
}

// record is what the layers of one delivery tell Outer, through the message context. It is
// that context too (it answers recordKey itself): one allocation per delivery, not two.
type record struct {
	context.Context
	calls      int          // handler calls (Inner)
	kind       deliveryKind // the last call's outcome and reason
	retried    bool
	delay      time.Duration
	deadLetter deadletter.Reason
	dlAttempts int
	// lastAttempt is the span of the delivery's previous handler call, when Inner starts one
	// per call: the next call's span links to it.
	lastAttempt trace.SpanContext
}

type recordKey struct{}

// Value implements context.Context.
func (r *record) Value(key any) any {
	if key == (recordKey{}) {
		return r
	}
	return r.Context.Value(key)
}

func recordFrom(ctx context.Context) *record {
	r, _ := ctx.Value(recordKey{}).(*record)
	return r
}

// Outer is the outermost middleware: it starts the delivery's span (a child of the producer's
// trace context in the metadata, linked to the previous attempt's span when the delivery is a
// retry copy or a dead letter that carries it), writes this attempt's span context into the
// metadata (AttemptTraceHeader, for a retry copy and the dead letter to link to), and when
// the stack returns counts failed retry and dead-letter writes and, for a message that ended,
// its attempt number and time since its first attempt.
func (h *Handler) Outer() message.HandlerMiddleware {
	return func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			rec := &record{Context: msg.Context()}
			var ctx context.Context = rec
			var span trace.Span
			if h.t.tracing {
				ctx, span = h.startSpan(ctx, msg)
			}
			msg.SetContext(ctx)
			out, err := next(msg)
			h.finish(ctx, msg, rec, err, span)
			return out, err
		}
	}
}

// finish records what Outer counts and ends the span.
func (h *Handler) finish(ctx context.Context, msg *message.Message, rec *record, err error, span trace.Span) {
	if rec.calls == 0 {
		// Refused before the handler: Poison dead-lettered it (undecodable, or past MaxAttempts).
		switch rec.deadLetter {
		case deadletter.Malformed:
			h.t.deliveries.Add(ctx, 1, h.outcomes[kindUndecodable]...)
		case deadletter.Exhausted:
			h.t.deliveries.Add(ctx, 1, h.outcomes[kindOverLimit]...)
		}
	}
	switch {
	case errors.Is(err, millrace.ErrRetryPublishFailed):
		h.t.retryFailures.Add(ctx, 1, h.plainAdd...)
	case errors.Is(err, millrace.ErrDeadLetterFailed):
		h.t.dlFailures.Add(ctx, 1, h.plainAdd...)
	}
	ended := err == nil && !rec.retried && (rec.calls > 0 || rec.deadLetter != "")
	attempt := millrace.AttemptFrom(msg) // the last attempt's: Retry leaves it in the message context
	if ended {
		n := attempt.Number
		if rec.deadLetter != "" && rec.dlAttempts > 0 {
			n = rec.dlAttempts
		}
		h.t.finalAttempt.Record(ctx, int64(max(n, 1)), h.plainRecord...)
		if !attempt.FirstAttemptAt.IsZero() {
			h.t.timeToOutcome.Record(ctx, max(time.Since(attempt.FirstAttemptAt).Seconds(), 0), h.plainRecord...)
		}
	}
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{KeyMessageID.String(msg.UUID), KeyAttempt.Int(attempt.Number)}
	if attempt.NativeID != "" {
		attrs = append(attrs, KeyNativeID.String(attempt.NativeID))
	}
	outcome, reason := deliveryKinds[rec.kind][0], deliveryKinds[rec.kind][1]
	if rec.kind != kindNone {
		attrs = append(attrs, KeyOutcome.String(outcome), KeyReason.String(reason))
	}
	if rec.retried {
		attrs = append(attrs, KeyDelay.Float64(rec.delay.Seconds()))
	}
	if rec.deadLetter != "" {
		attrs = append(attrs, attribute.String("millrace.dead_letter.reason", string(rec.deadLetter)))
	}
	span.SetAttributes(attrs...)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case rec.kind != kindNone && rec.kind != kindSuccess:
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// Inner sits right around the classified handler call (inside Retry and the breaker, outside
// Classify): it counts each call by outcome and reason, its panics, and its duration.
func (h *Handler) Inner() message.HandlerMiddleware {
	return func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			var span trace.Span
			if h.attemptSpanName != "" && h.t.tracing {
				span = h.startAttemptSpan(ctx, msg)
			}
			start := time.Now()
			out, err := next(msg)
			elapsed := time.Since(start)
			if span != nil {
				msg.SetContext(ctx)
			}
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				if span != nil {
					span.End()
				}
				return out, err // shutting down: no outcome
			}
			kind := classify(err)
			if span != nil {
				h.endAttemptSpan(span, kind, err)
			}
			if kind == kindPanic {
				h.t.panics.Add(ctx, 1, h.plainAdd...)
			}
			h.t.deliveries.Add(ctx, 1, h.outcomes[kind]...)
			h.t.duration.Record(ctx, elapsed.Seconds(), h.plainRecord...)
			if rec := recordFrom(ctx); rec != nil {
				rec.calls++
				rec.kind = kind
			}
			return out, err
		}
	}
}

// startAttemptSpan starts the span of one handler call of a delivery that can make several
// (RetryPolicy.Immediate), as a child of the delivery's span in ctx, linked to the delivery's
// previous call's, and puts it in msg's context for the handler.
func (h *Handler) startAttemptSpan(ctx context.Context, msg *message.Message) trace.Span {
	a := millrace.AttemptFrom(msg)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(KeyAttempt.Int(a.Number))}
	rec := recordFrom(ctx)
	if rec != nil && rec.lastAttempt.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: rec.lastAttempt}))
	}
	actx, span := h.t.tracer.Start(ctx, h.attemptSpanName, opts...)
	if rec != nil {
		rec.lastAttempt = span.SpanContext()
	}
	msg.SetContext(actx)
	return span
}

// endAttemptSpan records one handler call's outcome on its span and ends it.
func (h *Handler) endAttemptSpan(span trace.Span, kind deliveryKind, err error) {
	span.SetAttributes(KeyOutcome.String(deliveryKinds[kind][0]), KeyReason.String(deliveryKinds[kind][1]))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// classify names the outcome of a classified error (Classify is inside Inner).
func classify(err error) deliveryKind {
	if err == nil {
		return kindSuccess
	}
	if oe := millrace.Classify(err, nil); oe.Outcome == millrace.OutcomeDiscard {
		if oe.Malformed {
			return kindMalformed
		}
		return kindDiscard
	}
	var p *millrace.PanicError
	switch {
	case errors.As(err, &p):
		return kindPanic
	case errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	}
	return kindRetry
}

// OnRetry is the router's OnRetry hook part: it counts the retry and notes its delay.
func (h *Handler) OnRetry(ctx context.Context, _ *message.Message, ev middleware.RetryEvent) {
	h.t.retries.Add(ctx, 1, h.plainAdd...)
	if rec := recordFrom(ctx); rec != nil {
		rec.retried, rec.delay = true, ev.Delay
	}
}

// OnDeadLetter is the router's OnDeadLetter hook part: it counts the dead letter by reason.
func (h *Handler) OnDeadLetter(ctx context.Context, _ *message.Message, ev middleware.DeadLetterEvent) {
	if opt, ok := h.dead[ev.Record.Reason]; ok {
		h.t.deadLetters.Add(ctx, 1, opt...)
	}
	if rec := recordFrom(ctx); rec != nil {
		rec.deadLetter, rec.dlAttempts = ev.Record.Reason, ev.Record.Attempts
	}
}
