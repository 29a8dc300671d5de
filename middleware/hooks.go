package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// RetryEvent is what RetryConfig.OnRetry is told about a retry the adapter has scheduled.
type RetryEvent struct {
	// Attempt is the attempt that failed (Number at least 1, MaxAttempts the policy's), the
	// last of its delivery (Attempt.Delivery). The next delivery, Attempt.NextDelivery(),
	// starts at attempt RetryPolicy.FirstAttemptOf of it: Number+1, or later when this
	// delivery's immediate attempts were cut short.
	Attempt millrace.Attempt
	// Delay is the delay asked of the adapter (the policy's, or a RetryAfter capped at the
	// adapter's maximum). An adapter with fixed delay tiers may round it up to its next tier.
	Delay time.Duration
	// Err is the attempt's error: the cause, without the OutcomeError around it.
	Err error
	// FailedAt is when the attempt failed, as given to the adapter.
	FailedAt time.Time
}

// DeadLetterEvent is what PoisonConfig.OnDeadLetter is told about a dead letter the adapter has
// written.
type DeadLetterEvent struct {
	// Record is the dead letter as written: Reason (exhausted, malformed, or discarded when
	// DeadLetterDiscards is on), Attempts, LastError and the rest of the failure context.
	Record deadletter.Record
	// Err is the error that made the message poison, whole (Record.LastError is its text,
	// truncated): the handler's error on the last attempt or the Malformed or Discard cause,
	// without the OutcomeError or ExhaustedError around it (Record.Reason says which); for a
	// delivery that arrived past MaxAttempts, an error saying the handler was not called.
	Err error
}

// OnRetryFunc is called once per retry, after the adapter's ScheduleRetry returned nil.
type OnRetryFunc func(ctx context.Context, msg *message.Message, ev RetryEvent)

// OnDeadLetterFunc is called once per dead letter, after the adapter's DeadLetter returned nil.
type OnDeadLetterFunc func(ctx context.Context, msg *message.Message, ev DeadLetterEvent)

// callHook runs a hook on the calling goroutine and turns a panic in it into one Error log
// line with the stack, so a broken hook never changes what happens to the message: the retry
// or dead letter is already written when it runs, and the message is acknowledged (or nacked
// for a native redelivery) as it would be without the hook. It sits apart from retryFailed and
// poisonFailed so that its deferred recover is not part of their frames.
func callHook(ctx context.Context, logger *slog.Logger, hook, uuid string, call func()) {
	defer func() {
		if v := recover(); v != nil {
			logger.LogAttrs(ctx, slog.LevelError, "millrace: hook panicked; the message is handled as without it",
				slog.String("hook", hook), slog.String("message_uuid", uuid),
				slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
		}
	}()
	call()
}
