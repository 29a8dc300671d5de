package millrace_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

// linear is a user-defined backoff with only the required method: Step x n.
type linear struct{ Step time.Duration }

func (l linear) Delay(n int) time.Duration { return time.Duration(n) * l.Step }

// spread is a user-defined jittered backoff: any delay in [Base, 2 Base] before every retry. Its
// Delay returns Out instead when Out is set, to check that the policy keeps delays in bounds.
type spread struct {
	Base time.Duration
	Out  time.Duration
}

func (s spread) Delay(int) time.Duration {
	if s.Out != 0 {
		return s.Out
	}
	return s.Base + s.Base/2
}
func (s spread) MinDelay(int) time.Duration { return s.Base }
func (s spread) MaxDelay(int) time.Duration { return 2 * s.Base }
func (s spread) Validate() error {
	if s.Base <= 0 {
		return &millrace.ConfigError{Field: "Base", Value: s.Base.String(), Rule: "must be positive"}
	}
	return nil
}

// table gives Delays[n-1] before retry n, with no rule of its own: whatever it lists, negative,
// huge or unsorted, reaches the policy's rules.
type table []time.Duration

func (t table) Delay(n int) time.Duration { return t[min(n, len(t))-1] }

// flaky answers the same retry with a different delay each time, without declaring bounds.
type flaky struct{ calls *int }

func (f flaky) Delay(int) time.Duration { *f.calls++; return time.Duration(*f.calls) * time.Second }

// plainErr is a user backoff whose Validate returns an error that is no ConfigError.
type plainErr struct{ linear }

func (plainErr) Validate() error { return errors.New("step must be whole minutes") }

// limited refuses, through BackoffCapabilityValidator, every adapter with a delivery limit.
type limited struct{ linear }

func (limited) ValidateFor(c millrace.Capabilities) error {
	if c.DeliveryLimit > 0 {
		return &millrace.ConfigError{Field: "Step", Value: "any", Rule: "needs a broker without a delivery limit"}
	}
	return nil
}

func TestUserBackoffThroughThePolicy(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: linear{Step: time.Second}}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for _, c := range []millrace.Capabilities{
		{Broker: "memory", PerMessageDelay: true, MaxDelay: time.Hour},
		{Broker: "sqs", PerMessageDelay: true, MaxDelay: 12 * time.Hour, DelayGranularity: time.Second},
		{Broker: "kafka", MaxTiers: 3, MaxDelay: 24 * time.Hour},
	} {
		if err := p.ValidateFor(c); err != nil {
			t.Errorf("ValidateFor(%s): %v", c.Broker, err)
		}
	}
	if got := []time.Duration{p.Delay(1), p.Delay(2), p.Delay(3)}; got[0] != time.Second || got[1] != 2*time.Second || got[2] != 3*time.Second {
		t.Errorf("delays %v", got)
	}
	if got := p.Window(); got != 6*time.Second {
		t.Errorf("Window = %s, want 6s", got)
	}
	if got := p.MaxDelay(); got != 3*time.Second {
		t.Errorf("MaxDelay = %s, want 3s", got)
	}
	if got := fmt.Sprint(p.DistinctDelays()); got != "[1s 2s 3s]" {
		t.Errorf("DistinctDelays = %s", got)
	}
	if lo, hi := p.DelayRange(2); lo != 2*time.Second || hi != 2*time.Second {
		t.Errorf("DelayRange(2) = %s, %s", lo, hi)
	}
	// One tier too many for a tiered adapter, and not whole seconds for SQS.
	if err := p.ValidateFor(millrace.Capabilities{Broker: "kafka", MaxTiers: 2}); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) ||
		err.Error() != "millrace: invalid configuration: RetryPolicy.Backoff = 3 distinct delays: the kafka adapter supports at most 2 delay tiers" {
		t.Errorf("3 tiers on 2: %v", err)
	}
	half := millrace.RetryPolicy{MaxAttempts: 3, Backoff: linear{Step: 1500 * time.Millisecond}}
	if err := half.ValidateFor(millrace.Capabilities{Broker: "sqs", PerMessageDelay: true, DelayGranularity: time.Second}); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) ||
		!strings.Contains(err.Error(), "1.5s") || !strings.Contains(err.Error(), "granularity 1s") {
		t.Errorf("1.5 s on SQS: %v", err)
	}
}

