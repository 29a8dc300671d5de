package router

import (
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/middleware"
)

// HandlerOption overrides one of the router's defaults (its Config) for one handler, given to
// Handle, HandleMessage or HandleProducing. Each handler's settings are validated against the
// adapter like the router's, and Run refuses to start when one is invalid.
type HandlerOption struct{ apply func(*Config) }

// WithPolicy gives the handler its own retry policy. Run provisions the handler's topic with it.
func WithPolicy(p millrace.RetryPolicy) HandlerOption {
	return HandlerOption{func(c *Config) { c.Policy = p }}
}

// WithBudget gives the handler its own processing budget (see Config.Budget; 0 = the adapter's
// default).
func WithBudget(d time.Duration) HandlerOption {
	return HandlerOption{func(c *Config) { c.Budget = d }}
}

// WithClassifier gives the handler its own classifier for errors that carry no outcome.
func WithClassifier(cl millrace.Classifier) HandlerOption {
	return HandlerOption{func(c *Config) { c.Classifier = cl }}
}

// WithDeadLetterDiscards sets, for the handler, whether Discard outcomes are dead-lettered.
func WithDeadLetterDiscards(on bool) HandlerOption {
	return HandlerOption{func(c *Config) { c.DeadLetterDiscards = on }}
}

// WithBreaker gives the handler its own outage breaker; nil turns the router's off for it.
func WithBreaker(b *middleware.BreakerConfig) HandlerOption {
	return HandlerOption{func(c *Config) { c.Breaker = b }}
}

// WithIdempotency gives the handler its own idempotency guard; nil turns the router's off for it.
func WithIdempotency(g Idempotency) HandlerOption {
	return HandlerOption{func(c *Config) { c.Idempotency = g }}
}

// WithOnRetry gives the handler its own OnRetry hook; nil turns the router's off for it.
func WithOnRetry(f OnRetryFunc) HandlerOption {
	return HandlerOption{func(c *Config) { c.OnRetry = f }}
}

// WithOnDeadLetter gives the handler its own OnDeadLetter hook; nil turns the router's off for it.
func WithOnDeadLetter(f OnDeadLetterFunc) HandlerOption {
	return HandlerOption{func(c *Config) { c.OnDeadLetter = f }}
}

// handlerConfig is base with opts applied.
func handlerConfig(base Config, opts []HandlerOption) Config {
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&base)
		}
	}
	return base
}
