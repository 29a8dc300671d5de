package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// RetryScheduler arranges delayed redeliveries; every millrace.Adapter is one.
type RetryScheduler interface {
	ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error)
}

// RetryConfig configures Retry.
type RetryConfig struct {
	// Policy bounds the attempts and gives the delays. Required.
	Policy millrace.RetryPolicy
	// MaxDelay caps a delay asked for with millrace.RetryAfter (the adapter's maximum); 0 = no cap.
	MaxDelay time.Duration
	// Logger receives one Info line per scheduled retry (attempt, delay, cause). Default: slog.Default().
	Logger *slog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
	// OnRetry, when set, is called once for every retry, after the adapter's ScheduleRetry
	// returned nil (never when it failed: the original is then nacked, not acknowledged, and
	// the next delivery decides again). It runs on the message's goroutine, after the log line
	// and (for millrace.NackOriginal) the nack, and before Retry returns: a slow hook delays
	// this message's ack and the Close of the router, so it should be quick (hand slow work,
	// such as a network call, to a goroutine or queue of its own). Its ctx is the message's
	// context, without the handler's Budget deadline. A panic in it is recovered and logged at
	// Error; the message is handled as without the hook. Nil costs nothing.
	OnRetry OnRetryFunc
}

// Validate checks the policy.
func (c RetryConfig) Validate() error { return c.Policy.Validate() }

// Retry turns a Retry outcome below MaxAttempts into a delayed redelivery scheduled through s,
// and a Retry on the last attempt into a *millrace.ExhaustedError for Poison. It never sleeps:
// the next message is handled while this one waits. Once the retry is scheduled it returns nil:
// the original is then acked (millrace.AckOriginal) or, when the broker redelivers it itself
// (millrace.NackOriginal), nacked here. If scheduling fails, the returned error wraps
// millrace.ErrRetryPublishFailed, the router nacks, and the original is never acknowledged.
func Retry(s RetryScheduler, cfg RetryConfig) message.HandlerMiddleware {
	logger, now := defaults(cfg.Logger, cfg.Now)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			return retryFailed(s, &cfg, logger, now, msg, out, err)
		}
	}
}

// retryFailed is Retry's handling of a failed message, apart from the closure for the same
// reason as poisonFailed: its frame stays off the stack of every message that succeeds.
func retryFailed(s RetryScheduler, cfg *RetryConfig, logger *slog.Logger, now func() time.Time,
	msg *message.Message, out []*message.Message, err error) ([]*message.Message, error) {
	oe := millrace.Classify(err, nil)
	if oe.Outcome != millrace.OutcomeRetry || errors.Is(err, millrace.ErrExhausted) {
		return out, err
	}
	ctx := msg.Context()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The subscription is shutting down: this is no failure of the message.
		return nil, err
	}
	a := millrace.AttemptFrom(msg)
	a.Number = max(a.Number, 1)
	if a.Number >= cfg.Policy.MaxAttempts {
		return nil, &millrace.ExhaustedError{Attempts: a.Number, Err: oe.Err}
	}
	delay := cfg.Policy.Delay(a.Number)
	if oe.Delay > 0 {
		delay = oe.Delay
		if cfg.MaxDelay > 0 {
			delay = min(delay, cfg.MaxDelay)
		}
	}
	failedAt := now()
	disp, serr := s.ScheduleRetry(ctx, msg, millrace.RetryRequest{Attempt: a, Delay: delay, Err: oe.Err, FailedAt: failedAt})
	if serr != nil {
		return nil, retryPublishFailed(serr, a.Number, oe.Err)
	}
	if logger.Enabled(ctx, slog.LevelInfo) {
		logRetryScheduled(ctx, logger, msg.UUID, a.Number, cfg.Policy.MaxAttempts, delay, oe.Err)
	}
	if disp == millrace.NackOriginal {
		// The broker redelivers the original itself; nack it here and report no error,
		// so a planned retry is not logged by the router as a handler failure. The
		// router's own Ack after a nil return is then a no-op.
		msg.Nack()
	}
	if cfg.OnRetry != nil {
		retried(ctx, cfg.OnRetry, logger, msg, &a, delay, oe.Err, failedAt)
	}
	return nil, nil
}

// retried calls the OnRetry hook. It takes the attempt by pointer and builds the event itself,
// for the reason given at retryPublishFailed: retryFailed's frame is on the stack while the
// adapter schedules the retry.
func retried(ctx context.Context, hook OnRetryFunc, logger *slog.Logger, msg *message.Message,
	a *millrace.Attempt, delay time.Duration, cause error, failedAt time.Time) {
	ev := RetryEvent{Attempt: *a, Delay: delay, Err: cause, FailedAt: failedAt}
	callHook(ctx, logger, "OnRetry", msg.UUID, func() { hook(ctx, msg, ev) })
}

// retryPublishFailed and logRetryScheduled keep their argument lists off retryFailed's frame:
// a retry's whole path (this, the adapter's ScheduleRetry, the producer) runs on the
// message's goroutine, and a few hundred bytes more make its stack grow (and be copied)
// once more.
func retryPublishFailed(serr error, attempt int, cause error) error {
	return fmt.Errorf("%w: %w (attempt %d failed with: %w)", millrace.ErrRetryPublishFailed, serr, attempt, cause)
}

func logRetryScheduled(ctx context.Context, logger *slog.Logger, uuid string, attempt, maxAttempts int, delay time.Duration, cause error) {
	logger.LogAttrs(ctx, slog.LevelInfo, "millrace: attempt failed, retry scheduled",
		slog.String("message_uuid", uuid), slog.Int("attempt", attempt),
		slog.Int("max_attempts", maxAttempts),
		slog.Duration("delay", delay), slog.String("error", cause.Error()))
}
