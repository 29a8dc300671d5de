package router

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/telemetry"
)

// Stack returns millrace's middleware for cfg in the order they must run, outermost first, for
// use with a hand-built Watermill router (router.AddMiddleware(stack...)). It validates cfg.
// With Config.Idempotency set, the guard is made with an empty handler name and topic; a
// Router makes one per handler instead. With Config.Breaker set, set its Stop and close it when
// the router starts to stop (a Router does): otherwise a message the breaker holds holds the
// shutdown until CloseTimeout.
func Stack(cfg Config) ([]message.HandlerMiddleware, error) {
	return handlerStack(cfg, "", "", nil)
}

// handlerStack is the stack of the handler name on topic whose settings are cfg; stop, when
// not nil, is closed when the router closes (the breaker's Stop, unless the caller set one).
func handlerStack(cfg Config, name, topic string, stop <-chan struct{}) ([]message.HandlerMiddleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	caps := cfg.Adapter.Capabilities()
	if name != "" {
		// Every line the handler's middleware logs names the handler, its topic and the broker,
		// and the message's attempt and native id (messageLogHandler).
		cfg.Logger = withMessageAttrs(cfg.Logger).With(slog.String("handler", name), slog.String("topic", topic), slog.String("broker", caps.Broker))
	}
	var tel *telemetry.Handler
	var stack []message.HandlerMiddleware
	if cfg.Telemetry != nil {
		info := telemetry.HandlerInfo{Name: name, Topic: topic, Broker: caps.Broker, ImmediateAttempts: cfg.Policy.Immediate}
		if g, ok := cfg.Adapter.(millrace.ConsumerGroupNamer); ok {
			info.ConsumerGroup = g.ConsumerGroup(topic)
		}
		tel = cfg.Telemetry.ForHandler(info)
		stack = append(stack, tel.Outer())
		cfg.OnRetry = withRetryHook(tel.OnRetry, cfg.OnRetry)
		cfg.OnDeadLetter = withDeadLetterHook(tel.OnDeadLetter, cfg.OnDeadLetter)
	}
	stack = append(stack,
		middleware.Poison(cfg.Adapter, middleware.PoisonConfig{
			Broker: caps.Broker, DeadLetterDiscards: cfg.DeadLetterDiscards, Logger: cfg.Logger,
			OnDeadLetter: cfg.OnDeadLetter,
		}),
		middleware.Attempt(cfg.Adapter, cfg.Policy),
		middleware.Retry(cfg.Adapter, middleware.RetryConfig{
			Policy: cfg.Policy, MaxDelay: caps.MaxDelay, Budget: cfg.Budget, Logger: cfg.Logger,
			OnRetry: cfg.OnRetry,
		}),
	)
	if cfg.Breaker != nil {
		bc := breakerConfig(cfg)
		if bc.Stop == nil {
			bc.Stop = stop
		}
		if bb, ok := cfg.Adapter.(millrace.BudgetBounded); ok && name != "" && cfg.Budget >= bb.MaxBudget() {
			cfg.Logger.Warn("millrace router: the outage breaker has no room to hold a message: Budget equals the adapter's processing budget, "+
				"so a message that had to wait is handed back unhandled (costing one delivery) instead of handled; set Budget below it",
				slog.Duration("budget", cfg.Budget), slog.Duration("max_budget", bb.MaxBudget()))
		}
		stack = append(stack, middleware.Breaker(bc))
	}
	if tel != nil {
		stack = append(stack, tel.Inner())
	}
	stack = append(stack,
		middleware.Classify(cfg.Classifier),
		middleware.Budget(cfg.Budget),
		middleware.Recover(),
	)
	if cfg.Idempotency != nil {
		guard, err := cfg.Idempotency.Middleware(HandlerSettings{
			Name: name, Topic: topic, Broker: caps.Broker, Policy: cfg.Policy, Budget: cfg.Budget,
			Classifier: cfg.Classifier, DeadLetterDiscards: cfg.DeadLetterDiscards, Logger: cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		stack = append(stack, guard)
	}
	return stack, nil
}

// breakerConfig is cfg.Breaker with the router's defaults (cfg has its own defaults set).
func breakerConfig(cfg Config) middleware.BreakerConfig {
	bc := *cfg.Breaker
	bc.Immediate = cfg.Policy.Immediate
	if bb, ok := cfg.Adapter.(millrace.BudgetBounded); ok {
		bc = bc.Bounded(bb.MaxBudget(), cfg.Budget)
	}
	if bc.Logger == nil {
		bc.Logger = cfg.Logger
	}
	return bc
}

// withRetryHook runs the telemetry's hook, then the user's (when set).
func withRetryHook(tel, user OnRetryFunc) OnRetryFunc {
	if user == nil {
		return tel
	}
	return func(ctx context.Context, msg *message.Message, ev RetryEvent) {
		tel(ctx, msg, ev)
		user(ctx, msg, ev)
	}
}

// withDeadLetterHook runs the telemetry's hook, then the user's (when set).
func withDeadLetterHook(tel, user OnDeadLetterFunc) OnDeadLetterFunc {
	if user == nil {
		return tel
	}
	return func(ctx context.Context, msg *message.Message, ev DeadLetterEvent) {
		tel(ctx, msg, ev)
		user(ctx, msg, ev)
	}
}
