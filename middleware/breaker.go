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
	// BreakerHalfOpen: one waiting message, the probe, is being handled; the others wait on.
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
	// WindowCalls and WindowFailures are the outcomes and the Retry outcomes within
	// BreakerConfig.Window at the change (both 0 without FailureRate, and on close).
	WindowCalls, WindowFailures int
	// Waiting is the number of messages waiting in the breaker at the change; on close, those
	// it releases to the handler. While the breaker is open it grows up to the adapter's
	// in-flight window (see Breaker).
	Waiting int
	// Err is the error that opened the breaker or failed the probe; nil otherwise.
	Err error
	// At is when the change happened (BreakerConfig.Now).
	At time.Time
}

// BreakerConfig configures Breaker.
type BreakerConfig struct {
	// Threshold is the number of consecutive Retry outcomes that opens the breaker; 0 = off.
	// Threshold or FailureRate is required.
	Threshold int
	// FailureRate, when positive (at most 1), also opens the breaker when Retry outcomes make
	// at least this share of the handler's outcomes within the last Window, once there were at
	// least MinCalls of them: for a dependency that fails often but not every time, which never
	// makes Threshold consecutive failures. 0 = off.
	FailureRate float64
	// Window is the span FailureRate looks back over, in 10 slices (outcomes leave it a slice
	// at a time). Default 10 s when FailureRate is set.
	Window time.Duration
	// MinCalls is the least number of outcomes within Window before FailureRate can open the
	// breaker. Default 10 when FailureRate is set.
	MinCalls int
	// ProbeInterval is the time between probes while the breaker is open: once it has passed
	// since the breaker opened, or since the last probe failed, one waiting message is let
	// through. Default DefaultProbeInterval (1 s).
	ProbeInterval time.Duration
	// MaxHold is the longest a message waits in an open breaker; then it is handed back to the
	// broker unhandled (nacked) without calling the handler, and the adapter delivers it again
	// later, counting one more delivery (see Breaker). 0 = until the breaker closes, the
	// message's context ends or Stop is closed. The router sets it for adapters that are a
	// millrace.BudgetBounded: see Bounded.
	MaxHold time.Duration
	// Immediate is the handler's RetryPolicy.Immediate (the router sets it). An immediate
	// attempt (not the first of its delivery) that meets a breaker that is not closed does not
	// wait: it fails at once with ErrBreakerOpen (a Retry, not counted by the breaker), and
	// Retry ends the delivery with the attempt before it, whose error the retry and the dead
	// letter report, instead of the attempt holding the delivery's budget in the breaker.
	Immediate int
	// Stop, when closed, ends the holding: every waiting message, and every message that
	// arrives after it, is handled as with the breaker closed (one that waited past the room
	// its claim leaves, see Bounded, is handed back instead). Close it when the consumer shuts
	// down (router.Router.Close does): the adapters keep a message's context alive through a
	// shutdown, so that running handlers finish, and a message waiting in the breaker would
	// otherwise hold the shutdown (and, on Kafka, a rebalance) until MaxHold or the router's
	// CloseTimeout. Handing the messages back instead would not do: an adapter that redelivers
	// a nacked message soon (memory at once, RabbitMQ after RequeueDelay, Kafka after
	// NackDelay) gives it back to the closing consumer, counting a delivery each time, until
	// its subscription stops; on memory a message was dead-lettered unhandled that way.
	Stop <-chan struct{}
	// Logger receives a Warn line when the breaker opens and when it closes, an Info line per
	// probe and per failed probe, and a Debug line per message handed back. Default:
	// slog.Default().
	Logger *slog.Logger
	// OnStateChange, when set, is called on every change of state with the message that caused
	// it, on that message's goroutine, after the change (other messages already see the new
	// state; two changes close together may reach the hook out of order, BreakerEvent.At tells).
	// It should be quick; a panic in it is recovered and logged at Error.
	OnStateChange func(ctx context.Context, ev BreakerEvent)
	// Now returns the current time. Default: time.Now.
	Now func() time.Time

	// bounded is set by Bounded; room is then the longest a message may wait and still be
	// handled within its claim on the message.
	bounded bool
	room    time.Duration
	// afterFunc runs f after d, like time.AfterFunc; tests replace it. Default: time.AfterFunc.
	afterFunc func(d time.Duration, f func()) (stop func() bool)
	// onWait, when set (tests), is called when a message is about to block in the open breaker.
	onWait func(msg *message.Message)
}

