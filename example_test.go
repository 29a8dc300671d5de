package millrace_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
)

// A handler reads its Attempt to change course on the last one; AttemptFromHeaders reads the
// history a republished copy carries (foreign or garbled headers read as attempt 1).
func ExampleAttempt() {
	msg := message.NewMessage("id-1", []byte("payload"))
	millrace.SetRetryHeaders(msg.Metadata, millrace.Attempt{Number: 3, OriginalTopic: "orders", LastError: "timeout"}, time.Time{})

	at := millrace.AttemptFromHeaders(msg.Metadata)
	at.MaxAttempts = 3
	fmt.Println(at.Number, at.Source, at.OriginalTopic, at.LastError, at.IsLast())

	forged := message.NewMessage("id-2", nil)
	forged.Metadata.Set(millrace.HeaderAttempt, "-7")
	fmt.Println(millrace.AttemptFromHeaders(forged.Metadata).Number)
	// Output:
	// 3 header orders timeout true
	// 1
}

// A handler returns its outcome in its error; Classify reads it, and gives errors that carry
// none to a Classifier (here: a missing customer is never worth retrying).
func ExampleOutcome() {
	errNoCustomer := errors.New("no such customer")
	classifier := func(err error) millrace.Outcome {
		if errors.Is(err, errNoCustomer) {
			return millrace.OutcomeDiscard
		}
		return millrace.OutcomeRetry
	}
	for _, err := range []error{
		millrace.Retry(errors.New("gateway timeout")),
		millrace.RetryAfter(errors.New("rate limited"), 30*time.Second),
		millrace.Discard(errors.New("user opted out")),
		millrace.Malformed(errors.New("invalid JSON")),
		fmt.Errorf("load: %w", errNoCustomer),
		errors.New("connection reset"),
	} {
		oe := millrace.Classify(err, classifier)
		fmt.Printf("%-7s delay=%-3s %v\n", oe.Outcome, oe.Delay, oe)
	}
	// Output:
	// RETRY   delay=0s  RETRY: gateway timeout
	// RETRY   delay=30s RETRY: rate limited
	// DISCARD delay=0s  DISCARD: user opted out
	// DISCARD delay=0s  MALFORMED: invalid JSON
	// DISCARD delay=0s  DISCARD: load: no such customer
	// RETRY   delay=0s  RETRY: connection reset
}

// The built-in backoffs: Fixed, Delays and Exponential. Window is the shortest time from the
// first failure to the give-up (an idempotency lease must be shorter); DistinctDelays are the
// tiers RabbitMQ and Kafka provision.
func ExampleRetryPolicy() {
	for _, p := range []millrace.RetryPolicy{
		{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		{MaxAttempts: 5, Backoff: millrace.Delays{time.Second, 10 * time.Second, time.Minute}},
		{MaxAttempts: 6, Backoff: millrace.Exponential{Initial: time.Second, Max: 10 * time.Second}},
	} {
		var delays []time.Duration
		for n := 1; n < p.MaxAttempts; n++ {
			delays = append(delays, p.Delay(n))
		}
		fmt.Printf("delays %v window %s tiers %v\n", delays, p.Window(), p.DistinctDelays())
	}
	// Output:
	// delays [1m0s 1m0s 1m0s 1m0s] window 4m0s tiers [1m0s]
	// delays [1s 10s 1m0s 1m0s] window 2m11s tiers [1s 10s 1m0s]
	// delays [1s 2s 4s 8s 10s] window 25s tiers [1s 2s 4s 8s 10s]
}

// ValidateFor refuses at start-up what an adapter cannot deliver, naming the field, the value
// and the limit: here a jittered backoff on a broker that delays through fixed tiers.
func ExampleRetryPolicy_ValidateFor() {
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.2}}
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "sqs", PerMessageDelay: true, MaxDelay: 12 * time.Hour}))
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "kafka", MaxTiers: 8}))
	// Output:
	// <nil>
	// millrace: invalid configuration: RetryPolicy.Backoff.Jitter = 0.2: must be 0: the kafka adapter delays through fixed tiers, one per distinct delay
}

// Linear is a user-defined backoff: Step x n before retry n, at most Max. Delay is the one
// method a Backoff needs; Validate (BackoffValidator) checks its settings.
type Linear struct {
	Step, Max time.Duration
}

// Delay returns min(Step x n, Max).
func (l Linear) Delay(n int) time.Duration {
	if n > int(l.Max/l.Step) {
		return l.Max
	}
	return time.Duration(n) * l.Step
}

// Validate refuses a Step that is not positive; the error's Field is placed under the policy's.
func (l Linear) Validate() error {
	if l.Step <= 0 {
		return &millrace.ConfigError{Field: "Step", Value: l.Step.String(), Rule: "must be positive"}
	}
	return nil
}

