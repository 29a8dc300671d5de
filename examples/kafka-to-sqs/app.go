package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/router"
)

// Timing holds the consume rules, the same on every broker.
type Timing struct {
	// Policy: the field report's 5 attempts, fixed 60 s apart.
	Policy millrace.RetryPolicy
	// LeaseTTL is the idempotency lease: 2 min, strictly less than the 4-min retry window.
	LeaseTTL time.Duration
	// Budget caps one handler run. 50 s, not the field report's 104 s: on SQS the budget must
	// stay below the 60 s visibility timeout, or a second consumer receives the message while the
	// first still sends it (the SQS adapter refuses 104 s with 60 s at start-up). The same value
	// is used on Kafka and NATS so that all behave the same.
	Budget time.Duration
	// Visibility is the SQS visibility timeout (SQS only): 60 s, as in production.
	Visibility time.Duration
	// AckWait is JetStream's ack wait (NATS only), after which it redelivers a message it has
	// not heard back about: 2 min. The NATS adapter refuses a budget that is not below half of
	// it (a message may wait one budget in the client's pull buffer, then run one), so the
	// 60 s of the SQS visibility timeout would not carry the 50 s budget.
	AckWait time.Duration
	// Logger receives the adapter's and the router's logs.
	Logger *slog.Logger
}

// ProductionTiming returns the field report's production values (see Timing for the budget).
func ProductionTiming(logger *slog.Logger) Timing {
	return Timing{
		Policy:     millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(60 * time.Second)},
		LeaseTTL:   2 * time.Minute,
		Budget:     50 * time.Second,
		Visibility: 60 * time.Second,
		AckWait:    2 * time.Minute,
		Logger:     logger,
	}
}

// Consumer wires the notification service behind the idempotency lease and millrace's stack on
// one adapter. Handler is exposed so tests can observe it.
type Consumer struct {
	Router      *router.Router
	Idempotency *idempotency.Middleware
	Handler     message.NoPublishHandlerFunc
}

// NewConsumer validates everything at start-up (lease < retry window, budget < lease, budget <
// SQS visibility or half the NATS ack wait, delays the broker can honour) and registers svc on topic. observe, when not
// nil, wraps the handler (tests use it to trace outcomes).
func NewConsumer(a millrace.Adapter, t Timing, store idempotency.Store, svc *Service, topic string,
	observe func(message.NoPublishHandlerFunc) message.NoPublishHandlerFunc) (*Consumer, error) {
	mw, err := idempotency.New(idempotency.Config{
		Store:    store,
		Policy:   t.Policy,
		LeaseTTL: t.LeaseTTL,
		Budget:   t.Budget,
		Key:      MessageKey,
		Consumer: "notification",
		Logger:   t.Logger,
	})
	if err != nil {
		return nil, err
	}
	r, err := router.New(router.Config{Adapter: a, Policy: t.Policy, Budget: t.Budget, Logger: t.Logger})
	if err != nil {
		return nil, err
	}
	guarded := mw.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		return nil, svc.Handle(msg.Context(), msg)
	})
	var h message.NoPublishHandlerFunc = func(msg *message.Message) error {
		_, err := guarded(msg)
		return err
	}
	if observe != nil {
		h = observe(h)
	}
	r.HandleMessage("notification", topic, h)
	return &Consumer{Router: r, Idempotency: mw, Handler: h}, nil
}

// Run provisions the topic and consumes until ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.Router.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("notification consumer: %w", err)
	}
	return nil
}
