package idempotency

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/millrace/millrace"
)

// Defaults of Config, from field report 3.
const (
	// DefaultLeaseTTL is the lease a claim takes: 2 minutes.
	DefaultLeaseTTL = 2 * time.Minute
	// DefaultDoneTTL is how long a finished message is remembered: 7 days.
	DefaultDoneTTL = 7 * 24 * time.Hour
	// DefaultSendCutoff is how long after the claim FanOut may start a send: 10 seconds.
	DefaultSendCutoff = 10 * time.Second
	// DefaultStoreTimeout bounds each store call: 5 seconds.
	DefaultStoreTimeout = 5 * time.Second
	// DefaultConsumer names the consumer in owner ids.
	DefaultConsumer = "millrace"
)

// Config configures the idempotency middleware. Zero fields take the documented defaults;
// New applies them and calls Validate.
type Config struct {
	// Store keeps the leases. Required.
	Store Store
	// Policy is the retry policy of the handler this middleware guards. Required: the lease
	// must expire within its retry window (Policy.Window()).
	Policy millrace.RetryPolicy
	// LeaseTTL is how long a claim holds the message. Default DefaultLeaseTTL (2 min). It must be
	// positive and strictly less than Policy.Window(), or a consumer that dies holding the lease
	// makes every retry see BUSY and the message is dead-lettered.
	LeaseTTL time.Duration
	// Budget caps the handler's run, as a context deadline. Default 13/15 of LeaseTTL (104 s for
	// the 2-minute lease, as in the field report). It must be positive and less than LeaseTTL.
	Budget time.Duration
	// SendCutoff is how long after the claim FanOut may still start a send. Default
	// DefaultSendCutoff (10 s), or Budget when that is shorter. It must be positive and at most Budget.
	SendCutoff time.Duration
	// DoneTTL is how long a finished message is remembered. Default DefaultDoneTTL (7 days).
	// Keep it no longer than the store's SentTTL.
	DoneTTL time.Duration
	// StoreTimeout bounds each store call the middleware makes. Default DefaultStoreTimeout (5 s).
	StoreTimeout time.Duration
	// Key picks the idempotency key of a message. Default MessageUUID.
	Key KeyFunc
	// Consumer names this consumer in owner ids ("<uuid>@<Consumer>"). Default DefaultConsumer.
	Consumer string
	// FailOpen, when true, runs the handler without a lease if the store fails (duplicates become
	// possible; each such run is logged). Default false: fail closed, the message is retried and
	// the handler is not called.
	FailOpen bool
	// Classifier gives an Outcome to handler errors that carry none; pass the router's
	// (router.Config.Classifier) so both agree. Default: millrace.DefaultClassifier (Retry).
	Classifier millrace.Classifier
	// DeadLetterDiscards must equal router.Config.DeadLetterDiscards. When true, a Discard is
	// released instead of completed: it is about to be dead-lettered, and if that write fails the
	// redelivery must reach the handler again rather than be acked as a duplicate. Default false.
	DeadLetterDiscards bool
	// Logger receives the middleware's warnings. Default slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Budget == 0 && c.LeaseTTL > 0 {
		c.Budget = c.LeaseTTL / 15 * 13
	}
	if c.SendCutoff == 0 {
		c.SendCutoff = DefaultSendCutoff
		if c.Budget > 0 {
			c.SendCutoff = min(c.SendCutoff, c.Budget)
		}
	}
	if c.DoneTTL == 0 {
		c.DoneTTL = DefaultDoneTTL
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.Key == nil {
		c.Key = MessageUUID
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first configuration error, after defaults are applied, as a
// *millrace.ConfigError (errors.Is millrace.ErrInvalidConfig) naming the field, its value and
// the rule:
//
//	LeaseTTL > 0 and LeaseTTL < Policy.Window()
//	Budget > 0 and Budget < LeaseTTL
//	0 < SendCutoff <= Budget; DoneTTL > 0; StoreTimeout > 0; Store != nil
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Store == nil {
		return &millrace.ConfigError{Field: "idempotency.Config.Store", Value: "nil", Rule: "is required"}
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	window := c.Policy.Window()
	if c.LeaseTTL <= 0 || c.LeaseTTL >= window {
		return &millrace.ConfigError{Field: "idempotency.Config.LeaseTTL", Value: c.LeaseTTL.String(),
			Rule: fmt.Sprintf("must be positive and strictly less than the retry window (MaxAttempts-1) x delay = "+
				"%s (RetryPolicy.Window() of %d attempts); a consumer that dies holding a longer lease makes "+
				"every retry see BUSY and the message is dead-lettered", window, c.Policy.MaxAttempts)}
	}
	if c.Budget <= 0 || c.Budget >= c.LeaseTTL {
		return &millrace.ConfigError{Field: "idempotency.Config.Budget", Value: c.Budget.String(),
			Rule: fmt.Sprintf("must be positive and strictly less than LeaseTTL = %s, so processing ends before the lease can be taken over", c.LeaseTTL)}
	}
	if c.SendCutoff <= 0 || c.SendCutoff > c.Budget {
		return &millrace.ConfigError{Field: "idempotency.Config.SendCutoff", Value: c.SendCutoff.String(),
			Rule: fmt.Sprintf("must be positive and at most Budget = %s", c.Budget)}
	}
	if c.DoneTTL <= 0 {
		return &millrace.ConfigError{Field: "idempotency.Config.DoneTTL", Value: c.DoneTTL.String(), Rule: "must be positive"}
	}
	if c.StoreTimeout <= 0 {
		return &millrace.ConfigError{Field: "idempotency.Config.StoreTimeout", Value: c.StoreTimeout.String(), Rule: "must be positive"}
	}
	return nil
}
