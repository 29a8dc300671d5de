package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/satmath"
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
	// Budget is the delivery's processing budget (the one Budget, inside Retry, is given).
	// With Policy.Immediate > 0 the delivery's attempts share it: Retry puts a clock in the
	// message context, which the inner Budget starts when the first attempt reaches it (after
	// any wait in an outage breaker above it), so all the attempts together end by one
	// deadline, and no immediate attempt starts once it has passed. 0: no shared deadline
	// (each attempt then gets the inner Budget's own, and a delivery can run for Immediate+1
	// budgets, longer than a BudgetBounded adapter holds the message: give it the same Budget).
	Budget time.Duration
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
	// Error; the message is handled as without the hook. Nil costs nothing. Immediate attempts
	// (Policy.Immediate) schedule nothing and call no hook: OnRetry is called for the delayed
	// retry after the delivery's last failed attempt.
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
//
// With Policy.Immediate > 0 a Retry outcome first calls the rest of the stack again at once,
// up to Immediate times per delivery (see millrace.RetryPolicy): each call with an Attempt of
// its own in the message context (Number one higher, the same Delivery), all within the one
// deadline of RetryConfig.Budget. The immediate attempts stop at the first outcome that is
// not a plain Retry (success, Discard, Malformed, a RetryAfter, which asks for its delay, or
// an exhausted error), at MaxAttempts, once the deadline has passed, once the message's own
// context is done (shutdown), and where Policy.MaxElapsed would be passed; the last failure
// is then handled as above. The messages a failed attempt returned are dropped.
//
// With Policy.MaxElapsed > 0 a retry (immediate or delayed) that would start later than
// Attempt.FirstAttemptAt+MaxElapsed is not made: the message is exhausted, with an
// ExhaustedError whose MaxElapsed, Elapsed and NextDelay say so. An Attempt without a
// FirstAttemptAt is not limited by it.
func Retry(s RetryScheduler, cfg RetryConfig) message.HandlerMiddleware {
	logger, now := defaults(cfg.Logger, cfg.Now)
	return func(h message.HandlerFunc) message.HandlerFunc {
		if cfg.Policy.Immediate > 0 {
			return func(msg *message.Message) ([]*message.Message, error) {
				return retryImmediately(s, &cfg, logger, now, h, msg)
			}
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			return retryFailed(s, &cfg, logger, now, msg, out, err)
		}
	}
}

// retryImmediately runs h for one delivery under a policy with immediate attempts: the
// delivery's shared budget clock, then up to Immediate more calls while immediateAgain allows,
// each with its own Attempt, then retryFailed for the last failure. The message context is
// the delivery's own again when it returns (without the deadline, with the last attempt's
// Attempt for Poison's record).
func retryImmediately(s RetryScheduler, cfg *RetryConfig, logger *slog.Logger, now func() time.Time,
	h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	base := msg.Context()
	ctx := base
	var clock *deliveryClock
	if cfg.Budget > 0 {
		// The shared budget starts when the first attempt reaches the Budget layer (inside an
		// outage breaker), not here: a wait in the breaker is not the handler's time, and a
		// deadline set here would end that wait and hand the message back, a delivery lost.
		clock = &deliveryClock{budget: cfg.Budget}
		ctx = context.WithValue(base, deliveryClockKey{}, clock)
		msg.SetContext(ctx)
	}
	out, err := h(msg)
	if err == nil {
		msg.SetContext(base)
		return out, nil
	}
	if clock != nil {
		clock.start(time.Now()) // no Budget layer below (a hand-built stack): from now
	}
	return retryAgain(s, cfg, logger, now, h, msg, base, ctx, clock, out, err)
}

// retryAgain is retryImmediately after a failed first attempt: the immediate attempts, then
// retryFailed. It is apart so that its frame stays off the stack of a message that succeeds
// at once; ctx is the delivery's context with the shared budget clock (base without a Budget).
func retryAgain(s RetryScheduler, cfg *RetryConfig, logger *slog.Logger, now func() time.Time, h message.HandlerFunc,
	msg *message.Message, base, ctx context.Context, clock *deliveryClock, out []*message.Message, err error) ([]*message.Message, error) {
	a, ok := millrace.AttemptFromContext(base)
	if !ok { // no attempt middleware: the first attempt of the first delivery
		a = millrace.Attempt{Number: 1, Delivery: 1, MaxAttempts: cfg.Policy.MaxAttempts}
	}
	a.Number = max(a.Number, 1)
	if a.Delivery <= 0 {
		a.Delivery = cfg.Policy.DeliveryOf(a.Number)
	}
	last := min(satmath.AddInt(cfg.Policy.FirstAttemptOf(a.Delivery), cfg.Policy.Immediate), cfg.Policy.MaxAttempts)
	for a.Number < last && immediateAgain(cfg, base, clock, err, &a, now) {
		if logger.Enabled(base, slog.LevelDebug) {
			logImmediate(base, logger, msg.UUID, a.Number, cfg.Policy.MaxAttempts, err)
		}
		next := a
		next.Number++
		msg.SetContext(millrace.WithAttempt(ctx, &next))
		nout, nerr := h(msg)
		if errors.Is(nerr, ErrBreakerOpen) {
			// The outage breaker opened: the attempt was not made. The delivery ends with the
			// last attempt that was, and its error, which the dead letter and the hooks report.
			break
		}
		a, out, err = next, nout, nerr
		if err == nil {
			break
		}
	}
	msg.SetContext(millrace.WithAttempt(base, &a))
	if err == nil {
		return out, nil
	}
	return retryFailed(s, cfg, logger, now, msg, out, err)
}

