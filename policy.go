package millrace

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/millrace/millrace/internal/satmath"
)

// RetryPolicy bounds the retries of one handler.
//
// # Immediate and delayed retries
//
// A failed attempt (a Retry outcome) is tried again in one of two ways. A delayed retry hands
// the message back to the broker, which delivers it again after the Backoff's delay, without
// blocking the messages behind it. An immediate attempt (Immediate > 0) calls the handler again
// at once, in the same process, on the same delivery. Every delivery of a message makes up to
// Immediate+1 attempts, and only the last failure of a delivery schedules a delayed retry:
//
//	delivery d covers attempts (d-1)*(Immediate+1)+1 .. min(d*(Immediate+1), MaxAttempts)
//
// With Immediate 1 and MaxAttempts 5 the handler sees attempts 1 and 2 on the first delivery,
// 3 and 4 on the second, 5 on the third, then the message is dead-lettered. The attempt
// number is computed from the broker's delivery count (Redis PEL count, SQS
// ApproximateReceiveCount, NATS NumDelivered, RabbitMQ x-death, the millrace-attempt header
// of a Kafka, RabbitMQ or memory retry copy, which counts deliveries), so it needs no state
// of its own and survives a crash exactly as the delivery count does. Attempt.Delivery
// carries the delivery number itself. A delivery whose immediate attempts are cut short (its
// processing budget spent, the router shutting down, MaxElapsed reached) still uses up its
// attempt numbers: the next delivery starts at its own first number, so the handler is
// called fewer than MaxAttempts times, never more; when the delivery cut short was the last
// one (its range holds MaxAttempts), the message is dead-lettered as exhausted with the
// attempts it was given. Changing Immediate renumbers the deliveries of messages in flight.
//
// The Backoff counts delayed retries, not attempts: Delay(n) is the wait after delivery n
// failed. With Immediate 0 each delivery is one attempt and the two counts are the same.
//
// Immediate attempts share the delivery's processing budget: they all run before the one
// deadline set when the delivery's first attempt began (router.Config.Budget, or the
// adapter's MaxBudget), and none starts once it has passed. While they run the broker holds
// the message for this consumer, so they are for sub-second blips (a dropped connection, a
// lock timeout), not for outages, which delayed retries (or an outage breaker) ride out:
//
//	Broker         while the message is held for immediate attempts
//	Kafka          records of its key wait behind it, its partition's offset commits stop
//	               at it, and it keeps one of the Config.MaxInFlight places
//	SQS            its visibility timeout runs down (the budget stays below it)
//	Redis Streams  its idle time grows towards the reclaim MinIdle (the budget stays below
//	               it), and it keeps one place of the subscription's Window
//	NATS           its AckWait runs down (the budget stays below it), and it keeps one place
//	               of the pull window
//	RabbitMQ       it keeps its prefetch (unacknowledged delivery) slot
//	memory         the subscription takes no other message
//
// # Elapsed time limit
//
// MaxElapsed gives up on a message, as exhausted, when the time since Attempt.FirstAttemptAt
// plus the delay before its next attempt (0 for an immediate one) would pass it: no attempt
// is scheduled to start later than FirstAttemptAt+MaxElapsed. An adapter that cannot know
// FirstAttemptAt (Capabilities.KnowsFirstAttempt false) refuses it at start-up. What the
// first attempt's time is differs by broker: the time the message was appended (Redis Streams
// entry ID, NATS stored timestamp: time spent waiting in the stream before the first delivery
// counts), SQS's ApproximateFirstReceiveTimestamp, the first delivery's time (memory, Kafka;
// carried in the millrace-first-attempt-at header of retry copies), and on RabbitMQ the first
// x-death time (the first failure, in whole seconds, so up to 1 s early) or that header.
// Broker clocks count: a time in the future (a skewed clock, a forged header) is taken as now,
// and a retry state that claims an earlier first attempt can only make a message give up
// sooner, never retry longer. MaxAttempts still bounds the attempts.
type RetryPolicy struct {
	// MaxAttempts is the number of handler calls allowed, the first included. Required, >= 1.
	// The field report's Kafka service uses 5; its Redis service dead-letters after 3 deliveries.
	MaxAttempts int
	// Backoff gives the delay before each delayed retry (see above). Required when a message
	// can be delivered more than once (MaxAttempts > Immediate+1). Any type with a
	// Delay(n int) time.Duration method is a Backoff (see Backoff for the optional interfaces).
	Backoff Backoff
	// Immediate is the number of quick in-process attempts after a failed attempt of a
	// delivery, before a delayed retry is scheduled (see above). Default 0; 0 <= Immediate <
	// MaxAttempts. Each one counts in Attempt.Number and in MaxAttempts.
	Immediate int
	// MaxElapsed, when positive, dead-letters a failing message as exhausted once the time
	// since its first attempt plus the next delay would pass it (see above). Default 0: no
	// limit. Refused on an adapter whose Capabilities.KnowsFirstAttempt is false.
	MaxElapsed time.Duration
}

