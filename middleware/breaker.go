package middleware

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// BreakerState is the state of an outage breaker.
type BreakerState uint8

const (
	// BreakerClosed: messages are handled as they arrive; consecutive Retry outcomes are counted.
	BreakerClosed BreakerState = iota + 1
	// BreakerOpen: arriving messages wait in the breaker, unsettled, without calling the handler.
	BreakerOpen
	// BreakerHalfOpen: one waiting message, the probe, is being handled.
	BreakerHalfOpen
)

// String returns the state's lower-case name, as logged.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	default:
		return "BreakerState(" + strconv.Itoa(int(s)) + ")"
	}
}

// BreakerEvent is what BreakerConfig.OnStateChange is told about a change of state.
type BreakerEvent struct {
	// Handler is the router handler's name (message.HandlerNameFromCtx of the message that
	// caused the change); empty outside a Watermill router.
	Handler string
	// From and To are the states before and after the change.
	From, To BreakerState
	// Failures is the number of consecutive Retry outcomes counted at the change (0 on close).
	Failures int
	// Err is the error that opened the breaker or failed the probe; nil otherwise.
	Err error
	// At is when the change happened (BreakerConfig.Now).
	At time.Time
}

// BreakerConfig configures Breaker.
type BreakerConfig struct {
	// Threshold is the number of consecutive Retry outcomes that opens the breaker. Required, >= 1.
	Threshold int
	// ProbeInterval is the time between probes while the breaker is open: after it opens, and
	// after each failed probe, one waiting message is let through once it has passed.
	// Default 1 s.
	ProbeInterval time.Duration
	// MaxHold is the longest a message waits in an open breaker; then it is handed back to the
	// broker unhandled (nacked) without calling the handler. 0 = until the breaker closes or the
	// message's context ends. The router sets it for adapters that are a millrace.BudgetBounded
	// (see Bounded), since past their bound the broker gives the message to another consumer.
	MaxHold time.Duration
	// Logger receives a Warn line when the breaker opens and when it closes, and an Info line per
	// probe. Default: slog.Default().
	Logger *slog.Logger
	// OnStateChange, when set, is called on every change of state, on the goroutine of the message
	// that caused it, after the change (other messages already see the new state). It should be
	// quick; a panic in it is recovered and logged at Error.
	OnStateChange func(ctx context.Context, ev BreakerEvent)
	// Now returns the current time, for BreakerEvent.At. Default: time.Now.
	Now func() time.Time

	// afterFunc runs f after d, like time.AfterFunc; tests replace it. Default: time.AfterFunc.
	afterFunc func(d time.Duration, f func()) (stop func() bool)
}

// DefaultProbeInterval is BreakerConfig.ProbeInterval's default.
const DefaultProbeInterval = time.Second

// Validate checks the fields.
func (c BreakerConfig) Validate() error {
	switch {
	case c.Threshold < 1:
		return &millrace.ConfigError{Field: "BreakerConfig.Threshold", Value: strconv.Itoa(c.Threshold),
			Rule: "must be at least 1 (the consecutive Retry outcomes that open the breaker)"}
	case c.ProbeInterval < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.ProbeInterval", Value: c.ProbeInterval.String(),
			Rule: "must not be negative (0 means " + DefaultProbeInterval.String() + ")"}
	case c.MaxHold < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.MaxHold", Value: c.MaxHold.String(),
			Rule: "must not be negative (0 means until the breaker closes or the message's context ends)"}
	}
	return nil
}

// Bounded returns c with MaxHold set, when it is 0, for an adapter that hands a message to
// another consumer once it has been held longer than maxBudget (a millrace.BudgetBounded), for
// handlers that run at most budget. The router calls it.
func (c BreakerConfig) Bounded(maxBudget, budget time.Duration) BreakerConfig {
	if c.MaxHold == 0 && maxBudget > 0 {
		c.MaxHold = max(budget, time.Millisecond)
	}
	return c
}

// Breaker is the outage breaker. It counts the consecutive Retry outcomes of the handler it
// wraps (Success, Discard and Malformed reset the count: the dependency answered; a shutdown
// counts nothing) and, at Threshold, opens: arriving messages then wait in the breaker without
// calling the handler and without being settled, so they burn no attempt, and the adapter's
// bounded in-flight window fills and it stops fetching. Every ProbeInterval one waiting message
// is let through as a probe; its success (or any other handled message's) closes the breaker and
// releases every waiting message to the handler, a Retry restarts the interval. A message that
// has waited MaxHold is nacked without calling the handler; one whose context ends returns the
// context's error.
//
// Each handler the returned middleware wraps has a breaker of its own. Install it inside Retry
// and outside Classify, so the errors it counts carry their outcome.
func Breaker(cfg BreakerConfig) message.HandlerMiddleware {
	logger, now := defaults(cfg.Logger, cfg.Now)
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	after := cfg.afterFunc
	if after == nil {
		after = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		b := &breaker{cfg: &cfg, logger: logger, now: now, after: after, state: BreakerClosed}
		return func(msg *message.Message) ([]*message.Message, error) {
			b.mu.Lock()
			if b.state == BreakerClosed {
				b.mu.Unlock()
				return b.run(h, msg, false)
			}
			closed, probe := b.closed, b.probe
			b.mu.Unlock()
			return b.wait(h, msg, closed, probe)
		}
	}
}