// immediateAgain reports whether the failure err of attempt a may be tried again at once: a
// plain Retry outcome (not exhausted, no RetryAfter delay), the message's context not done
// (shutdown), the delivery's deadline not passed, and MaxElapsed not reached.
func immediateAgain(cfg *RetryConfig, base context.Context, clock *deliveryClock, err error, a *millrace.Attempt, now func() time.Time) bool {
	oe := millrace.Classify(err, nil)
	if oe.Outcome != millrace.OutcomeRetry || oe.Delay > 0 || errors.Is(err, millrace.ErrExhausted) {
		return false
	}
	if base.Err() != nil || clock.expired(time.Now()) {
		return false
	}
	_, over := pastElapsed(&cfg.Policy, a, now(), 0)
	return !over
}

// pastElapsed returns the time since a's first attempt and whether it, plus delay, passes the
// policy's MaxElapsed (never without a MaxElapsed or a FirstAttemptAt).
func pastElapsed(p *millrace.RetryPolicy, a *millrace.Attempt, at time.Time, delay time.Duration) (time.Duration, bool) {
	if p.MaxElapsed <= 0 || a.FirstAttemptAt.IsZero() {
		return 0, false
	}
	elapsed := max(at.Sub(a.FirstAttemptAt), 0)
	return elapsed, satmath.Add(elapsed, delay) > p.MaxElapsed
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
	if a.Delivery <= 0 {
		a.Delivery = cfg.Policy.DeliveryOf(a.Number)
	}
	if a.Number >= cfg.Policy.MaxAttempts || cfg.Policy.FirstAttemptOf(satmath.AddInt(a.Delivery, 1)) > cfg.Policy.MaxAttempts {
		// The last attempt, or the last delivery's immediate attempts cut short: no later
		// delivery has an attempt left.
		return nil, &millrace.ExhaustedError{Attempts: a.Number, Err: oe.Err}
	}
	delay := cfg.Policy.Delay(a.Delivery)
	if oe.Delay > 0 {
		delay = oe.Delay
		if cfg.MaxDelay > 0 {
			delay = min(delay, cfg.MaxDelay)
		}
	}
	failedAt := now()
	if cfg.Policy.MaxElapsed > 0 {
		if err := elapsedExhausted(&cfg.Policy, &a, failedAt, delay, oe.Err); err != nil {
			return nil, err
		}
	}
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

// elapsedExhausted returns the ExhaustedError of attempt a when its retry after delay would
// pass the policy's MaxElapsed, else nil.
func elapsedExhausted(p *millrace.RetryPolicy, a *millrace.Attempt, failedAt time.Time, delay time.Duration, cause error) error {
	elapsed, over := pastElapsed(p, a, failedAt, delay)
	if !over {
		return nil
	}
	return &millrace.ExhaustedError{Attempts: a.Number, Err: cause, MaxElapsed: p.MaxElapsed, Elapsed: elapsed, NextDelay: delay}
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

func logImmediate(ctx context.Context, logger *slog.Logger, uuid string, attempt, maxAttempts int, cause error) {
	logger.LogAttrs(ctx, slog.LevelDebug, "millrace: attempt failed, trying again at once",
		slog.String("message_uuid", uuid), slog.String("outcome", millrace.OutcomeRetry.String()), slog.Int("attempt", attempt),
		slog.Int("max_attempts", maxAttempts), slog.String("error", cause.Error()))
}

func logRetryScheduled(ctx context.Context, logger *slog.Logger, uuid string, attempt, maxAttempts int, delay time.Duration, cause error) {
	logger.LogAttrs(ctx, slog.LevelInfo, "millrace: attempt failed, retry scheduled",
		slog.String("message_uuid", uuid), slog.String("outcome", millrace.OutcomeRetry.String()), slog.Int("attempt", attempt),
		slog.Int("max_attempts", maxAttempts),
		slog.Duration("delay", delay), slog.String("error", cause.Error()))
}
