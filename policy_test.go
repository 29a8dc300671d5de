package millrace_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

func TestPolicyValidateRefusesWithFieldAndRule(t *testing.T) {
	cases := []struct {
		name   string
		policy millrace.RetryPolicy
		want   []string
	}{
		{"zero attempts", millrace.RetryPolicy{MaxAttempts: 0, Backoff: millrace.Fixed(time.Second)}, []string{"RetryPolicy.MaxAttempts", "= 0", "at least 1"}},
		{"negative attempts", millrace.RetryPolicy{MaxAttempts: -2}, []string{"RetryPolicy.MaxAttempts", "= -2"}},
		{"negative fixed delay", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(-time.Second)}, []string{"RetryPolicy.Backoff", "-1s", "negative"}},
		{"negative listed delay", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Second, -time.Millisecond}}, []string{"RetryPolicy.Backoff[1]", "-1ms"}},
		{"empty list", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{}}, []string{"RetryPolicy.Backoff", "at least one"}},
		{"no backoff", millrace.RetryPolicy{MaxAttempts: 3}, []string{"RetryPolicy.Backoff", "required"}},
		{"exp no initial", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Max: time.Second}}, []string{"RetryPolicy.Backoff.Initial", "positive"}},
		{"exp max below initial", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Millisecond}}, []string{"RetryPolicy.Backoff.Max", "1ms"}},
		{"exp jitter", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 1}}, []string{"RetryPolicy.Backoff.Jitter", "[0, 1)"}},
		{"exp multiplier", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Multiplier: 0.5}}, []string{"RetryPolicy.Backoff.Multiplier", "0.5"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.policy.Validate()
			if !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
				t.Fatalf("err = %v: a policy's own rule must not claim an adapter limit", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestPolicyValidateAccepts(t *testing.T) {
	for _, p := range []millrace.RetryPolicy{
		{MaxAttempts: 1},
		{MaxAttempts: 5, Backoff: millrace.Fixed(60 * time.Second)},
		{MaxAttempts: 4, Backoff: millrace.Delays{time.Second, 10 * time.Second}},
		{MaxAttempts: 8, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.2}},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

func TestPolicyValidateForAdapterLimits(t *testing.T) {
	caps := millrace.Capabilities{Broker: "sqs", MaxDelay: 12 * time.Hour, DelayGranularity: time.Second, DeliveryLimit: 20}
	cases := []struct {
		name   string
		policy millrace.RetryPolicy
		want   []string
	}{
		{"delay above max", millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(13 * time.Hour)}, []string{"RetryPolicy.Backoff", "13h0m0s", "12h0m0s"}},
		{"exp cap above max", millrace.RetryPolicy{MaxAttempts: 30, Backoff: millrace.Exponential{Initial: time.Second, Max: 24 * time.Hour}}, []string{"24h0m0s", "12h0m0s"}},
		{"granularity", millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(1500 * time.Millisecond)}, []string{"1.5s", "granularity 1s"}},
		{"delivery limit", millrace.RetryPolicy{MaxAttempts: 21, Backoff: millrace.Fixed(time.Second)}, []string{"RetryPolicy.MaxAttempts", "21", "delivery limit 20"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.policy.ValidateFor(caps)
			if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrPolicyExceedsAdapter and ErrInvalidConfig", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if err := (millrace.RetryPolicy{MaxAttempts: 20, Backoff: millrace.Fixed(time.Minute)}).ValidateFor(caps); err != nil {
		t.Fatalf("policy within limits refused: %v", err)
	}
}

func TestPolicyTiersRefuseJitterAndTooManyDelays(t *testing.T) {
	caps := millrace.Capabilities{Broker: "amqp", PerMessageDelay: false, MaxTiers: 2}
	jitter := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.1}}
	if err := jitter.ValidateFor(caps); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "Jitter") {
		t.Fatalf("jitter on a tiered adapter: err = %v", err)
	}
	three := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Delays{time.Second, 2 * time.Second, 3 * time.Second}}
	if err := three.ValidateFor(caps); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("3 tiers on a 2-tier adapter: err = %v", err)
	}
}

func TestPolicyDelayWindowAndTiers(t *testing.T) {
	fixed := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(60 * time.Second)}
	if got := fixed.Window(); got != 4*time.Minute {
		t.Errorf("field report window: got %s, want 4m0s ((5-1) x 60s)", got)
	}
	if got := fixed.Delay(3); got != 60*time.Second {
		t.Errorf("Delay(3) = %s", got)
	}
	list := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Delays{time.Second, 10 * time.Second}}
	wantDelays := []time.Duration{time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}
	for n, want := range wantDelays {
		if got := list.Delay(n + 1); got != want {
			t.Errorf("Delays.Delay(%d) = %s, want %s", n+1, got, want)
		}
	}
	if got := list.Window(); got != 31*time.Second {
		t.Errorf("list window %s, want 31s", got)
	}
	if got := list.DistinctDelays(); len(got) != 2 || got[0] != time.Second || got[1] != 10*time.Second {
		t.Errorf("DistinctDelays = %v", got)
	}
	exp := millrace.RetryPolicy{MaxAttempts: 6, Backoff: millrace.Exponential{Initial: time.Second, Max: 5 * time.Second}}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for n, w := range want {
		if got := exp.Delay(n + 1); got != w {
			t.Errorf("Exponential.Delay(%d) = %s, want %s", n+1, got, w)
		}
	}
	if got := exp.MaxDelay(); got != 5*time.Second {
		t.Errorf("MaxDelay = %s", got)
	}
}

func TestExponentialJitterOnlyShortens(t *testing.T) {
	e := millrace.Exponential{Initial: time.Second, Max: 8 * time.Second, Jitter: 0.25}
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: e}
	if got, want := p.Window(), time.Duration(0.75*float64(7*time.Second)); got != want {
		t.Errorf("jittered window = %s, want the minimum %s", got, want)
	}
	var sawShorter bool
	for range 1000 {
		d := e.Delay(2)
		if d > 2*time.Second || d < 1500*time.Millisecond {
			t.Fatalf("Delay(2) = %s, want within [1.5s, 2s]", d)
		}
		sawShorter = sawShorter || d < 2*time.Second
	}
	if !sawShorter {
		t.Fatal("1000 jittered delays were all unjittered")
	}
}
