package millrace

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Backoff gives the delay before delayed retry number n (n = 1 is the retry after the first
// delivery failed; with RetryPolicy.Immediate 0, after the first failure).
//
// A type with this one method is a Backoff. Its Delay must depend on n alone (the same n, the
// same delay): adapters with fixed delay tiers (RabbitMQ TTL queues, Kafka retry topics)
// provision one tier per distinct delay, and RetryPolicy.ValidateFor judges the delays of
// retries 1 to RetryPolicy.DelayedRetries() (MaxAttempts-1 without immediate attempts) against
// the adapter's limits once, at start-up, by the same rules
// for every backoff. Optional interfaces carry the rest: a backoff whose delay varies between
// calls (jitter) implements JitteredBackoff, one with settings to check implements
// BackoffValidator, and one with rules that depend on the adapter implements
// BackoffCapabilityValidator. Fixed, Delays and Exponential are the built-in backoffs.
type Backoff interface {
	// Delay returns the delay before delayed retry n, n >= 1.
	Delay(n int) time.Duration
}

// JitteredBackoff is a Backoff whose Delay(n) varies between calls, always within
// [MinDelay(n), MaxDelay(n)]. RetryPolicy uses MinDelay for the retry window (the idempotency
// lease must be shorter) and the delay tiers, and MaxDelay for the longest delay an adapter
// must wait; adapters with fixed delay tiers refuse a backoff whose two bounds differ.
// RetryPolicy.Delay keeps every delay within the bounds. Fixed and Delays implement it too,
// with both bounds equal to their delay; Exponential's bounds differ when Jitter > 0.
type JitteredBackoff interface {
	Backoff
	// MinDelay returns the shortest delay Delay(n) can return.
	MinDelay(n int) time.Duration
	// MaxDelay returns the longest delay Delay(n) can return.
	MaxDelay(n int) time.Duration
}

// BackoffValidator is a Backoff that checks its own settings; RetryPolicy.Validate calls
// Validate. A *ConfigError it returns (errors.As) is reported with its Field placed under the
// policy's: Field "" names the backoff itself ("RetryPolicy.Backoff"), "Initial" one of its
// fields ("RetryPolicy.Backoff.Initial"), "[1]" an element ("RetryPolicy.Backoff[1]"). Any
// other error becomes the Rule of a ConfigError on "RetryPolicy.Backoff".
type BackoffValidator interface {
	Backoff
	// Validate reports the first setting that breaks a rule, nil when there is none.
	Validate() error
}

// BackoffCapabilityValidator is a Backoff with rules of its own against an adapter's
// capabilities, checked by RetryPolicy.ValidateFor after the delivery limit and before the
// tier rules. Its errors are placed as for BackoffValidator, and always count as adapter
// limits (ErrPolicyExceedsAdapter). Exponential uses it to name its Jitter when an adapter
// delays through fixed tiers.
type BackoffCapabilityValidator interface {
	Backoff
	// ValidateFor reports the first setting c cannot honour, nil when there is none.
	ValidateFor(c Capabilities) error
}

// backoffField is the field path of a backoff's settings in a RetryPolicy's errors.
const backoffField = "RetryPolicy.Backoff"

// backoffError places err, from a BackoffValidator or a BackoffCapabilityValidator, under
// backoffField.
func backoffError(err error, limit bool) error {
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return &ConfigError{Field: backoffField, Value: "invalid", Rule: err.Error(), Limit: limit}
	}
	out := *ce
	switch {
	case out.Field == "":
		out.Field = backoffField
	case out.Field[0] == '[' || out.Field[0] == '.':
		out.Field = backoffField + out.Field
	default:
		out.Field = backoffField + "." + out.Field
	}
	out.Limit = out.Limit || limit
	return &out
}

// delayBounds returns the shortest and longest delay b can give before retry n.
func delayBounds(b Backoff, n int) (lo, hi time.Duration) {
	if j, ok := b.(JitteredBackoff); ok {
		return j.MinDelay(n), j.MaxDelay(n)
	}
	d := b.Delay(n)
	return d, d
}

// Fixed waits the same delay before every retry. The field report's Kafka setup uses Fixed(60s).
type Fixed time.Duration