func TestUserJitteredBackoff(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: spread{Base: time.Second}}
	if err := p.ValidateFor(millrace.Capabilities{Broker: "memory", PerMessageDelay: true}); err != nil {
		t.Fatalf("ValidateFor: %v", err)
	}
	if got := p.Window(); got != 3*time.Second {
		t.Errorf("Window = %s, want the minimum 3s", got)
	}
	if got := p.MaxDelay(); got != 2*time.Second {
		t.Errorf("MaxDelay = %s, want 2s", got)
	}
	if got := p.Delay(1); got != 1500*time.Millisecond {
		t.Errorf("Delay(1) = %s", got)
	}
	// A Delay outside the declared bounds is brought back within them.
	for out, want := range map[time.Duration]time.Duration{time.Hour: 2 * time.Second, -time.Hour: time.Second, time.Millisecond: time.Second} {
		if got := (millrace.RetryPolicy{MaxAttempts: 4, Backoff: spread{Base: time.Second, Out: out}}).Delay(2); got != want {
			t.Errorf("Delay returning %s: policy gives %s, want %s", out, got, want)
		}
	}
	// Tiered adapters refuse a delay that varies, naming the retry and its bounds.
	err := p.ValidateFor(millrace.Capabilities{Broker: "amqp"})
	const want = "millrace: invalid configuration: RetryPolicy.Backoff = 1s to 2s before retry 1: must be one delay per retry: the amqp adapter delays through fixed tiers, one per distinct delay"
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || err.Error() != want {
		t.Errorf("jitter on a tiered adapter:\n got %v\nwant %s", err, want)
	}
}

func TestUserBackoffValidatorErrorsNameTheField(t *testing.T) {
	cases := []struct {
		b    millrace.Backoff
		want string
	}{
		{spread{}, "millrace: invalid configuration: RetryPolicy.Backoff.Base = 0s: must be positive"},
		{plainErr{linear{time.Second}}, "millrace: invalid configuration: RetryPolicy.Backoff = invalid: step must be whole minutes"},
	}
	for _, c := range cases {
		err := (millrace.RetryPolicy{MaxAttempts: 3, Backoff: c.b}).Validate()
		if !errors.Is(err, millrace.ErrInvalidConfig) || errors.Is(err, millrace.ErrPolicyExceedsAdapter) || err.Error() != c.want {
			t.Errorf("%T:\n got %v\nwant %s", c.b, err, c.want)
		}
	}
	p := millrace.RetryPolicy{MaxAttempts: 3, Backoff: limited{linear{time.Second}}}
	if err := p.ValidateFor(millrace.Capabilities{Broker: "memory", PerMessageDelay: true}); err != nil {
		t.Errorf("no delivery limit: %v", err)
	}
	err := p.ValidateFor(millrace.Capabilities{Broker: "amqp", DeliveryLimit: 5})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || err.Error() != "millrace: invalid configuration: RetryPolicy.Backoff.Step = any: needs a broker without a delivery limit" {
		t.Errorf("BackoffCapabilityValidator: %v", err)
	}
}

// TestMisbehavingUserBackoffRefused: the delays of a user backoff are untrusted. A negative,
// huge, unstable or unordered one is refused at start-up over retries 1 to MaxAttempts-1, and
// the sums saturate instead of overflowing.
func TestMisbehavingUserBackoffRefused(t *testing.T) {
	calls := 0
	cases := []struct {
		name string
		p    millrace.RetryPolicy
		caps millrace.Capabilities
		want string
	}{
		{"negative at retry 3", millrace.RetryPolicy{MaxAttempts: 5, Backoff: table{time.Second, time.Second, -time.Nanosecond}}, millrace.Capabilities{},
			"millrace: invalid configuration: RetryPolicy.Backoff = -1ns: must not be negative (the delay before retry 3)"},
		{"bounds out of order", millrace.RetryPolicy{MaxAttempts: 2, Backoff: spread{Base: -time.Second}}, millrace.Capabilities{},
			"RetryPolicy.Backoff.Base = -1s: must be positive"},
		{"unstable without bounds", millrace.RetryPolicy{MaxAttempts: 3, Backoff: flaky{&calls}}, millrace.Capabilities{},
			"millrace: invalid configuration: RetryPolicy.Backoff = Delay(1) 1s, then 2s: must give the same delay for the same retry, or implement millrace.JitteredBackoff to declare its bounds"},
		{"huge on memory", millrace.RetryPolicy{MaxAttempts: 4, Backoff: table{time.Second, math.MaxInt64}}, millrace.Capabilities{Broker: "memory", PerMessageDelay: true, MaxDelay: 24 * time.Hour},
			"millrace: invalid configuration: RetryPolicy.Backoff = 2562047h47m16.854775807s: delay exceeds the memory adapter's maximum delay 24h0m0s"},
		{"above SQS's longest visibility", millrace.RetryPolicy{MaxAttempts: 3, Backoff: table{time.Second, 13 * time.Hour}}, millrace.Capabilities{Broker: "sqs", PerMessageDelay: true, MaxDelay: 12 * time.Hour, DelayGranularity: time.Second},
			"13h0m0s: delay exceeds the sqs adapter's maximum delay 12h0m0s"},
		{"too many tiers", millrace.RetryPolicy{MaxAttempts: 10, Backoff: linear{time.Second}}, millrace.Capabilities{Broker: "kafka", MaxTiers: 8},
			"9 distinct delays: the kafka adapter supports at most 8 delay tiers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.ValidateFor(c.caps)
			if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	// Valid but huge delays on a broker without a maximum: the window saturates.
	huge := millrace.RetryPolicy{MaxAttempts: 4, Backoff: table{math.MaxInt64}}
	if err := huge.ValidateFor(millrace.Capabilities{Broker: "unbounded", PerMessageDelay: true}); err != nil {
		t.Fatalf("huge delays without a maximum: %v", err)
	}
	if got := huge.Window(); got != math.MaxInt64 {
		t.Errorf("Window = %d, want it saturated at %d", got, int64(math.MaxInt64))
	}
}

// TestExponentialGrowthCannotOverflow: a multiplier that overshoots the longest Duration stops at
// Max instead of converting an out-of-range float (negative on amd64).
func TestExponentialGrowthCannotOverflow(t *testing.T) {
	e := millrace.Exponential{Initial: time.Hour, Max: math.MaxInt64 / 2, Multiplier: 1e10}
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: e}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for n := 2; n <= 3; n++ {
		if got := e.Delay(n); got != e.Max {
			t.Errorf("Delay(%d) = %d, want Max %d", n, got, e.Max)
		}
	}
	if got := p.MaxDelay(); got != e.Max {
		t.Errorf("MaxDelay = %d, want %d", got, e.Max)
	}
	nan := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Multiplier: math.NaN()}}
	if err := nan.Validate(); err == nil || !strings.Contains(err.Error(), "RetryPolicy.Backoff.Multiplier = NaN") {
		t.Errorf("NaN multiplier: %v", err)
	}
}

