package millrace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Backoff gives the delay before retry number n (n = 1 is the retry after the first failure).
type Backoff interface {
	// Delay returns the delay before retry n, n >= 1.
	Delay(n int) time.Duration
	// MinDelay returns the smallest delay Delay(n) can return, for window arithmetic under jitter.
	MinDelay(n int) time.Duration
	// validate reports a configuration error; field is the field path used in the message.
	validate(field string) error
}

// Fixed waits the same delay before every retry. The field report's Kafka setup uses Fixed(60s).
type Fixed time.Duration

// Delay returns the fixed delay.
func (f Fixed) Delay(int) time.Duration { return time.Duration(f) }

// MinDelay returns the fixed delay.
func (f Fixed) MinDelay(int) time.Duration { return time.Duration(f) }

func (f Fixed) validate(field string) error {
	if f < 0 {
		return &ConfigError{Field: field, Value: time.Duration(f).String(), Rule: "must not be negative"}
	}
	return nil
}

// Delays waits Delays[n-1] before retry n; retries beyond the list reuse its last element.
type Delays []time.Duration

// Delay returns the listed delay for retry n.
func (d Delays) Delay(n int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(max(n, 1), len(d))-1]
}

// MinDelay returns the listed delay for retry n.
func (d Delays) MinDelay(n int) time.Duration { return d.Delay(n) }

func (d Delays) validate(field string) error {
	if len(d) == 0 {
		return &ConfigError{Field: field, Value: "[]", Rule: "must list at least one delay"}
	}
	for i, v := range d {
		if v < 0 {
			return &ConfigError{Field: field + "[" + strconv.Itoa(i) + "]", Value: v.String(), Rule: "must not be negative"}
		}
	}
	return nil
}

// Exponential waits Initial * Multiplier^(n-1), capped at Max, then reduced by up to Jitter of
// itself (Jitter 0.2 gives a delay in [0.8 d, d]). Jitter spreads retries of messages that failed
// together; it only ever shortens a delay, so the cap stays a cap.
type Exponential struct {
	// Initial is the delay before the first retry. Required, > 0.
	Initial time.Duration
	// Max caps every delay. Required, >= Initial.
	Max time.Duration
	// Multiplier grows the delay per retry. Default 2 when 0; must be >= 1.
	Multiplier float64
	// Jitter is the fraction in [0, 1) by which a delay may be shortened at random. Default 0.
	Jitter float64
}

func (e Exponential) base(n int) time.Duration {
	m := e.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(e.Initial)
	for i := 1; i < n && d < float64(e.Max); i++ {
		d *= m
	}
	return min(time.Duration(d), e.Max)
}

// Delay returns the jittered delay before retry n.
func (e Exponential) Delay(n int) time.Duration {
	d := e.base(n)
	if e.Jitter > 0 {
		d -= time.Duration(rand.Float64() * e.Jitter * float64(d))
	}
	return d
}

// MinDelay returns the shortest delay jitter can produce for retry n.
func (e Exponential) MinDelay(n int) time.Duration {
	d := e.base(n)
	return d - time.Duration(e.Jitter*float64(d))
}

func (e Exponential) validate(field string) error {
	switch {
	case e.Initial <= 0:
		return &ConfigError{Field: field + ".Initial", Value: e.Initial.String(), Rule: "must be positive"}
	case e.Max < e.Initial:
		return &ConfigError{Field: field + ".Max", Value: e.Max.String(), Rule: "must be at least Initial (" + e.Initial.String() + ")"}
	case e.Multiplier != 0 && e.Multiplier < 1:
		return &ConfigError{Field: field + ".Multiplier", Value: fmt.Sprint(e.Multiplier), Rule: "must be >= 1 (0 means 2)"}
	case e.Jitter < 0 || e.Jitter >= 1:
		return &ConfigError{Field: field + ".Jitter", Value: fmt.Sprint(e.Jitter), Rule: "must be in [0, 1)"}
	}
	return nil
}

// RetryPolicy bounds the retries of one handler.
type RetryPolicy struct {
	// MaxAttempts is the number of handler calls allowed, the first included. Required, >= 1.
	// The field report's Kafka service uses 5; its Redis service dead-letters after 3 deliveries.
	MaxAttempts int
	// Backoff gives the delay before each retry. Required when MaxAttempts > 1.
	Backoff Backoff
}

