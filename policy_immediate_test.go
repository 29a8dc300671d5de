package millrace_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

func TestPolicyImmediateAndMaxElapsedRules(t *testing.T) {
	cases := []struct {
		name   string
		policy millrace.RetryPolicy
		want   []string
	}{
		{"negative immediate", millrace.RetryPolicy{MaxAttempts: 3, Immediate: -1, Backoff: millrace.Fixed(time.Second)}, []string{"RetryPolicy.Immediate", "= -1", "must not be negative"}},
		{"immediate = max attempts", millrace.RetryPolicy{MaxAttempts: 3, Immediate: 3, Backoff: millrace.Fixed(time.Second)}, []string{"RetryPolicy.Immediate", "= 3", "less than MaxAttempts 3"}},
		{"immediate > max attempts", millrace.RetryPolicy{MaxAttempts: 1, Immediate: 2}, []string{"RetryPolicy.Immediate", "= 2", "less than MaxAttempts 1"}},
		{"negative max elapsed", millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second), MaxElapsed: -time.Second}, []string{"RetryPolicy.MaxElapsed", "-1s", "must not be negative"}},
		{"no backoff for a delayed retry", millrace.RetryPolicy{MaxAttempts: 3, Immediate: 1}, []string{"RetryPolicy.Backoff", "required", "MaxAttempts > Immediate+1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.policy.Validate()
			var ce *millrace.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, millrace.ErrInvalidConfig) || errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
				t.Fatalf("err = %v, want a ConfigError that is no adapter limit", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	for _, p := range []millrace.RetryPolicy{
		{MaxAttempts: 3, Immediate: 2},                                       // every attempt in one delivery: no delay needed
		{MaxAttempts: 5, Immediate: 1, Backoff: millrace.Fixed(time.Second)}, // 3 deliveries
		{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second), MaxElapsed: time.Minute},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v refused: %v", p, err)
		}
	}
}

func TestPolicyMaxElapsedNeedsFirstAttempt(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second), MaxElapsed: time.Minute}
	err := p.ValidateFor(millrace.Capabilities{Broker: "foreign"})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("MaxElapsed where the first attempt is unknown: err = %v, want ErrPolicyExceedsAdapter", err)
	}
	for _, w := range []string{"RetryPolicy.MaxElapsed", "1m0s", "foreign adapter", "KnowsFirstAttempt"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	if err := p.ValidateFor(millrace.Capabilities{Broker: "memory", KnowsFirstAttempt: true}); err != nil {
		t.Fatalf("refused where the first attempt is known: %v", err)
	}
	p.MaxElapsed = 0
	if err := p.ValidateFor(millrace.Capabilities{Broker: "foreign"}); err != nil {
		t.Fatalf("no MaxElapsed refused: %v", err)
	}
}