// A user-defined Backoff is judged by the same rules as the built-ins: its own Validate, then
// every retry's delay against the adapter (here too many tiers for Kafka, too long for SQS).
func ExampleBackoff() {
	p := millrace.RetryPolicy{MaxAttempts: 5, Backoff: Linear{Step: 30 * time.Second, Max: 90 * time.Second}}
	fmt.Println(p.Delay(1), p.Delay(2), p.Delay(4), p.Window(), p.DistinctDelays())
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "amqp", MaxDelay: 49 * 24 * time.Hour}))
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "kafka", MaxTiers: 2}))
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "sqs", PerMessageDelay: true, MaxDelay: time.Minute}))
	fmt.Println(millrace.RetryPolicy{MaxAttempts: 3, Backoff: Linear{Max: time.Minute}}.Validate())
	// Output:
	// 30s 1m0s 1m30s 4m30s [30s 1m0s 1m30s]
	// <nil>
	// millrace: invalid configuration: RetryPolicy.Backoff = 3 distinct delays: the kafka adapter supports at most 2 delay tiers
	// millrace: invalid configuration: RetryPolicy.Backoff = 1m30s: delay exceeds the sqs adapter's maximum delay 1m0s
	// millrace: invalid configuration: RetryPolicy.Backoff.Step = 0s: must be positive
}

// Spread is a user-defined jittered backoff: a delay anywhere in [Base, 2 Base]. MinDelay and
// MaxDelay (JitteredBackoff) declare the bounds, so the window uses the shortest, adapter
// limits the longest, and tiered adapters refuse it.
type Spread struct{ Base time.Duration }

// Delay returns a delay in [Base, 2 Base] (deterministic here, for the example's output).
func (s Spread) Delay(n int) time.Duration { return s.Base + s.Base*time.Duration(n%2)/2 }

// MinDelay returns Base.
func (s Spread) MinDelay(int) time.Duration { return s.Base }

// MaxDelay returns 2 Base.
func (s Spread) MaxDelay(int) time.Duration { return 2 * s.Base }

func ExampleJitteredBackoff() {
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: Spread{Base: 10 * time.Second}}
	lo, hi := p.DelayRange(1)
	fmt.Println(lo, hi, p.Window(), p.MaxDelay())
	fmt.Println(p.ValidateFor(millrace.Capabilities{Broker: "amqp"}))
	// Output:
	// 10s 20s 30s 20s
	// millrace: invalid configuration: RetryPolicy.Backoff = 10s to 20s before retry 1: must be one delay per retry: the amqp adapter delays through fixed tiers, one per distinct delay
}

// A ConfigError names the field, the value and the rule; errors.As reaches it through the
// router's wrapping, and Limit says the rule is an adapter's.
func ExampleConfigError() {
	err := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(2 * time.Hour)}.
		ValidateFor(millrace.Capabilities{Broker: "memory", PerMessageDelay: true, MaxDelay: time.Hour})
	err = fmt.Errorf("start consumer: %w", err)

	var ce *millrace.ConfigError
	if errors.As(err, &ce) {
		fmt.Printf("field %s, value %s, adapter limit %v\nrule: %s\n", ce.Field, ce.Value, ce.Limit, ce.Rule)
	}
	// Output:
	// field RetryPolicy.Backoff, value 2h0m0s, adapter limit true
	// rule: delay exceeds the memory adapter's maximum delay 1h0m0s
}

// Every configuration error wraps ErrInvalidConfig, adapter limits ErrPolicyExceedsAdapter too;
// a message that failed its last attempt carries ErrExhausted and the handler's error, and an
// adapter used after Close returns ErrClosed.
func Example_sentinelErrors() {
	tooMany := millrace.RetryPolicy{MaxAttempts: 6, Backoff: millrace.Fixed(time.Second)}.
		ValidateFor(millrace.Capabilities{Broker: "amqp", DeliveryLimit: 5})
	ownRule := millrace.RetryPolicy{MaxAttempts: 0}.Validate()
	fmt.Println(errors.Is(tooMany, millrace.ErrInvalidConfig), errors.Is(tooMany, millrace.ErrPolicyExceedsAdapter))
	fmt.Println(errors.Is(ownRule, millrace.ErrInvalidConfig), errors.Is(ownRule, millrace.ErrPolicyExceedsAdapter))

	errDown := errors.New("smtp: connection refused")
	var err error = &millrace.ExhaustedError{Attempts: 5, Err: errDown}
	fmt.Println(errors.Is(err, millrace.ErrExhausted), errors.Is(err, errDown))
	fmt.Println(err)

	a, _ := memory.New(memory.Config{})
	_ = a.Close()
	err = a.Publish("orders", message.NewMessage("id-1", nil))
	fmt.Println(errors.Is(err, millrace.ErrClosed))
	// Output:
	// true true
	// true false
	// true true
	// millrace: retry attempts exhausted after 5 attempts: smtp: connection refused
	// true
}
