package amqp

import (
	"context"
	"slices"
	"time"

	"github.com/millrace/millrace"
)

// tierSet is the retry tiers of one provisioned topic.
type tierSet struct {
	// reject is the delay of the tier rejected messages reach (the policy's first delay).
	reject time.Duration
	// delays lists every tier's delay, shortest first.
	delays []time.Duration
}

// pick returns the tier for a requested delay: the shortest tier not shorter than d, or the
// longest tier when d exceeds them all (a RetryAfter beyond the policy).
func (t tierSet) pick(d time.Duration) time.Duration {
	for _, x := range t.delays {
		if x >= d {
			return x
		}
	}
	return t.delays[len(t.delays)-1]
}

// planTiers returns the retry tiers Provision declares for policy: one per distinct delay, and
// the policy's first delay as the tier rejected messages reach. None for a single attempt.
func planTiers(policy millrace.RetryPolicy) tierSet {
	var ts tierSet
	if policy.MaxAttempts > 1 {
		ts.reject = policy.Delay(1)
		ts.delays = policy.DistinctDelays()
		if !slices.Contains(ts.delays, ts.reject) {
			ts.delays = append(ts.delays, ts.reject)
			slices.Sort(ts.delays)
		}
	}
	return ts
}

// Provision declares topic's topology for policy (idempotent): the work exchange, queue and
// bindings, the dead-letter exchange and DLQ, and one retry queue per distinct delay of the
// policy. It refuses a policy the adapter cannot honour (ValidateFor), and returns an error
// wrapping ErrTopologyMismatch when a queue exists with other arguments (e.g. the first retry
// delay changed: delete topic.retry, which only holds messages waiting for a retry).
func (a *Adapter) Provision(ctx context.Context, topic string, policy millrace.RetryPolicy) error {
	if err := policy.ValidateFor(a.Capabilities()); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.isClosed() {
		return millrace.ErrClosed
	}
	ch, err := a.pubConn.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := a.declareBase(ch, topic); err != nil {
		return err
	}
	ts := planTiers(policy)
	for _, d := range ts.delays {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := a.declareTier(ch, topic, d, d == ts.reject); err != nil {
			return err
		}
	}
	a.mu.Lock()
	if len(ts.delays) > 0 {
		a.tiers[topic] = ts
	} else {
		delete(a.tiers, topic)
	}
	a.mu.Unlock()
	return nil
}