// Deliveries is the number of deliveries a message can get under p: MaxAttempts attempts,
// Immediate+1 per delivery (at least 1).
func (p RetryPolicy) Deliveries() int {
	per := satmath.AddInt(max(p.Immediate, 0), 1)
	return (max(p.MaxAttempts, 1)-1)/per + 1
}

// DelayedRetries is the number of delayed retries a message can get under p: Deliveries()-1.
// The Backoff is asked for the delays of retries 1 to DelayedRetries().
func (p RetryPolicy) DelayedRetries() int { return p.Deliveries() - 1 }

// DeliveryOf returns the number of the delivery attempt n belongs to (1 for n <= 1):
// (n-1)/(Immediate+1)+1.
func (p RetryPolicy) DeliveryOf(attempt int) int {
	return (max(attempt, 1)-1)/satmath.AddInt(max(p.Immediate, 0), 1) + 1
}

// FirstAttemptOf returns the number of the first attempt of delivery d (1 for d <= 1):
// (d-1)*(Immediate+1)+1, saturating at math.MaxInt instead of wrapping for a huge count read
// from a broker or a header.
func (p RetryPolicy) FirstAttemptOf(delivery int) int {
	return satmath.AddInt(satmath.MulInt(max(delivery, 1)-1, satmath.AddInt(max(p.Immediate, 0), 1)), 1)
}