// Defaults of BreakerConfig.
const (
	// DefaultProbeInterval is BreakerConfig.ProbeInterval's default.
	DefaultProbeInterval = time.Second
	// DefaultBreakerWindow is BreakerConfig.Window's default when FailureRate is set.
	DefaultBreakerWindow = 10 * time.Second
	// DefaultBreakerMinCalls is BreakerConfig.MinCalls's default when FailureRate is set.
	DefaultBreakerMinCalls = 10
)

// Validate checks the fields.
func (c BreakerConfig) Validate() error {
	switch {
	case c.Threshold < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.Threshold", Value: strconv.Itoa(c.Threshold),
			Rule: "must not be negative (the consecutive Retry outcomes that open the breaker; 0 = off)"}
	case c.FailureRate < 0 || c.FailureRate > 1 || c.FailureRate != c.FailureRate:
		return &millrace.ConfigError{Field: "BreakerConfig.FailureRate", Value: strconv.FormatFloat(c.FailureRate, 'g', -1, 64),
			Rule: "must be between 0 (off) and 1 (the share of Retry outcomes within Window that opens the breaker)"}
	case c.Threshold == 0 && c.FailureRate == 0:
		return &millrace.ConfigError{Field: "BreakerConfig.Threshold", Value: "0",
			Rule: "must be at least 1 unless FailureRate is set: a breaker needs something that opens it"}
	case c.Window < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.Window", Value: c.Window.String(),
			Rule: "must not be negative (0 means 10s)"}
	case c.MinCalls < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.MinCalls", Value: strconv.Itoa(c.MinCalls),
			Rule: "must not be negative (0 means 10)"}
	case c.ProbeInterval < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.ProbeInterval", Value: c.ProbeInterval.String(),
			Rule: "must not be negative (0 means " + DefaultProbeInterval.String() + ")"}
	case c.MaxHold < 0:
		return &millrace.ConfigError{Field: "BreakerConfig.MaxHold", Value: c.MaxHold.String(),
			Rule: "must not be negative (0 means until the breaker closes)"}
	}
	return nil
}

// Bounded returns c for an adapter that gives a message to another consumer once it has been
// held for about maxBudget (a millrace.BudgetBounded: the Redis Streams MinIdle, the SQS
// visibility timeout, the JetStream AckWait, each bounded by the adapter's MaxBudget), for
// handlers that run for at most budget. The router calls it. A message may then wait only as
// long as its handler still fits in the claim afterwards, room = maxBudget - budget:
//
//   - MaxHold, when 0 or longer, becomes room, or maxBudget when there is no room (budget =
//     maxBudget, the router's default Budget);
//   - a message that waited longer than room is handed back (nacked) instead of handled when the
//     breaker closes or picks it as the probe, since its handler could outlive its claim. With
//     no room, only a message that arrives while the probe is due can be the probe, and every
//     message that had to wait is handed back: give the breaker room by setting the router's
//     Budget below the adapter's processing budget by the longest outage it should ride out.
func (c BreakerConfig) Bounded(maxBudget, budget time.Duration) BreakerConfig {
	if maxBudget <= 0 {
		return c
	}
	c.bounded = true
	c.room = max(maxBudget-budget, 0)
	limit := c.room
	if limit == 0 {
		limit = maxBudget
	}
	if c.MaxHold == 0 || c.MaxHold > limit {
		c.MaxHold = limit
	}
	return c
}