func TestPolicyDeliveryLimitCountsDeliveries(t *testing.T) {
	caps := millrace.Capabilities{Broker: "amqp", DeliveryLimit: 3}
	// 10 attempts, 5 per delivery: 2 deliveries, within a limit of 3 deliveries.
	if err := (millrace.RetryPolicy{MaxAttempts: 10, Immediate: 4, Backoff: millrace.Fixed(time.Second)}).ValidateFor(caps); err != nil {
		t.Fatalf("2 deliveries refused by a limit of 3: %v", err)
	}
	err := (millrace.RetryPolicy{MaxAttempts: 8, Immediate: 1, Backoff: millrace.Fixed(time.Second)}).ValidateFor(caps)
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("4 deliveries, limit 3: err = %v", err)
	}
	for _, w := range []string{"RetryPolicy.MaxAttempts", "8 (4 deliveries of up to 2 attempts)", "delivery limit 3"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestPolicyNumbering(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 1, Backoff: millrace.Delays{time.Second, 10 * time.Second, time.Hour}}
	if got := p.Deliveries(); got != 3 {
		t.Errorf("Deliveries = %d, want 3 (1,2 | 3,4 | 5)", got)
	}
	if got := p.DelayedRetries(); got != 2 {
		t.Errorf("DelayedRetries = %d, want 2", got)
	}
	for d, want := range map[int]int{-3: 1, 0: 1, 1: 1, 2: 3, 3: 5, 4: 7} {
		if got := p.FirstAttemptOf(d); got != want {
			t.Errorf("FirstAttemptOf(%d) = %d, want %d", d, got, want)
		}
	}
	for n, want := range map[int]int{0: 1, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3} {
		if got := p.DeliveryOf(n); got != want {
			t.Errorf("DeliveryOf(%d) = %d, want %d", n, got, want)
		}
	}
	if got := p.FirstAttemptOf(math.MaxInt); got != math.MaxInt {
		t.Errorf("FirstAttemptOf(MaxInt) = %d, want it to saturate at MaxInt", got)
	}
	// Delays count delayed retries: 2 of them, 1s and 10s; the hour is never used.
	if got := p.Window(); got != 11*time.Second {
		t.Errorf("Window = %s, want 11s (the two delayed retries)", got)
	}
	if got := p.MaxDelay(); got != 10*time.Second {
		t.Errorf("MaxDelay = %s, want 10s", got)
	}
	if got := p.DistinctDelays(); !slices.Equal(got, []time.Duration{time.Second, 10 * time.Second}) {
		t.Errorf("DistinctDelays = %v", got)
	}
	p.MaxElapsed = 5 * time.Second
	if got := p.Window(); got != 5*time.Second {
		t.Errorf("Window with MaxElapsed 5s = %s, want 5s", got)
	}
	// Without immediate attempts the counts are the old ones.
	q := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}
	if q.Deliveries() != 5 || q.DelayedRetries() != 4 || q.FirstAttemptOf(4) != 4 || q.DeliveryOf(4) != 4 {
		t.Errorf("Immediate 0: Deliveries %d, DelayedRetries %d, FirstAttemptOf(4) %d, DeliveryOf(4) %d", q.Deliveries(), q.DelayedRetries(), q.FirstAttemptOf(4), q.DeliveryOf(4))
	}
	if got := (millrace.RetryPolicy{MaxAttempts: math.MaxInt, Immediate: 1}).Deliveries(); got != math.MaxInt/2+1 {
		t.Errorf("Deliveries of MaxInt attempts = %d, want %d", got, math.MaxInt/2+1)
	}
}

func TestAttemptNextDelivery(t *testing.T) {
	for _, c := range []struct {
		a    millrace.Attempt
		want int
	}{
		{millrace.Attempt{Number: 4, Delivery: 2}, 3},
		{millrace.Attempt{Number: 4}, 5}, // not set up by the attempt middleware: Number counts
		{millrace.Attempt{}, 2},
		{millrace.Attempt{Number: 1, Delivery: math.MaxInt}, math.MaxInt},
	} {
		if got := c.a.NextDelivery(); got != c.want {
			t.Errorf("%+v.NextDelivery() = %d, want %d", c.a, got, c.want)
		}
	}
}

func TestExhaustedErrorSaysElapsedLimit(t *testing.T) {
	cause := errors.New("smtp: connection refused")
	err := &millrace.ExhaustedError{Attempts: 3, Err: cause, MaxElapsed: time.Minute, Elapsed: 50 * time.Second, NextDelay: 20 * time.Second}
	want := "millrace: retry attempts exhausted after 3 attempts (elapsed limit 1m0s: 50s since the first attempt + next delay 20s): smtp: connection refused"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, millrace.ErrExhausted) || !errors.Is(err, cause) {
		t.Errorf("errors.Is: exhausted %v, cause %v", errors.Is(err, millrace.ErrExhausted), errors.Is(err, cause))
	}
	plain := &millrace.ExhaustedError{Attempts: 5, Err: cause}
	if got := plain.Error(); got != "millrace: retry attempts exhausted after 5 attempts: smtp: connection refused" {
		t.Errorf("MaxAttempts text changed: %q", got)
	}
}