// Validate checks the policy on its own; adapters add their limits through ValidateFor.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 1 {
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Rule: "must be at least 1 (the first attempt counts)"}
	}
	if p.Backoff == nil {
		if p.MaxAttempts == 1 {
			return nil
		}
		return &ConfigError{Field: "RetryPolicy.Backoff", Value: "nil", Rule: "is required when MaxAttempts > 1"}
	}
	return p.Backoff.validate("RetryPolicy.Backoff")
}

// Delay returns the delay after attempt n failed, before attempt n+1.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if p.Backoff == nil {
		return 0
	}
	return p.Backoff.Delay(max(attempt, 1))
}

// Window is the shortest time from the first failure to the give-up point: the sum of the
// minimum delays of the MaxAttempts-1 retries. An idempotency lease must be shorter than it,
// or a consumer that dies holding the lease makes every retry see BUSY.
func (p RetryPolicy) Window() time.Duration {
	var w time.Duration
	if p.Backoff == nil {
		return 0
	}
	for n := 1; n < p.MaxAttempts; n++ {
		w += p.Backoff.MinDelay(n)
	}
	return w
}

// MaxDelay is the longest delay any retry of this policy can ask for.
func (p RetryPolicy) MaxDelay() time.Duration {
	var m time.Duration
	if p.Backoff == nil {
		return 0
	}
	for n := 1; n < p.MaxAttempts; n++ {
		m = max(m, p.Backoff.Delay(n), p.Backoff.MinDelay(n))
	}
	if e, ok := p.Backoff.(Exponential); ok {
		m = max(m, e.base(p.MaxAttempts-1))
	}
	return m
}

// DistinctDelays lists the distinct delays the policy uses, shortest first. Adapters with fixed
// delay tiers (RabbitMQ TTL queues, Kafka retry topics) declare one tier per element.
// It is undefined for jittered backoffs, which adapters with tiers refuse.
func (p RetryPolicy) DistinctDelays() []time.Duration {
	var out []time.Duration
	if p.Backoff == nil {
		return nil
	}
	for n := 1; n < p.MaxAttempts; n++ {
		out = append(out, p.Backoff.MinDelay(n))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ValidateFor checks p against an adapter's capabilities and refuses, with the field, the value
// and the limit, what the adapter cannot deliver.
func (p RetryPolicy) ValidateFor(c Capabilities) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if c.MaxDelay > 0 {
		if d := p.MaxDelay(); d > c.MaxDelay {
			return &ConfigError{Field: "RetryPolicy.Backoff", Value: d.String(), Limit: true,
				Rule: fmt.Sprintf("delay exceeds the %s adapter's maximum delay %s", c.Broker, c.MaxDelay)}
		}
	}
	if c.DelayGranularity > 0 {
		for _, d := range p.DistinctDelays() {
			if d%c.DelayGranularity != 0 {
				return &ConfigError{Field: "RetryPolicy.Backoff", Value: d.String(), Limit: true,
					Rule: fmt.Sprintf("delay must be a multiple of the %s adapter's granularity %s", c.Broker, c.DelayGranularity)}
			}
		}
	}
	if c.DeliveryLimit > 0 && p.MaxAttempts > c.DeliveryLimit {
		return &ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Limit: true,
			Rule: fmt.Sprintf("exceeds the %s broker's delivery limit %d", c.Broker, c.DeliveryLimit)}
	}
	if !c.PerMessageDelay {
		if e, ok := p.Backoff.(Exponential); ok && e.Jitter > 0 {
			return &ConfigError{Field: "RetryPolicy.Backoff.Jitter", Value: fmt.Sprint(e.Jitter), Limit: true,
				Rule: fmt.Sprintf("must be 0: the %s adapter delays through fixed tiers, one per distinct delay", c.Broker)}
		}
		if c.MaxTiers > 0 && len(p.DistinctDelays()) > c.MaxTiers {
			return &ConfigError{Field: "RetryPolicy.Backoff", Value: strconv.Itoa(len(p.DistinctDelays())) + " distinct delays", Limit: true,
				Rule: fmt.Sprintf("the %s adapter supports at most %d delay tiers", c.Broker, c.MaxTiers)}
		}
	}
	return nil
}
