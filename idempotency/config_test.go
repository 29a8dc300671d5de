package idempotency_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
)

func TestConfigDefaultsMatchFieldReport(t *testing.T) {
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	// Field report 3: 5 attempts, fixed 60 s apart -> 4 min window; 2 min lease; 104 s budget.
	cfg := idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute)}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("field report defaults refused: %v", err)
	}
	if idempotency.DefaultLeaseTTL != 2*time.Minute || idempotency.DefaultDoneTTL != 7*24*time.Hour ||
		idempotency.DefaultSendCutoff != 10*time.Second {
		t.Fatal("defaults drifted from the field report")
	}
	// Budget defaults to 104 s under the 2 min lease: 104 s passes, 120 s (= LeaseTTL) does not.
	cfg.Budget = 104 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatalf("104 s budget refused: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	policy := fixedPolicy(5, 200*time.Millisecond) // window 800 ms
	cases := []struct {
		name      string
		cfg       idempotency.Config
		field     string
		value     string
		ruleParts []string
	}{
		{"lease longer than window (the 15-minute bug)", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 2 * time.Second},
			"idempotency.Config.LeaseTTL", "2s", []string{"must be positive and strictly less than the retry window (MaxAttempts-1) x delay = 800ms"}},
		{"lease equal to window", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 800 * time.Millisecond},
			"idempotency.Config.LeaseTTL", "800ms", []string{"strictly less than"}},
		{"negative lease", idempotency.Config{Store: store, Policy: policy, LeaseTTL: -time.Second},
			"idempotency.Config.LeaseTTL", "-1s", []string{"must be positive"}},
		{"default lease vs short window", idempotency.Config{Store: store, Policy: fixedPolicy(3, 10*time.Second)},
			"idempotency.Config.LeaseTTL", "2m0s", []string{"= 20s"}},
		{"single attempt has no window", idempotency.Config{Store: store, Policy: millrace.RetryPolicy{MaxAttempts: 1}, LeaseTTL: time.Second},
			"idempotency.Config.LeaseTTL", "1s", []string{"= 0s"}},
		{"budget equal to lease", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 300 * time.Millisecond, Budget: 300 * time.Millisecond},
			"idempotency.Config.Budget", "300ms", []string{"strictly less than LeaseTTL = 300ms"}},
		{"negative budget", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 300 * time.Millisecond, Budget: -1},
			"idempotency.Config.Budget", "-1ns", []string{"must be positive"}},
		{"cutoff above budget", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 300 * time.Millisecond, Budget: 200 * time.Millisecond, SendCutoff: 250 * time.Millisecond},
			"idempotency.Config.SendCutoff", "250ms", []string{"at most Budget = 200ms"}},
		{"negative done TTL", idempotency.Config{Store: store, Policy: policy, LeaseTTL: 300 * time.Millisecond, DoneTTL: -time.Hour},
			"idempotency.Config.DoneTTL", "-1h0m0s", []string{"must be positive"}},
		{"no store", idempotency.Config{Policy: policy, LeaseTTL: 300 * time.Millisecond},
			"idempotency.Config.Store", "nil", []string{"required"}},
		{"invalid policy", idempotency.Config{Store: store, LeaseTTL: 300 * time.Millisecond},
			"RetryPolicy.MaxAttempts", "0", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want an error wrapping ErrInvalidConfig", err)
			}
			var ce *millrace.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %T, want *millrace.ConfigError", err)
			}
			if ce.Field != c.field || ce.Value != c.value {
				t.Fatalf("ConfigError field=%q value=%q, want %q %q (%v)", ce.Field, ce.Value, c.field, c.value, err)
			}
			for _, p := range c.ruleParts {
				if !strings.Contains(err.Error(), p) {
					t.Fatalf("error %q does not contain %q", err, p)
				}
			}
			if _, nerr := idempotency.New(c.cfg); nerr == nil {
				t.Fatal("New accepted a config Validate refuses")
			}
		})
	}
}

func TestConfigDefaultBudgetAndCutoffFollowShortLease(t *testing.T) {
	store, _ := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	// A 300 ms lease without Budget or SendCutoff: defaults scale down (260 ms, cutoff = budget).
	cfg := idempotency.Config{Store: store, Policy: fixedPolicy(5, 200*time.Millisecond), LeaseTTL: 300 * time.Millisecond}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("short lease with default budget refused: %v", err)
	}
}