// Validate checks the policy on its own; adapters add their limits through ValidateFor: at
// least one attempt, 0 <= Immediate < MaxAttempts, MaxElapsed not negative. Besides a
// BackoffValidator's own rules, it asks the backoff for the delay of every delayed retry, 1 to
// DelayedRetries(), and refuses a negative one, bounds out of order (JitteredBackoff), and a Delay
// that is not a JitteredBackoff but answers the same n with two different delays.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 1 {
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Rule: "must be at least 1 (the first attempt counts)"}
	}
	if p.Immediate < 0 {
		return &ConfigError{Field: "RetryPolicy.Immediate", Value: strconv.Itoa(p.Immediate), Rule: "must not be negative (0 means no immediate attempts)"}
	}
	if p.Immediate >= p.MaxAttempts {
		return &ConfigError{Field: "RetryPolicy.Immediate", Value: strconv.Itoa(p.Immediate),
			Rule: fmt.Sprintf("must be less than MaxAttempts %d (each immediate attempt counts in MaxAttempts)", p.MaxAttempts)}
	}
	if p.MaxElapsed < 0 {
		return &ConfigError{Field: "RetryPolicy.MaxElapsed", Value: p.MaxElapsed.String(), Rule: "must not be negative (0 means no limit)"}
	}
	if p.Backoff == nil {
		if p.DelayedRetries() == 0 {
			return nil
		}
		return &ConfigError{Field: backoffField, Value: "nil", Rule: "is required when MaxAttempts > Immediate+1 (a delayed retry needs a delay)"}
	}
	if v, ok := p.Backoff.(BackoffValidator); ok {
		if err := backoffError(v.Validate(), false); err != nil {
			return err
		}
	}
	_, jittered := p.Backoff.(JitteredBackoff)
	for n := 1; n <= p.DelayedRetries(); n++ {
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

// Delay returns the delay of delayed retry n: after delivery n failed, before delivery n+1
// (with Immediate 0, after attempt n failed): the backoff's delay, kept within its declared
// bounds (JitteredBackoff) and never negative.
func (p RetryPolicy) Delay(retry int) time.Duration {
	if p.Backoff == nil {
		return 0
	}
	n := max(retry, 1)
	d := p.Backoff.Delay(n)
	if j, ok := p.Backoff.(JitteredBackoff); ok {
		d = min(max(d, j.MinDelay(n)), j.MaxDelay(n))
	}
	return max(d, 0)
}

// DelayRange returns the shortest and the longest delay the policy can give for delayed retry
// n (after delivery n failed): MinDelay(n) and MaxDelay(n) of a JitteredBackoff, else Delay(n) twice; never negative.
// Adapters and plans use it for the retry of n at its longest without depending on the
// backoff's type.
func (p RetryPolicy) DelayRange(retry int) (shortest, longest time.Duration) {
	if p.Backoff == nil {
		return 0, 0
	}
	lo, hi := delayBounds(p.Backoff, max(retry, 1))
	return max(lo, 0), max(hi, lo, 0)
}

// Window is the shortest time from the first failure to the give-up point: the sum of the
// minimum delays of the DelayedRetries() delayed retries (saturating at the longest Duration;
// immediate attempts wait nothing), and no longer than MaxElapsed when it is set. An
// idempotency lease must be shorter than it, or a consumer that dies holding the lease makes
// every retry see BUSY.
func (p RetryPolicy) Window() time.Duration {
	var w time.Duration
	for n := 1; n <= p.DelayedRetries() && p.Backoff != nil; n++ {
		lo, _ := p.DelayRange(n)
		w = satmath.Add(w, lo)
	}
	if p.MaxElapsed > 0 {
		w = min(w, p.MaxElapsed)
	}
	return w
}

// MaxDelay is the longest delay any delayed retry of this policy can ask for.
func (p RetryPolicy) MaxDelay() time.Duration {
	var m time.Duration
	for n := 1; n <= p.DelayedRetries() && p.Backoff != nil; n++ {
		_, hi := p.DelayRange(n)
		m = max(m, hi)
	}
	return m
}

// DistinctDelays lists the distinct delays the policy uses (each delayed retry's shortest delay),
// shortest first. Adapters with fixed delay tiers (RabbitMQ TTL queues, Kafka retry topics)
// declare one tier per element. It is undefined for jittered backoffs, which adapters with
// tiers refuse.
func (p RetryPolicy) DistinctDelays() []time.Duration {
	if p.Backoff == nil {
		return nil
	}
	seen := map[time.Duration]struct{}{}
	var out []time.Duration
	for n := 1; n <= p.DelayedRetries(); n++ {
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
// and the limit, what the adapter cannot deliver: more deliveries (Deliveries) than the
// broker's delivery limit, and a MaxElapsed where the adapter cannot know the first attempt's
// time. Every backoff is judged by the same rules, on the delays of delayed retries 1 to
// DelayedRetries(): the longest within the adapter's maximum, each a
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
	if c.DeliveryLimit > 0 && p.Deliveries() > c.DeliveryLimit {
		v := strconv.Itoa(p.MaxAttempts)
		if p.Immediate > 0 {
			v += fmt.Sprintf(" (%d deliveries of up to %d attempts)", p.Deliveries(), p.Immediate+1)
		}
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: v, Limit: true,
			Rule: fmt.Sprintf("exceeds the %s broker's delivery limit %d", c.Broker, c.DeliveryLimit)}
	}
	if p.MaxElapsed > 0 && !c.KnowsFirstAttempt {
		return &ConfigError{Field: "RetryPolicy.MaxElapsed", Value: p.MaxElapsed.String(), Limit: true,
			Rule: fmt.Sprintf("needs the time of a message's first attempt, which the %s adapter cannot know (Capabilities.KnowsFirstAttempt is false); use MaxAttempts alone", c.Broker)}
	}
	if l, ok := p.Backoff.(BackoffCapabilityValidator); ok {
		if err := backoffError(l.ValidateFor(c), true); err != nil {
			return err
		}
	}
	if !c.PerMessageDelay && p.Backoff != nil {
		for n := 1; n <= p.DelayedRetries(); n++ {
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
