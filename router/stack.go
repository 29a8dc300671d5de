package router

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/middleware"
)

// Stack returns millrace's middleware for cfg in the order they must run, outermost first, for
// use with a hand-built Watermill router (router.AddMiddleware(stack...)). It validates cfg.
func Stack(cfg Config) ([]message.HandlerMiddleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	caps := cfg.Adapter.Capabilities()
	return []message.HandlerMiddleware{
		middleware.Poison(cfg.Adapter, middleware.PoisonConfig{
			Broker: caps.Broker, DeadLetterDiscards: cfg.DeadLetterDiscards, Logger: cfg.Logger,
			OnDeadLetter: cfg.OnDeadLetter,
		}),
		middleware.Attempt(cfg.Adapter, cfg.Policy),
		middleware.Retry(cfg.Adapter, middleware.RetryConfig{
			Policy: cfg.Policy, MaxDelay: caps.MaxDelay, Logger: cfg.Logger,
			OnRetry: cfg.OnRetry,
		}),
		middleware.Classify(cfg.Classifier),
		middleware.Budget(cfg.Budget),
		middleware.Recover(),
	}, nil
}
