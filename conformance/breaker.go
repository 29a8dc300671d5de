package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/router"
)

// ClaimHarness is an optional Harness interface for the outage-breaker test. On a broker that
// gives a delivered message to another consumer after a bound (a millrace.BudgetBounded
// adapter: the Redis Streams MinIdle, the SQS visibility timeout, the JetStream AckWait), a
// message can wait out an outage in the breaker only within that bound, and test harnesses
// keep it short. The harness returns an adapter like NewAdapter's whose MaxBudget, and the
// broker's claim behind it, is at least claim. A BudgetBounded adapter whose MaxBudget is too
// short for the test fails it unless its harness is a ClaimHarness.
type ClaimHarness interface {
	NewClaimAdapter(ctx context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error)
}

// claimed is a harness whose adapters have a claim of at least claim.
type claimed struct {
	Harness
	claim time.Duration
}

func (c claimed) NewAdapter(ctx context.Context, t testing.TB) (millrace.Adapter, error) {
	return c.Harness.(ClaimHarness).NewClaimAdapter(ctx, t, c.claim)
}

func (c claimed) DeadLetterSubscriber(ctx context.Context, t testing.TB, a millrace.Adapter) (message.Subscriber, error) {
	if r, ok := c.Harness.(DeadLetterReader); ok {
		return r.DeadLetterSubscriber(ctx, t, a)
	}
	return a.Subscriber(), nil
}

var errDependencyDown = errors.New("conformance: dependency down")

// outageRun is what one run of the outage scenario saw.
type outageRun struct {
	sent, duringOutage         int
	deadLettered, deadOutage   int
	succeeded, duplicateEffect int
	maxWaiting                 int
	events                     []middleware.BreakerEvent
	took                       time.Duration
}

// testBreakerHoldsDuringOutage is issue 17's outage: a steady stream of messages, the handler's
// dependency down for 2 s (longer where the broker's delays are coarser), policy 3 x 300 ms
// (the adapter's delay where that is longer), the side effect behind the idempotency lease.
// Without the breaker most messages that arrive during the outage use up their attempts and are
// dead-lettered; with it (Threshold 3, a probe every 500 ms) none is: they wait in the breaker
// or the broker, and all succeed after the recovery, each side effect exactly once.
func testBreakerHoldsDuringOutage(t *testing.T, h Harness, opts Options) {
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		r := runOutage(t, h, opts, false)
		if r.deadOutage*2 <= r.duringOutage {
			t.Fatalf("without the breaker %d of the %d messages sent during the outage were dead-lettered, want most: the scenario does not show the problem",
				r.deadOutage, r.duringOutage)
		}
	})
	t.Run("On", func(t *testing.T) {
		t.Parallel()
		r := runOutage(t, h, opts, true)
		if r.deadLettered != 0 {
			t.Fatalf("with the breaker %d of %d messages were dead-lettered, want none", r.deadLettered, r.sent)
		}
		if r.succeeded != r.sent || r.duplicateEffect != 0 {
			t.Fatalf("with the breaker %d of %d messages succeeded, %d side effects repeated; want all, each once",
				r.succeeded, r.sent, r.duplicateEffect)
		}
		var opened, closed bool
		for _, ev := range r.events {
			opened = opened || ev.To == middleware.BreakerOpen
			closed = closed || ev.To == middleware.BreakerClosed
		}
		if !opened || !closed {
			t.Fatalf("breaker events %v: want it opened and closed again", r.events)
		}
	})
}

