package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// DeadLetterer writes dead-letter records; every millrace.Adapter is one.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error
}

// PoisonConfig configures Poison.
type PoisonConfig struct {
	// Broker names the adapter in dead-letter records when the Attempt does not. Optional.
	Broker string
	// DeadLetterDiscards sends Discard outcomes to the dead-letter destination too (reason
	// "discarded"). Default false: a Discard is acknowledged and logged, as in the field report.
	DeadLetterDiscards bool
	// Logger receives a Warn line per dead letter and an Info line per discard. Default: slog.Default().
	Logger *slog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
	// OnDeadLetter, when set, is called once for every dead letter (exhausted, malformed, and
	// discarded when DeadLetterDiscards is on; not for a discard that is only acknowledged),
	// after the adapter's DeadLetter returned nil (never when it failed: the original is then
	// nacked, not acknowledged, and delivered again). It runs on the message's goroutine, after
	// the log line and before Poison returns: a slow hook delays this message's ack and the
	// Close of the router, so it should be quick (hand slow work to a goroutine or queue of its
	// own). Its ctx is the message's context, without the handler's Budget deadline. A panic in
	// it is recovered and logged at Error; the message is handled as without the hook. Nil
	// costs nothing.
	OnDeadLetter OnDeadLetterFunc
}

// Poison routes exhausted and malformed messages (and, if configured, discarded ones) to the
// dead-letter destination with the payload unchanged and the failure context, and acknowledges
// the original only after that write succeeded. A failed write returns an error wrapping
// millrace.ErrDeadLetterFailed, so the router nacks and the broker delivers the message again.
func Poison(dl DeadLetterer, cfg PoisonConfig) message.HandlerMiddleware {
	logger, now := defaults(cfg.Logger, cfg.Now)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			return poisonFailed(dl, &cfg, logger, now, msg, out, err)
		}
	}
}

// poisonFailed is Poison's handling of a failed message. It is a function of its own so that
// its large frame (the dead-letter record, the log attributes) is not part of every message's
// stack: Watermill runs each message on a fresh goroutine, whose stack would otherwise grow,
// copying itself, on every message that succeeds.
func poisonFailed(dl DeadLetterer, cfg *PoisonConfig, logger *slog.Logger, now func() time.Time,
	msg *message.Message, out []*message.Message, err error) ([]*message.Message, error) {
	reason, cause, attempts := poisonReason(err)
	switch {
	case reason == "":
		return out, err
	case reason == deadletter.Discarded && !cfg.DeadLetterDiscards:
		logger.InfoContext(msg.Context(), "millrace: message discarded",
			slog.String("message_uuid", msg.UUID), slog.String("outcome", millrace.OutcomeDiscard.String()),
			slog.String("error", cause.Error()))
		return nil, nil
	}
	rec := record(msg, reason, cause, attempts, cfg.Broker, now())
	if dlErr := dl.DeadLetter(msg.Context(), msg, rec); dlErr != nil {
		return nil, fmt.Errorf("%w: %w (message was %s: %w)", millrace.ErrDeadLetterFailed, dlErr, reason, cause)
	}
	logDeadLettered(msg.Context(), logger, msg.UUID, reason, rec.Attempts, rec.LastError, err)
	if cfg.OnDeadLetter != nil {
		deadLettered(cfg.OnDeadLetter, logger, msg, &rec, cause)
	}
	return nil, nil
}

// logDeadLettered writes the Warn line of a dead letter; one exhausted by RetryPolicy.
// MaxElapsed, before MaxAttempts, says so in an elapsed_limit attribute (the limit, the
// time since the first attempt, the next delay). Apart from poisonFailed to keep its
// attributes off that frame.
func logDeadLettered(ctx context.Context, logger *slog.Logger, uuid string, reason deadletter.Reason, attempts int, lastError string, err error) {
	attrs := []slog.Attr{slog.String("message_uuid", uuid), slog.String("outcome", deadLetterOutcome(reason)),
		slog.String("reason", string(reason)), slog.Int("attempts", attempts), slog.String("error", lastError)}
	var ex *millrace.ExhaustedError
	if errors.As(err, &ex) && ex.MaxElapsed > 0 {
		attrs = append(attrs, slog.String("elapsed_limit", fmt.Sprintf("%s: %s since the first attempt + next delay %s", ex.MaxElapsed, ex.Elapsed, ex.NextDelay)))
	}
	logger.LogAttrs(ctx, slog.LevelWarn, "millrace: message dead-lettered", attrs...)
}