type breaker struct {
	cfg    *BreakerConfig
	logger *slog.Logger
	now    func() time.Time
	after  func(time.Duration, func()) func() bool

	mu       sync.Mutex
	state    BreakerState
	failures int
	// closed is closed when the breaker closes; probe holds the token of the next probe. Both
	// are made anew each time the breaker opens.
	closed chan struct{}
	probe  chan struct{}
	stop   func() bool // stops the probe timer
}

// wait holds msg while the breaker is open.
func (b *breaker) wait(h message.HandlerFunc, msg *message.Message, closed, probe chan struct{}) ([]*message.Message, error) {
	var hold chan struct{}
	if b.cfg.MaxHold > 0 {
		hold = make(chan struct{})
		stop := b.after(b.cfg.MaxHold, func() { close(hold) })
		defer stop()
	}
	ctx := msg.Context()
	select {
	case <-closed:
		return b.run(h, msg, false)
	case <-probe:
		b.mu.Lock()
		isProbe := b.probe == probe && b.state == BreakerOpen
		if isProbe {
			b.state = BreakerHalfOpen
		}
		failures := b.failures
		b.mu.Unlock()
		if !isProbe {
			// A token of an open period that has ended: the breaker closed meanwhile.
			return b.run(h, msg, false)
		}
		b.changed(msg, BreakerOpen, BreakerHalfOpen, failures, nil)
		return b.run(h, msg, true)
	case <-ctx.Done():
		err := ctx.Err()
		if errors.Is(err, context.Canceled) {
			// A shutdown: the router nacks; Retry and Poison pass a canceled message's error on.
			return nil, err
		}
		// Any other end (a deadline on the message's context): give it back without an error
		// that Retry would turn into a scheduled retry.
		msg.Nack()
		return nil, nil
	case <-hold:
		b.logger.LogAttrs(ctx, slog.LevelDebug, "millrace: breaker open, message handed back unhandled after MaxHold",
			slog.String("message_uuid", msg.UUID), slog.Duration("max_hold", b.cfg.MaxHold))
		// The router's Ack after the nil return is then a no-op, as after Retry's nack.
		msg.Nack()
		return nil, nil
	}
}

// run calls the handler and counts its outcome.
func (b *breaker) run(h message.HandlerFunc, msg *message.Message, probe bool) ([]*message.Message, error) {
	out, err := h(msg)
	b.count(msg, err, probe)
	return out, err
}

func (b *breaker) count(msg *message.Message, err error, probe bool) {
	ctx := msg.Context()
	failed := false
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// A shutdown: nothing is counted. A probe gives its turn to the next waiting message.
			if probe {
				b.mu.Lock()
				if b.state == BreakerHalfOpen {
					b.state = BreakerOpen
					offer(b.probe)
				}
				b.mu.Unlock()
			}
			return
		}
		failed = millrace.Classify(err, nil).Outcome == millrace.OutcomeRetry
	}
	b.mu.Lock()
	if !failed {
		b.failures = 0
		if b.state == BreakerClosed {
			b.mu.Unlock()
			return
		}
		from := b.state
		b.state = BreakerClosed
		close(b.closed)
		b.stop()
		b.mu.Unlock()
		b.changed(msg, from, BreakerClosed, 0, nil)
		return
	}
	b.failures++
	failures := b.failures
	switch {
	case b.state == BreakerClosed && failures >= b.cfg.Threshold:
		b.state = BreakerOpen
		b.closed = make(chan struct{})
		b.probe = make(chan struct{}, 1)
		b.arm()
		b.mu.Unlock()
		b.changed(msg, BreakerClosed, BreakerOpen, failures, err)
	case b.state == BreakerHalfOpen && probe:
		b.state = BreakerOpen
		b.arm()
		b.mu.Unlock()
		b.changed(msg, BreakerHalfOpen, BreakerOpen, failures, err)
	default:
		// Closed below the threshold, or a message admitted before the breaker opened that
		// failed while it is open: only the count changes.
		b.mu.Unlock()
	}
}

// arm starts the probe timer of the current open period. b.mu is held.
func (b *breaker) arm() {
	probe := b.probe
	b.stop = b.after(b.cfg.ProbeInterval, func() { offer(probe) })
}

// offer puts the probe token in probe unless it is already there.
func offer(probe chan struct{}) {
	select {
	case probe <- struct{}{}:
	default:
	}
}

// changed logs a change of state and calls the hook.
func (b *breaker) changed(msg *message.Message, from, to BreakerState, failures int, err error) {
	ctx := msg.Context()
	ev := BreakerEvent{Handler: message.HandlerNameFromCtx(ctx), From: from, To: to, Failures: failures, Err: err, At: b.now()}
	level := slog.LevelInfo
	if to == BreakerClosed || from == BreakerClosed {
		level = slog.LevelWarn
	}
	if b.logger.Enabled(ctx, level) {
		attrs := []slog.Attr{slog.String("handler", ev.Handler), slog.String("state", to.String()),
			slog.String("from", from.String()), slog.Int("consecutive_failures", failures)}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		b.logger.LogAttrs(ctx, level, "millrace: outage breaker "+to.String(), attrs...)
	}
	if b.cfg.OnStateChange != nil {
		hook := b.cfg.OnStateChange
		callHook(ctx, b.logger, "OnStateChange", msg.UUID, func() { hook(ctx, ev) })
	}
}
