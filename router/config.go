package router

import (
	"log/slog"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/telemetry"
)

// Config configures a Router.
type Config struct {
	// Adapter connects the router to a broker. Required.
	Adapter millrace.Adapter
	// Policy bounds retries for every handler of the router. Required; checked against the
	// adapter's capabilities at New.
	Policy millrace.RetryPolicy
	// Classifier gives an Outcome to errors that carry none. Default: every such error is Retry.
	Classifier millrace.Classifier
	// Budget is the processing budget: the handler's context deadline. Default: the adapter's
	// MaxBudget when it is a millrace.BudgetBounded (Redis Streams, SQS), else 0 (no deadline).
	// It may not exceed that MaxBudget: the broker would give the message to another consumer
	// while the handler still runs.
	Budget time.Duration
	// DeadLetterDiscards sends Discard outcomes to the dead-letter destination (reason
	// "discarded"). Default false: discards are acknowledged and logged.
	DeadLetterDiscards bool
	// Logger receives the router's and the middleware's logs. Default: slog.Default().
	Logger *slog.Logger
	// CloseTimeout is how long Close waits for running handlers, and bounds, from the same
	// start, how long Run then waits for Watermill's handler goroutines to end. Default 30 s.
	CloseTimeout time.Duration
	// OnRetry, when set, is called once for every retry scheduled, with the attempt that
	// failed, the delay and the error, after the adapter confirmed the retry (never when
	// scheduling failed: the original is then not acknowledged). See RetryEvent and
	// middleware.RetryConfig.OnRetry: it runs on the handler's goroutine before the message's
	// ack and should be quick; a panic in it is recovered and logged.
	OnRetry OnRetryFunc
	// OnDeadLetter, when set, is called once for every dead letter written (exhausted,
	// malformed, and discarded when DeadLetterDiscards is on), with the record as written and
	// the error, after the adapter confirmed the write (never when it failed: the original is
	// then not acknowledged). See DeadLetterEvent and middleware.PoisonConfig.OnDeadLetter: it
	// runs on the handler's goroutine before the message's ack and should be quick; a panic in
	// it is recovered and logged.
	OnDeadLetter OnDeadLetterFunc
	// Breaker, when set, puts an outage breaker (middleware.Breaker) in front of every handler,
	// each with a state of its own: after Breaker.Threshold consecutive Retry outcomes the
	// handler stops taking messages (they wait unsettled, burning no attempt, and the adapter
	// stops fetching once its in-flight window is full), one probe goes through every
	// Breaker.ProbeInterval, and a success resumes. Nil (the default) = no breaker. On an
	// adapter that is a millrace.BudgetBounded, a zero Breaker.MaxHold is set from the Budget
	// (see middleware.BreakerConfig.Bounded); Logger defaults to the router's.
	Breaker *middleware.BreakerConfig
	// Idempotency, when set, guards every handler with an idempotency lease made from the
	// handler's own settings (idempotency.ForRouter): the innermost layer, right around the
	// handler, so that a message whose lease is held or done never reaches it. Nil (the
	// default) = no lease; WithIdempotency sets or clears it for one handler.
	Idempotency Idempotency
	// Telemetry, when set, records OpenTelemetry metrics and spans for every handler (see the
	// telemetry package): deliveries by outcome and reason, retries, dead letters, write
	// failures, panics, handler duration, final attempt and time to outcome, one span per
	// delivery. Nil (the default) records nothing and costs nothing.
	Telemetry *telemetry.Telemetry
}

// Validate checks every field and the policy against the adapter's capabilities.
func (c Config) Validate() error {
	if c.Adapter == nil {
		return &millrace.ConfigError{Field: "Config.Adapter", Value: "nil", Rule: "is required"}
	}
	if err := c.Policy.ValidateFor(c.Adapter.Capabilities()); err != nil {
		return err
	}
	if c.Budget < 0 {
		return &millrace.ConfigError{Field: "Config.Budget", Value: c.Budget.String(), Rule: "must not be negative (0 means the adapter's default)"}
	}
	if bb, ok := c.Adapter.(millrace.BudgetBounded); ok && c.Budget > bb.MaxBudget() {
		return &millrace.ConfigError{Field: "Config.Budget", Value: c.Budget.String(), Limit: true,
			Rule: "must be at most the " + c.Adapter.Capabilities().Broker + " adapter's processing budget " + bb.MaxBudget().String() +
				": a longer handler would be redelivered to another consumer while it still runs"}
	}
	if c.Breaker != nil {
		if err := c.Breaker.Validate(); err != nil {
			return err
		}
	}
	if c.CloseTimeout < 0 {
		return &millrace.ConfigError{Field: "Config.CloseTimeout", Value: c.CloseTimeout.String(), Rule: "must not be negative (0 means 30s)"}
	}
	return nil
}

func (c *Config) setDefaults() {
	if bb, ok := c.Adapter.(millrace.BudgetBounded); ok && c.Budget == 0 {
		c.Budget = bb.MaxBudget()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
}