// runOutage runs the scenario once, with or without the breaker.
func runOutage(t *testing.T, h Harness, opts Options, breaker bool) outageRun {
	const (
		threshold     = 3
		probeInterval = 500 * time.Millisecond
		streamLead    = 300 * time.Millisecond // stream before and after the outage
	)
	delay := max(opts.Delay, 300*time.Millisecond)
	outage := max(2*time.Second, 6*delay)
	interval := outage / 40
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(delay)}

	// A broker with a bound on how long a message may be held gets one that outlasts the
	// outage, its probes and the handler's budget.
	const budget = time.Second
	claim := budget + outage + 2*probeInterval + 2*time.Second
	if _, ok := h.(ClaimHarness); ok {
		h = claimed{Harness: h, claim: claim}
	}
	f := newFixture(t, h, opts)
	cfg := router.Config{Policy: policy}
	if bb, ok := f.adapter.(millrace.BudgetBounded); ok {
		if bb.MaxBudget() < claim {
			t.Fatalf("the adapter's MaxBudget %s is shorter than the %s a message may have to wait out the outage and be handled; "+
				"make the harness a conformance.ClaimHarness", bb.MaxBudget(), claim)
		}
		cfg.Budget = budget
	}

	var (
		mu      sync.Mutex
		events  []middleware.BreakerEvent
		effects = map[string]int{}
		down    struct{ from, to time.Time }
	)
	if breaker {
		cfg.Breaker = &middleware.BreakerConfig{Threshold: threshold, ProbeInterval: probeInterval,
			OnStateChange: func(_ context.Context, ev middleware.BreakerEvent) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}}
	}
	window := policy.Window()
	lease, err := idempotency.New(idempotency.Config{
		Store:    mustMemoryStore(t),
		Policy:   policy,
		LeaseTTL: window * 3 / 4,
		Budget:   window / 2,
		Logger:   slog.New(slog.NewTextHandler(testOutput(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	guarded := lease.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if !now.Before(down.from) && now.Before(down.to) {
			return nil, fmt.Errorf("send %s: %w", msg.UUID, errDependencyDown)
		}
		effects[msg.UUID]++
		return nil, nil
	})
	dl := f.watchDeadLetters()
	f.run(cfg, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		_, err := guarded(msg)
		return err
	})

	// Warm up, so that a slow subscription start (a Kafka group join) does not move the
	// stream after the outage.
	warm := newMsg(`{"id":"warm-up"}`)
	f.publish(warm)
	f.waitCalls("the warm-up message", func(c []call) bool { return len(callsFor(c, warm.UUID)) > 0 })

	began := time.Now()
	mu.Lock()
	down.from = began.Add(streamLead)
	down.to = down.from.Add(outage)
	mu.Unlock()
	sent := map[string]time.Time{}
	var order []string
	for at := began; at.Before(down.to.Add(streamLead)); at = at.Add(interval) {
		time.Sleep(time.Until(at))
		msg := newMsg(fmt.Sprintf(`{"id":"outage-%d"}`, len(order)))
		f.publish(msg)
		sent[msg.UUID] = time.Now()
		order = append(order, msg.UUID)
	}

	// Wait until every message has succeeded or is dead-lettered, then for Quiet more.
	settled := func() (done bool, r outageRun) {
		recs, errs := dl.snapshot()
		if len(errs) > 0 {
			t.Fatalf("dead-letter topic holds undecodable records: %v", errs)
		}
		dead := map[string]bool{}
		for _, rec := range recs {
			dead[rec.UUID] = true
		}
		mu.Lock()
		defer mu.Unlock()
		r.sent = len(order)
		for _, id := range order {
			at := sent[id]
			outageSent := !at.Before(down.from) && at.Before(down.to)
			if outageSent {
				r.duringOutage++
			}
			if dead[id] {
				r.deadLettered++
				if outageSent {
					r.deadOutage++
				}
			}
			if n := effects[id]; n > 0 {
				r.succeeded++
				r.duplicateEffect += n - 1
			}
		}
		r.events = append([]middleware.BreakerEvent(nil), events...)
		return r.succeeded+r.deadLettered >= r.sent, r
	}
	deadline := time.Now().Add(opts.Timeout)
	for {
		done, r := settled()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d messages succeeded, %d dead-lettered; breaker events %v",
				opts.Timeout, r.succeeded, r.sent, r.deadLettered, r.events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(began)
	time.Sleep(opts.Quiet)
	_, r := settled()
	r.took = took
	for _, ev := range r.events {
		waiting := ev.Waiting
		if ev.To == middleware.BreakerHalfOpen {
			waiting++ // the probe waited too
		}
		r.maxWaiting = max(r.maxWaiting, waiting)
		if ev.Handler != f.handler {
			t.Errorf("breaker event for handler %q, want %q", ev.Handler, f.handler)
		}
	}
	if r.succeeded+r.deadLettered != r.sent {
		t.Errorf("%d messages both succeeded and were dead-lettered", r.succeeded+r.deadLettered-r.sent)
	}
	t.Logf("breaker %v: outage %s, policy %d x %s: %d sent (%d during the outage), %d dead-lettered (%d of those sent during the outage), "+
		"%d succeeded, %d repeated side effects, %d breaker state changes, at most %d messages waiting in it; settled %s after the stream began",
		breaker, outage, policy.MaxAttempts, delay, r.sent, r.duringOutage, r.deadLettered, r.deadOutage,
		r.succeeded, r.duplicateEffect, len(r.events), r.maxWaiting, r.took.Round(time.Millisecond))
	return r
}

func mustMemoryStore(t *testing.T) *idempotency.MemoryStore {
	t.Helper()
	s, err := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	if err != nil {
		t.Fatalf("idempotency.NewMemoryStore: %v", err)
	}
	return s
}