// deadLetterOutcome is the outcome a dead letter's log line reports: the last attempt's
// (RETRY for an exhausted message, DISCARD for a dead-lettered discard) or MALFORMED for a
// message that could not be decoded or was classified malformed, as telemetry counts them.
func deadLetterOutcome(reason deadletter.Reason) string {
	switch reason {
	case deadletter.Malformed:
		return "MALFORMED"
	case deadletter.Discarded:
		return millrace.OutcomeDiscard.String()
	}
	return millrace.OutcomeRetry.String()
}

// deadLettered calls the OnDeadLetter hook. It takes the record by pointer and builds the
// event itself, so that poisonFailed's frame (on the stack while the adapter writes the dead
// letter) stays as it was without hooks.
func deadLettered(hook OnDeadLetterFunc, logger *slog.Logger, msg *message.Message, rec *deadletter.Record, cause error) {
	ctx := msg.Context()
	ev := DeadLetterEvent{Record: *rec, Err: cause}
	callHook(ctx, logger, "OnDeadLetter", msg.UUID, func() { hook(ctx, msg, ev) })
}

// poisonReason returns why err makes its message poison, the handler's own error and, for an
// exhausted message, the attempts it was given; an empty reason means err is not Poison's
// business.
func poisonReason(err error) (deadletter.Reason, error, int) {
	var ex *millrace.ExhaustedError
	if errors.As(err, &ex) {
		if ex.Err != nil {
			return deadletter.Exhausted, ex.Err, ex.Attempts
		}
		return deadletter.Exhausted, ex, ex.Attempts
	}
	var oe *millrace.OutcomeError
	if !errors.As(err, &oe) {
		return "", err, 0
	}
	switch {
	case oe.Malformed:
		return deadletter.Malformed, oe.Err, 0
	case oe.Outcome == millrace.OutcomeDiscard:
		return deadletter.Discarded, oe.Err, 0
	}
	return "", err, 0
}

// record builds the dead letter of msg; attempts, when positive, overrides the delivery's
// attempt number (a delivery past MaxAttempts records the attempts the handler was given).
func record(msg *message.Message, reason deadletter.Reason, cause error, attempts int, broker string, at time.Time) deadletter.Record {
	a := millrace.AttemptFrom(msg)
	// A delivery past MaxAttempts never reached the handler: its error is millrace's own text,
	// whose Go types would say nothing about the failure.
	called := a.MaxAttempts <= 0 || a.Number <= a.MaxAttempts
	if attempts > 0 {
		a.Number = attempts
	}
	if a.Broker != "" {
		broker = a.Broker
	}
	topic := a.OriginalTopic
	if topic == "" {
		topic = message.SubscribeTopicFromCtx(msg.Context())
	}
	first := a.FirstAttemptAt
	if first.IsZero() || a.Number <= 1 {
		first = at
	}
	rec := deadletter.Record{
		UUID:           msg.UUID,
		Payload:        msg.Payload,
		Metadata:       msg.Metadata,
		Reason:         reason,
		Attempts:       max(a.Number, 1),
		LastError:      millrace.TruncateError(cause.Error()),
		OriginalTopic:  topic,
		OriginalKey:    a.OriginalKey,
		Broker:         broker,
		NativeID:       a.NativeID,
		Handler:        message.HandlerNameFromCtx(msg.Context()),
		FirstFailureAt: first,
		LastFailureAt:  at,
	}
	if called {
		rec.ErrorTypes, rec.PanicStack = deadletter.ErrorTypes(cause), panicStack(cause)
	}
	rec.Trace = traceparent(trace.SpanContextFromContext(msg.Context()))
	return rec
}

// traceparent is the W3C traceparent of the delivery's span, which telemetry's Outer (outside
// Poison) put in the message context; "" without one (tracing off). It goes into the record
// itself, not only the metadata: adapters that write the dead letter from the broker's original
// content (Redis Streams, NATS) drop what the attempt wrote into the metadata.
func traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// panicStack returns the stack of the recovered panic in cause's chain, from the panic on
// (the frames of runtime/debug.Stack and of Recover's deferred function above it say nothing
// about the handler), bounded as the record writes it; "" when cause holds no panic.
func panicStack(cause error) string {
	var pe *millrace.PanicError
	if !errors.As(cause, &pe) || len(pe.Stack) == 0 {
		return ""
	}
	s := string(pe.Stack)
	if at := strings.Index(s, "\npanic("); at >= 0 {
		if first := strings.IndexByte(s, '\n'); first < at {
			s = s[:first+1] + s[at+1:] // keep the "goroutine N [running]:" line
		}
	}
	return deadletter.BoundPanicStack(s)
}