// Delay returns the fixed delay.
func (f Fixed) Delay(int) time.Duration { return time.Duration(f) }

// MinDelay returns the fixed delay. With MaxDelay it makes Fixed a JitteredBackoff whose two
// bounds are the delay itself, so code written against JitteredBackoff takes a Fixed as it is.
func (f Fixed) MinDelay(int) time.Duration { return time.Duration(f) }

// MaxDelay returns the fixed delay (see MinDelay).
func (f Fixed) MaxDelay(int) time.Duration { return time.Duration(f) }

// Validate refuses a negative delay. As for every BackoffValidator, the error's Field is
// relative to the backoff ("": the backoff itself); RetryPolicy.Validate places it.
func (f Fixed) Validate() error {
	if f < 0 {
		return &ConfigError{Value: time.Duration(f).String(), Rule: "must not be negative"}
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

// MinDelay returns the listed delay for retry n. With MaxDelay it makes Delays a
// JitteredBackoff whose two bounds are the listed delay, so code written against
// JitteredBackoff takes a Delays as it is.
func (d Delays) MinDelay(n int) time.Duration { return d.Delay(n) }

// MaxDelay returns the listed delay for retry n (see MinDelay).
func (d Delays) MaxDelay(n int) time.Duration { return d.Delay(n) }

// Validate refuses an empty list and a negative element (Field "[i]", relative to the
// backoff).
func (d Delays) Validate() error {
	if len(d) == 0 {
		return &ConfigError{Value: "[]", Rule: "must list at least one delay"}
	}
	for i, v := range d {
		if v < 0 {
			return &ConfigError{Field: "[" + strconv.Itoa(i) + "]", Value: v.String(), Rule: "must not be negative"}
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

// base is the delay before retry n without jitter. The growth stops at Max before it is
// converted back to a Duration, so no Multiplier can overflow it.
func (e Exponential) base(n int) time.Duration {
	m := e.Multiplier
	if m == 0 {
		m = 2
	}
	d := float64(e.Initial)
	for i := 1; i < n && d < float64(e.Max); i++ {
		d *= m
	}
	if d >= float64(e.Max) {
		return e.Max
	}
	return time.Duration(d)
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

// MaxDelay returns the delay before retry n without jitter: jitter only ever shortens it.
func (e Exponential) MaxDelay(n int) time.Duration { return e.base(n) }

// Validate checks Initial, Max, Multiplier and Jitter (Field "Initial", ..., relative to the
// backoff).
func (e Exponential) Validate() error {
	switch {
	case e.Initial <= 0:
		return &ConfigError{Field: "Initial", Value: e.Initial.String(), Rule: "must be positive"}
	case e.Max < e.Initial:
		return &ConfigError{Field: "Max", Value: e.Max.String(), Rule: "must be at least Initial (" + e.Initial.String() + ")"}
	case e.Multiplier != 0 && e.Multiplier < 1 || math.IsNaN(e.Multiplier):
		return &ConfigError{Field: "Multiplier", Value: fmt.Sprint(e.Multiplier), Rule: "must be >= 1 (0 means 2)"}
	case e.Jitter < 0 || e.Jitter >= 1 || math.IsNaN(e.Jitter):
		return &ConfigError{Field: "Jitter", Value: fmt.Sprint(e.Jitter), Rule: "must be in [0, 1)"}
	}
	return nil
}

// ValidateFor refuses Jitter on an adapter that delays through fixed tiers.
func (e Exponential) ValidateFor(c Capabilities) error {
	if !c.PerMessageDelay && e.Jitter > 0 {
		return &ConfigError{Field: "Jitter", Value: fmt.Sprint(e.Jitter), Limit: true,
			Rule: fmt.Sprintf("must be 0: the %s adapter delays through fixed tiers, one per distinct delay", c.Broker)}
	}
	return nil
}

var (
	_ JitteredBackoff            = Exponential{}
	_ BackoffValidator           = Exponential{}
	_ BackoffCapabilityValidator = Exponential{}
	_ BackoffValidator           = Fixed(0)
	_ JitteredBackoff            = Fixed(0)
	_ BackoffValidator           = Delays(nil)
	_ JitteredBackoff            = Delays(nil)
)
