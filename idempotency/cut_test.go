package idempotency_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/conformance/cutbattery"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// cutOptions: a retry window (4 x 2 s) longer than a cut plus the store client's timeouts, so
// that a message that arrives during a cut still finds the store on a later attempt; every
// third ok message is published twice, as a producer retrying a publish does.
var cutOptions = cutbattery.Options{MaxAttempts: 5, Delay: 2 * time.Second, RepublishEvery: 3, Handlers: 16}

// cutLease is the lease of the battery's middleware: below the retry window (8 s).
const cutLease = 6 * time.Second

// storeCutBound is the bound doc.go states under "Connection loss", for a store client whose
// read timeout is readTimeout and the battery's policy and lease.
func storeCutBound(readTimeout time.Duration) cutbattery.Bound {
	return cutbattery.Bound{
		// A claim may wait out one read timeout on a connection the cut killed (then the guard
		// condemns the others), and its message comes back after the policy delay.
		Resume: readTimeout + cutOptions.Delay + 2*time.Second,
		// A lease taken by a claim whose reply was lost holds its message for LeaseTTL.
		Settle: cutLease + 2*cutOptions.Delay,
		// No second run of a handler, beyond Stats.Unmarked (ExtraDuplicates).
		DuplicatesPerCut: 0,
		// A claim that fails in a cut is a Retry without a handler call, by design.
		AttemptsLostPerCut: -1,
	}
}

// cutTarget guards the battery's handler with the idempotency middleware, its Redis store
// reached through the battery's proxy (go-redis with its default timeouts). The broker is the
// in-process memory adapter, which no cut touches: what is under test is the lease.
type cutTarget struct{}

func (cutTarget) Name() string { return "idempotency/redis" }

func (cutTarget) Upstreams(t testing.TB) []string {
	return []string{testenv.Redis(t, nil).Options().Addr}
}

func (cutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	direct := testenv.Redis(t, nil)
	opts := *direct.Options()
	opts.Addr = proxied[0]
	client := redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	prefix := testenv.Prefix(t)
	testenv.DeleteRedisPrefix(t, direct, prefix)
	store, err := idempotency.NewRedisStore(client, idempotency.StoreOptions{Prefix: prefix})
	if err != nil {
		return cutbattery.System{}, err
	}
	policy := millrace.RetryPolicy{MaxAttempts: cutOptions.MaxAttempts, Backoff: millrace.Fixed(cutOptions.Delay)}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	mw, err := idempotency.New(idempotency.Config{Store: store, Policy: policy,
		LeaseTTL: cutLease, Budget: 5 * time.Second, Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	broker, err := memory.New(memory.Config{})
	if err != nil {
		return cutbattery.System{}, err
	}
	return cutbattery.System{
		Adapter:     broker,
		Publisher:   broker,
		DeadLetters: broker.Subscriber(), // a handle of its own: the broker's own Close would end everything
		Pending: func(_ context.Context, topic string) (int, error) {
			return broker.Outstanding(topic), nil
		},
		Middleware:      []message.HandlerMiddleware{mw.Wrap},
		Bound:           storeCutBound(opts.ReadTimeout),
		ExtraDuplicates: func() int { return int(mw.Stats().Unmarked) },
		Report: func(cutbattery.Result) string {
			return fmt.Sprintf("middleware stats %+v", mw.Stats())
		},
	}, nil
}

// TestCutBattery cuts the idempotency store's Redis connection mid-stream (resets and black
// holes, while leases are completed, released and claimed) and checks that no handler runs
// twice beyond the documented window (a done marker that could not be written within the
// budget: Stats.Unmarked), and that every message still succeeds or is dead-lettered.
func TestCutBattery(t *testing.T) {
	cutbattery.Run(t, cutTarget{}, cutOptions)
}