// Breaker is the outage breaker: it stops a dependency outage from using up every message's
// attempts. It counts the consecutive Retry outcomes of the handler it wraps (Success, Discard
// and Malformed reset the count: the dependency answered; a shutdown counts nothing) and, at
// Threshold (or once Retry outcomes make FailureRate of at least MinCalls outcomes within
// Window), opens: arriving messages then wait in the breaker, unsettled and without calling
// the handler, so they use no attempt, and once the adapter's in-flight window is full it
// stops fetching (the broker keeps the rest). Once ProbeInterval has passed, one waiting
// message goes through as the probe (half-open; the others wait on). Its success, or that of
// any other message handled meanwhile, closes the breaker and releases every waiting message to
// the handler; a Retry opens it again and restarts the interval. A message leaves the breaker
// unhandled when it has waited MaxHold (nacked, error nil: the router's ack
// is then a no-op and Retry and Poison above see a success, so nothing is scheduled or
// dead-lettered) or when its context ends (the context's error for a cancellation, as Retry
// passes a shutdown on; a nack for a deadline). When Stop is closed (the router's Close) the
// holding ends: waiting and arriving messages are handled.
//
// Each handler the returned middleware wraps has a breaker of its own. Install it inside Retry
// and outside Classify (the router does, with router.Config.Breaker), so the errors it counts
// carry their outcome and a probe that fails is retried by the policy like any attempt: a
// probe uses an attempt, a waiting message none. Each immediate attempt of a policy with
// RetryPolicy.Immediate passes through the breaker too. A delivery's first attempt waits like
// any message (the delivery's shared budget starts below the breaker, when the attempt is let
// through); an immediate attempt that meets a breaker that is not closed is not made (see
// BreakerConfig.Immediate), and the delivery ends with the attempt before it and its error.
//
// # What holding costs, per broker
//
// A waiting message stays unsettled in the adapter, so each adapter's bound on unsettled
// messages per subscription (one router handler) is how many wait, and what the broker does
// with an unsettled message over time is what a long wait costs. A message handed back
// (MaxHold) counts one more delivery on every adapter, so it costs an attempt.
//
//   - memory: one message per subscription; the rest stays queued. No bound on the wait.
//   - Redis Streams: Config.Window entries per subscription (default 64); the rest stays in the
//     stream. An entry idle longer than MinIdle is claimed by the recovery pass and delivered
//     again with one more delivery count, so Bounded keeps the wait within MaxBudget - Budget
//     (MaxBudget is ProcessingBudget <= MinIdle); a handed-back entry stays pending until
//     MinIdle and is then delivered again.
//   - RabbitMQ: the subscription hands the router one delivery at a time and waits for its
//     verdict, so one message waits per subscription; up to Config.Prefetch (default 10) more
//     sit delivered but unacknowledged in the channel. No broker bound on the wait (a server
//     consumer timeout, if set, closes the channel and requeues them). A hand-back is a
//     requeue after RequeueDelay.
//   - Kafka: records of different keys, up to Config.MaxInFlight (default 16) per claimed
//     partition, keyless records one at a time; the records behind wait unmarked, and the
//     partition stops taking records at 16 x MaxInFlight. No broker bound on the wait, but a
//     rebalance waits for the records handed out (up to the rebalance timeout, 5 min by
//     default): set MaxHold well below it, or close Stop when the consumer leaves. A hand-back
//     is delivered again after NackDelay.
//   - SQS: the messages one subscription has received and not yet settled, its in-flight
//     bound (see the adapter's documentation); the rest stays in the queue. A received message
//     becomes visible to other consumers when its VisibilityTimeout ends, so
//     Bounded keeps the wait within MaxBudget - Budget (MaxBudget is ProcessingBudget, at least
//     1 s below the visibility timeout); a handed-back message stays hidden until then.
//   - NATS JetStream: Config.Window messages per subscription (default 64); the rest stays in
//     the stream. JetStream delivers a message again after AckWait, so Bounded keeps the wait
//     within MaxBudget - Budget (MaxBudget is ProcessingBudget, below half of AckWait); a
//     handed-back message is nacked with NackDelay.
//
// On the conformance test's outage (one subscription, keyless records, default windows) the
// most messages seen waiting at once were: memory 1, Redis Streams 43, RabbitMQ 1, Kafka 2,
// NATS 43 (of the 40 sent during the outage and the retries coming due); SQS 1 when a
// subscription receives one message at a time, 32 when it may hold 32.
//
// The conformance suite's BreakerHoldsDuringOutage test runs the outage of issue 17 on every
// adapter and logs how many messages waited.
func Breaker(cfg BreakerConfig) message.HandlerMiddleware {
	logger, now := defaults(cfg.Logger, cfg.Now)
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.FailureRate > 0 {
		if cfg.Window <= 0 {
			cfg.Window = DefaultBreakerWindow
		}
		if cfg.MinCalls <= 0 {
			cfg.MinCalls = DefaultBreakerMinCalls
		}
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
			if b.cfg.Immediate > 0 && immediateAttempt(millrace.AttemptFrom(msg), b.cfg.Immediate) {
				// An immediate attempt does not wait: it is not made, and Retry ends the delivery
				// with the attempt before it and schedules the delayed retry.
				b.mu.Unlock()
				return nil, millrace.Retry(ErrBreakerOpen)
			}
			closed, probe := b.closed, b.probe
			b.waiting++
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
	waiting  int
	window   outcomeWindow
	// closed is closed when the breaker closes; probe holds the token of the next probe once
	// it is due. Both are made anew each time the breaker opens from closed.
	closed chan struct{}
	probe  chan struct{}
	stop   func() bool // stops the probe timer
}

// wait holds msg while the breaker is open; b.waiting counts it.
func (b *breaker) wait(h message.HandlerFunc, msg *message.Message, closed, probe chan struct{}) ([]*message.Message, error) {
	// A probe that is due goes to a message that arrives, without waiting.
	select {
	case <-probe:
		return b.probeOrRelease(h, msg, closed, probe, false)
	default:
	}
	var hold chan struct{}
	if b.cfg.MaxHold > 0 {
		hold = make(chan struct{})
		stop := b.after(b.cfg.MaxHold, func() { close(hold) })
		defer stop()
	}
	start := b.now()
	ctx := msg.Context()
	if b.cfg.onWait != nil {
		b.cfg.onWait(msg)
	}
	select {
	case <-closed:
		b.left()
		if b.cfg.bounded && b.now().Sub(start) > b.cfg.room {
			return b.handBack(msg, "released past the room its claim leaves for the handler")
		}
		return b.run(h, msg, false)
	case <-probe:
		waited := b.cfg.bounded && b.now().Sub(start) > b.cfg.room
		return b.probeOrRelease(h, msg, closed, probe, waited)
	case <-ctx.Done():
		b.left()
		err := ctx.Err()
		if errors.Is(err, context.Canceled) {
			// A shutdown: the router nacks; Retry and Poison pass a canceled message's error on.
			return nil, err
		}
		// Any other end (a deadline on the message's context): give it back without an error
		// that Retry would turn into a scheduled retry.
		return b.handBack(msg, "its context ended")
	case <-hold:
		b.left()
		return b.handBack(msg, "MaxHold passed")
	case <-b.cfg.Stop:
		b.left()
		if b.cfg.bounded && b.now().Sub(start) > b.cfg.room {
			return b.handBack(msg, "Stop closed, past the room its claim leaves for the handler")
		}
		return b.run(h, msg, false)
	}
}

// probeOrRelease is the end of a wait by the probe token: msg becomes the probe, unless the
// breaker closed meanwhile (the token is of an open period that has ended; msg is handled as
// released) or msg waited past its room (handed back, the token passed on).
func (b *breaker) probeOrRelease(h message.HandlerFunc, msg *message.Message, closed, probe chan struct{}, pastRoom bool) ([]*message.Message, error) {
	b.mu.Lock()
	b.waiting--
	current := b.probe == probe && b.state == BreakerOpen
	if !current {
		b.mu.Unlock()
		if pastRoom {
			return b.handBack(msg, "released past the room its claim leaves for the handler")
		}
		return b.run(h, msg, false)
	}
	if pastRoom {
		offer(probe)
		b.mu.Unlock()
		return b.handBack(msg, "picked as the probe past the room its claim leaves for the handler")
	}
	select {
	case <-b.cfg.Stop:
		offer(probe)
		b.mu.Unlock()
		return b.run(h, msg, false) // the holding has ended: handled, not as a probe
	default:
	}
	b.state = BreakerHalfOpen
	failures, waiting := b.failures, b.waiting
	b.mu.Unlock()
	b.changed(msg, BreakerEvent{From: BreakerOpen, To: BreakerHalfOpen, Failures: failures, Waiting: waiting})
	return b.run(h, msg, true)
}

// left uncounts a message that stops waiting.
func (b *breaker) left() {
	b.mu.Lock()
	b.waiting--
	b.mu.Unlock()
}

// handBack gives msg back to the broker unhandled. The nil error makes the router's ack a
// no-op (as after Retry's nack for millrace.NackOriginal) and schedules or dead-letters nothing.
func (b *breaker) handBack(msg *message.Message, why string) ([]*message.Message, error) {
	ctx := msg.Context()
	b.logger.LogAttrs(ctx, slog.LevelDebug, "millrace: outage breaker hands a waiting message back unhandled",
		slog.String("message_uuid", msg.UUID), slog.String("reason", why))
	msg.Nack()
	return nil, nil
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
			// A shutdown: nothing is counted. A probe gives its turn to the next message.
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
		if errors.Is(err, millrace.ErrContended) {
			// Another consumer holds the message (the idempotency lease is busy): no word on
			// the dependency either way. A probe gives its turn to the next message.
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
	var calls, fails int
	if b.cfg.FailureRate > 0 {
		calls, fails = b.window.add(b.now(), b.cfg.Window, failed)
	}
	if !failed {
		b.failures = 0
		if b.state == BreakerClosed {
			b.mu.Unlock()
			return
		}
		from, waiting := b.state, b.waiting
		b.state = BreakerClosed
		b.window = outcomeWindow{} // the outage's failures do not count against the recovery
		close(b.closed)
		b.stop()
		b.mu.Unlock()
		b.changed(msg, BreakerEvent{From: from, To: BreakerClosed, Waiting: waiting})
		return
	}
	b.failures++
	ev := BreakerEvent{Failures: b.failures, Waiting: b.waiting, WindowCalls: calls, WindowFailures: fails, Err: err}
	switch {
	case b.state == BreakerClosed && b.trips(calls, fails):
		b.state = BreakerOpen
		b.closed = make(chan struct{})
		b.probe = make(chan struct{}, 1)
		b.arm()
		b.mu.Unlock()
		ev.From, ev.To = BreakerClosed, BreakerOpen
		b.changed(msg, ev)
	case b.state == BreakerHalfOpen && probe:
		b.state = BreakerOpen
		b.arm()
		b.mu.Unlock()
		ev.From, ev.To = BreakerHalfOpen, BreakerOpen
		b.changed(msg, ev)
	default:
		// Closed below the threshold, or a message admitted before the breaker opened that
		// failed while it is open: only the count changes.
		b.mu.Unlock()
	}
}

// trips reports whether the outcomes counted open a closed breaker. b.mu is held.
func (b *breaker) trips(calls, fails int) bool {
	if b.cfg.Threshold > 0 && b.failures >= b.cfg.Threshold {
		return true
	}
	return b.cfg.FailureRate > 0 && calls >= b.cfg.MinCalls && float64(fails) >= b.cfg.FailureRate*float64(calls)
}

// outcomeWindow counts outcomes over a sliding window in windowSlices slices.
type outcomeWindow struct {
	slices [windowSlices]struct {
		epoch        int64 // which slice of time it counts; 0 = unused
		calls, fails int
	}
}

const windowSlices = 10

// add counts one outcome at now and returns the outcomes and failures within the last window.
func (w *outcomeWindow) add(now time.Time, window time.Duration, failed bool) (calls, fails int) {
	slice := max(int64(window/windowSlices), 1)
	epoch := now.UnixNano()/slice + 1 // + 1: epoch 0 marks an unused slice
	s := &w.slices[epoch%windowSlices]
	if s.epoch != epoch {
		s.epoch, s.calls, s.fails = epoch, 0, 0
	}
	s.calls++
	if failed {
		s.fails++
	}
	for i := range w.slices {
		if e := w.slices[i].epoch; e > epoch-windowSlices && e <= epoch {
			calls += w.slices[i].calls
			fails += w.slices[i].fails
		}
	}
	return calls, fails
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

// changed completes ev (handler, time), logs the change of state and calls the hook.
func (b *breaker) changed(msg *message.Message, ev BreakerEvent) {
	ctx := msg.Context()
	ev.Handler, ev.At = message.HandlerNameFromCtx(ctx), b.now()
	level := slog.LevelInfo
	if ev.To == BreakerClosed || ev.From == BreakerClosed {
		level = slog.LevelWarn
	}
	if b.logger.Enabled(ctx, level) {
		// The handler's name is the router's logger's (router.Router logs every line of a
		// handler with it); BreakerEvent.Handler carries it for the hook.
		attrs := []slog.Attr{slog.String("state", ev.To.String()),
			slog.String("from", ev.From.String()), slog.Int("consecutive_failures", ev.Failures),
			slog.Int("waiting", ev.Waiting)}
		if b.cfg.FailureRate > 0 && ev.WindowCalls > 0 {
			attrs = append(attrs, slog.Int("window_calls", ev.WindowCalls), slog.Int("window_failures", ev.WindowFailures))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.String("error", ev.Err.Error()))
		}
		b.logger.LogAttrs(ctx, level, "millrace: outage breaker "+ev.To.String(), attrs...)
	}
	if b.cfg.OnStateChange != nil {
		hook := b.cfg.OnStateChange
		callHook(ctx, b.logger, "OnStateChange", msg.UUID, func() { hook(ctx, ev) })
	}
}

// ErrBreakerOpen is the cause of the Retry an immediate attempt gets from a breaker that is
// not closed (see BreakerConfig.Immediate).
var ErrBreakerOpen = errors.New("millrace: outage breaker open; immediate attempt not made")

// immediateAttempt reports whether a is an immediate attempt of its delivery under a policy
// with immediate in-process attempts per delivery: not the delivery's first.
func immediateAttempt(a millrace.Attempt, immediate int) bool {
	if a.Delivery < 1 {
		return false
	}
	p := millrace.RetryPolicy{MaxAttempts: a.MaxAttempts, Immediate: immediate}
	return a.Number != p.FirstAttemptOf(a.Delivery)
}
