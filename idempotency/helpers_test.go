package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// backend names a store implementation the middleware tests run against.
type backend struct {
	name string
	new  func(t *testing.T) idempotency.Store
}

// backends lists memory, Redis and PostgreSQL; the integration ones skip (fail under CI=true)
// inside their subtest when the service is down.
func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T) idempotency.Store {
			return newMemory(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
		{"redis", func(t *testing.T) idempotency.Store {
			return newRedis(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
		{"postgres", func(t *testing.T) idempotency.Store {
			return newPostgres(t, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
		}},
	}
}

// forEachBackend runs f in a parallel subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, store idempotency.Store)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.new(t))
		})
	}
}

// deliver hands the message id to the wrapped handler the way a broker redelivers it: a fresh
// *message.Message with the same UUID, carrying attempt number n.
func deliver(h message.HandlerFunc, id string, n, maxAttempts int) error {
	msg := message.NewMessage(id, []byte(`{"user":"u1"}`))
	msg.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: n, MaxAttempts: maxAttempts}))
	_, err := h(msg)
	return err
}

// outcome returns the outcome the router would derive from a handler error.
func outcome(err error) millrace.Outcome {
	if err == nil {
		return millrace.OutcomeSuccess
	}
	return millrace.Classify(err, nil).Outcome
}

// retryDelay is the delay a broker would wait after err: the explicit RetryAfter delay, else
// the policy delay.
func retryDelay(err error, p millrace.RetryPolicy, attempt int) time.Duration {
	var oe *millrace.OutcomeError
	if errors.As(err, &oe) && oe.Delay > 0 {
		return oe.Delay
	}
	return p.Delay(attempt)
}

func fixedPolicy(attempts int, delay time.Duration) millrace.RetryPolicy {
	return millrace.RetryPolicy{MaxAttempts: attempts, Backoff: millrace.Fixed(delay)}
}

func mustNew(t *testing.T, cfg idempotency.Config) *idempotency.Middleware {
	t.Helper()
	m, err := idempotency.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}
