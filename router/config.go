package router

import (
	"log/slog"
	"time"

	"github.com/millrace/millrace"
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
	// Budget is the processing budget: the handler's context deadline. Default 0: none.
	Budget time.Duration
	// DeadLetterDiscards sends Discard outcomes to the dead-letter destination (reason
	// "discarded"). Default false: discards are acknowledged and logged.
	DeadLetterDiscards bool
	// Logger receives the router's and the middleware's logs. Default: slog.Default().
	Logger *slog.Logger
	// CloseTimeout is how long Close waits for running handlers. Default 30 s.
	CloseTimeout time.Duration
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
		return &millrace.ConfigError{Field: "Config.Budget", Value: c.Budget.String(), Rule: "must not be negative (0 means no budget)"}
	}
	if c.CloseTimeout < 0 {
		return &millrace.ConfigError{Field: "Config.CloseTimeout", Value: c.CloseTimeout.String(), Rule: "must not be negative (0 means 30s)"}
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
}
