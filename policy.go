package millrace

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/millrace/millrace/internal/satmath"
)

// RetryPolicy bounds the retries of one handler.
type RetryPolicy struct {
	// MaxAttempts is the number of handler calls allowed, the first included. Required, >= 1.
	// The field report's Kafka service uses 5; its Redis service dead-letters after 3 deliveries.
	MaxAttempts int
	// Backoff gives the delay before each retry. Required when MaxAttempts > 1. Any type with a
	// Delay(n int) time.Duration method is a Backoff (see Backoff for the optional interfaces).
	Backoff Backoff
}

// Validate checks the policy on its own; adapters add their limits through ValidateFor. Besides
// a BackoffValidator's own rules, it asks the backoff for the delay of every retry, 1 to
// MaxAttempts-1, and refuses a negative one, bounds out of order (JitteredBackoff), and a Delay
// that is not a JitteredBackoff but answers the same n with two different delays.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 1 {
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Rule: "must be at least 1 (the first attempt counts)"}
	}
	if p.Backoff == nil {
		if p.MaxAttempts == 1 {
			return nil
		}
		return &ConfigError{Field: backoffField, Value: "nil", Rule: "is required when MaxAttempts > 1"}
	}
	if v, ok := p.Backoff.(BackoffValidator); ok {
		if err := backoffError(v.Validate(), false); err != nil {
			return err
		}
	}
	_, jittered := p.Backoff.(JitteredBackoff)
	for n := 1; n < p.MaxAttempts; n++ {
		lo, hi := delayBounds(p.Backoff, n)
		switch {
		case lo < 0:
			return &ConfigError{Field: backoffField, Value: lo.String(), Rule: fmt.Sprintf("must not be negative (the delay before retry %d)", n)}
		case hi < lo:
			return &ConfigError{Field: backoffField, Value: fmt.Sprintf("MinDelay(%d) %s, MaxDelay(%d) %s", n, lo, n, hi),
				Rule: "the shortest delay must not exceed the longest"}
		case !jittered:
			if again := p.Backoff.Delay(n); again != lo {
				return &ConfigError{Field: backoffField, Value: fmt.Sprintf("Delay(%d) %s, then %s", n, lo, again),
					Rule: "must give the same delay for the same retry, or implement millrace.JitteredBackoff to declare its bounds"}
			}
		}
	}
	return nil
}

// Delay returns the delay after attempt n failed, before attempt n+1: the backoff's delay,
// kept within its declared bounds (JitteredBackoff) and never negative.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if p.Backoff == nil {
		return 0
	}
	n := max(attempt, 1)
	d := p.Backoff.Delay(n)
	if j, ok := p.Backoff.(JitteredBackoff); ok {
		d = min(max(d, j.MinDelay(n)), j.MaxDelay(n))
	}
	return max(d, 0)
}

// DelayRange returns the shortest and the longest delay the policy can give after attempt n
// failed: MinDelay(n) and MaxDelay(n) of a JitteredBackoff, else Delay(n) twice; never negative.
// Adapters and plans use it for the retry of n at its longest without depending on the
// backoff's type.
func (p RetryPolicy) DelayRange(attempt int) (shortest, longest time.Duration) {
	if p.Backoff == nil {
		return 0, 0
	}
	lo, hi := delayBounds(p.Backoff, max(attempt, 1))
	return max(lo, 0), max(hi, lo, 0)
}

// Window is the shortest time from the first failure to the give-up point: the sum of the
// minimum delays of the MaxAttempts-1 retries (saturating at the longest Duration). An
// idempotency lease must be shorter than it, or a consumer that dies holding the lease makes
// every retry see BUSY.
func (p RetryPolicy) Window() time.Duration {
	var w time.Duration
	for n := 1; n < p.MaxAttempts && p.Backoff != nil; n++ {
		lo, _ := p.DelayRange(n)
		w = satmath.Add(w, lo)
	}
	return w
}

// MaxDelay is the longest delay any retry of this policy can ask for.
func (p RetryPolicy) MaxDelay() time.Duration {
	var m time.Duration
	for n := 1; n < p.MaxAttempts && p.Backoff != nil; n++ {
		_, hi := p.DelayRange(n)
		m = max(m, hi)
	}
	return m
}

// DistinctDelays lists the distinct delays the policy uses (each retry's shortest delay),
// shortest first. Adapters with fixed delay tiers (RabbitMQ TTL queues, Kafka retry topics)
// declare one tier per element. It is undefined for jittered backoffs, which adapters with
// tiers refuse.
func (p RetryPolicy) DistinctDelays() []time.Duration {
	if p.Backoff == nil {
		return nil
	}
	seen := map[time.Duration]struct{}{}
	var out []time.Duration
	for n := 1; n < p.MaxAttempts; n++ {
		lo, _ := p.DelayRange(n)
		if _, dup := seen[lo]; !dup {
			seen[lo] = struct{}{}
			out = append(out, lo)
		}
	}
	slices.Sort(out)
	return out
}

// ValidateFor checks p against an adapter's capabilities and refuses, with the field, the value
// and the limit, what the adapter cannot deliver. Every backoff is judged by the same rules, on
// the delays of retries 1 to MaxAttempts-1: the longest within the adapter's maximum, each a
// multiple of its granularity and, on an adapter with fixed delay tiers, one delay per retry
// (no jitter) and no more distinct delays than its tiers. A BackoffCapabilityValidator's own
// rules come after the delivery limit.
func (p RetryPolicy) ValidateFor(c Capabilities) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if c.MaxDelay > 0 {
		if d := p.MaxDelay(); d > c.MaxDelay {
			return &ConfigError{Field: backoffField, Value: d.String(), Limit: true,
				Rule: fmt.Sprintf("delay exceeds the %s adapter's maximum delay %s", c.Broker, c.MaxDelay)}
		}
	}
	if c.DelayGranularity > 0 {
		for _, d := range p.DistinctDelays() {
			if d%c.DelayGranularity != 0 {
				return &ConfigError{Field: backoffField, Value: d.String(), Limit: true,
					Rule: fmt.Sprintf("delay must be a multiple of the %s adapter's granularity %s", c.Broker, c.DelayGranularity)}
			}
		}
	}
	if c.DeliveryLimit > 0 && p.MaxAttempts > c.DeliveryLimit {
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Limit: true,
			Rule: fmt.Sprintf("exceeds the %s broker's delivery limit %d", c.Broker, c.DeliveryLimit)}
	}
	if l, ok := p.Backoff.(BackoffCapabilityValidator); ok {
		if err := backoffError(l.ValidateFor(c), true); err != nil {
			return err
		}
	}
	if !c.PerMessageDelay && p.Backoff != nil {
		for n := 1; n < p.MaxAttempts; n++ {
			if lo, hi := p.DelayRange(n); lo != hi {
				return &ConfigError{Field: backoffField, Value: fmt.Sprintf("%s to %s before retry %d", lo, hi, n), Limit: true,
					Rule: fmt.Sprintf("must be one delay per retry: the %s adapter delays through fixed tiers, one per distinct delay", c.Broker)}
			}
		}
		if c.MaxTiers > 0 && len(p.DistinctDelays()) > c.MaxTiers {
			return &ConfigError{Field: backoffField, Value: strconv.Itoa(len(p.DistinctDelays())) + " distinct delays", Limit: true,
				Rule: fmt.Sprintf("the %s adapter supports at most %d delay tiers", c.Broker, c.MaxTiers)}
		}
	}
	return nil
}