// TestBuiltinErrorsUnchanged pins the built-ins' messages, now produced through BackoffValidator
// and BackoffCapabilityValidator.
func TestBuiltinErrorsUnchanged(t *testing.T) {
	cases := []struct {
		p    millrace.RetryPolicy
		caps *millrace.Capabilities
		want string
	}{
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(-time.Second)}, nil, "millrace: invalid configuration: RetryPolicy.Backoff = -1s: must not be negative"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff = []: must list at least one delay"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Second, -time.Millisecond}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff[1] = -1ms: must not be negative"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Max: time.Second}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff.Initial = 0s: must be positive"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Millisecond}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff.Max = 1ms: must be at least Initial (1s)"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff.Multiplier = 0.5: must be >= 1 (0 means 2)"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 1}}, nil, "millrace: invalid configuration: RetryPolicy.Backoff.Jitter = 1: must be in [0, 1)"},
		{millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.1}}, &millrace.Capabilities{Broker: "amqp"},
			"millrace: invalid configuration: RetryPolicy.Backoff.Jitter = 0.1: must be 0: the amqp adapter delays through fixed tiers, one per distinct delay"},
	}
	for _, c := range cases {
		var err error
		if c.caps == nil {
			err = c.p.Validate()
		} else {
			err = c.p.ValidateFor(*c.caps)
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v:\n got %v\nwant %s", c.p, err, c.want)
		}
	}
}

// TestFixedAndDelaysDeclareBothBounds: Fixed and Delays export MinDelay and MaxDelay, both
// their delay, so they are JitteredBackoffs with equal bounds: code written against
// JitteredBackoff takes them as they are, tiered adapters still accept them, and a window
// or longest delay summed over a century-long Fixed saturates instead of wrapping.
func TestFixedAndDelaysDeclareBothBounds(t *testing.T) {
	for _, b := range []millrace.Backoff{millrace.Fixed(3 * time.Second), millrace.Delays{time.Second, 5 * time.Second}} {
		j, ok := b.(millrace.JitteredBackoff)
		if !ok {
			t.Fatalf("%T is not a JitteredBackoff", b)
		}
		for n := 1; n <= 3; n++ {
			if lo, hi, d := j.MinDelay(n), j.MaxDelay(n), b.Delay(n); lo != d || hi != d {
				t.Errorf("%T: MinDelay(%d) %s, MaxDelay(%d) %s, Delay(%d) %s: want all equal", b, n, lo, n, hi, n, d)
			}
		}
		p := millrace.RetryPolicy{MaxAttempts: 3, Backoff: b}
		if err := p.ValidateFor(millrace.Capabilities{Broker: "kafka", MaxTiers: 3, MaxDelay: time.Hour}); err != nil {
			t.Errorf("%T refused by a tiered adapter: %v", b, err)
		}
	}
	century := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(100 * 365 * 24 * time.Hour)}
	if w := century.Window(); w != math.MaxInt64 {
		t.Errorf("Window of 4 century-long retries = %d, want saturated at %d", w, int64(math.MaxInt64))
	}
}
