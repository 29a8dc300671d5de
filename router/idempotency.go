package router

import (
	"context"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Idempotency makes the idempotency middleware of one handler from that handler's settings, so
// that the policy, budget, classifier and dead-letter-discards are given once, on the router
// (or per handler), and never repeated in a second configuration that could disagree.
// idempotency.ForRouter returns one. Config.Idempotency sets it for every handler,
// WithIdempotency for one.
type Idempotency interface {
	// Middleware returns the handler's idempotency middleware, or an error (a *ConfigError
	// wrapping millrace.ErrInvalidConfig) when the settings do not fit the guard's own, e.g. a
	// lease that would outlive the policy's retry window. It is called once per handler, when
	// the handler is registered; the router reports the error from Run, before anything starts.
	Middleware(s HandlerSettings) (message.HandlerMiddleware, error)
}

// HandlerSettings are one handler's effective settings, the router's defaults with the
// handler's options applied, as an Idempotency sees them.
type HandlerSettings struct {
	// Name and Topic are the handler's name and subscribed topic.
	Name, Topic string
	// Broker names the adapter (Capabilities.Broker).
	Broker string
	// Policy is the handler's retry policy.
	Policy millrace.RetryPolicy
	// Budget is the handler's processing budget after defaults; 0 = no deadline.
	Budget time.Duration
	// Classifier is the handler's classifier; nil = millrace.DefaultClassifier.
	Classifier millrace.Classifier
	// DeadLetterDiscards is whether the handler's Discard outcomes are dead-lettered.
	DeadLetterDiscards bool
	// Logger is the router's logger.
	Logger *slog.Logger
}

// Checker is an Idempotency that checks its store before the router starts: Run calls Check
// for every handler whose guard is one, before it provisions or consumes anything, and returns
// its error. idempotency.ForRouter's guard is one: it checks a Redis store's maxmemory-policy
// (RedisStore.CheckEviction).
type Checker interface {
	Check(ctx context.Context) error
}
