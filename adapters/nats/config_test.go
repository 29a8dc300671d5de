package nats

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

// TestConfigValidate: each refusal names the field, the value and the rule.
func TestConfigValidate(t *testing.T) {
	ok := Config{Durable: "d"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	if err := (Config{Durable: "d", Window: MaxWindow}).Validate(); err != nil {
		t.Fatalf("Window = MaxWindow: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no durable", func(c *Config) { c.Durable = "" }, "nats.Config.Durable = \"\": is required"},
		{"durable with a dot", func(c *Config) { c.Durable = "a.b" }, "nats.Config.Durable = \"a.b\": must be a JetStream name"},
		{"url scheme", func(c *Config) { c.URL = "http://x" }, "nats.Config.URL"},
		{"negative ack wait", func(c *Config) { c.AckWait = -time.Second }, "nats.Config.AckWait = -1s: must not be negative"},
		{"budget half of ack wait", func(c *Config) { c.AckWait = 10 * time.Second; c.ProcessingBudget = 5 * time.Second },
			"nats.Config.ProcessingBudget = 5s: must be below half of AckWait (10s)"},
		{"budget above the default ack wait", func(c *Config) { c.ProcessingBudget = 15 * time.Second }, "must be below half of AckWait (30s)"},
		{"max deliver 1", func(c *Config) { c.MaxDeliver = 1 }, "nats.Config.MaxDeliver = 1: must be -1 (no cap), 0 (the default, -1) or at least 2"},
		{"max deliver -2", func(c *Config) { c.MaxDeliver = -2 }, "nats.Config.MaxDeliver = -2"},
		{"max ack pending -2", func(c *Config) { c.MaxAckPending = -2 }, "nats.Config.MaxAckPending = -2"},
		{"negative window", func(c *Config) { c.Window = -1 }, "nats.Config.Window = -1: must not be negative"},
		{"window above MaxWindow", func(c *Config) { c.Window = MaxWindow + 1 }, "nats.Config.Window = 4097: must be at most 4096 (MaxWindow)"},
		{"window 1<<40", func(c *Config) { c.Window = 1 << 40 }, "nats.Config.Window = 1099511627776: must be at most 4096"},
		{"window max int", func(c *Config) { c.Window = math.MaxInt }, "nats.Config.Window = 9223372036854775807: must be at most 4096"},
		{"negative nack delay", func(c *Config) { c.NackDelay = -time.Second }, "nats.Config.NackDelay = -1s"},
		{"negative ping interval", func(c *Config) { c.PingInterval = -time.Second }, "nats.Config.PingInterval = -1s"},
	}
	for _, c := range cases {
		cfg := ok
		c.edit(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig containing %q", c.name, err, c.want)
		}
	}
}

// TestConfigDefaults: the documented defaults; the default budget is 40 % of AckWait.
func TestConfigDefaults(t *testing.T) {
	c := Config{Durable: "d"}
	c.setDefaults()
	if c.URL != DefaultURL || c.AckWait != DefaultAckWait || c.ProcessingBudget != DefaultProcessingBudget || c.MaxDeliver != -1 ||
		c.MaxAckPending != -1 || c.Window != DefaultWindow || c.NackDelay != DefaultNackDelay || c.PingInterval != DefaultPingInterval || c.StreamName == nil || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	c = Config{Durable: "d", AckWait: 5 * time.Second}
	c.setDefaults()
	if c.ProcessingBudget != 2*time.Second || c.Validate() != nil {
		t.Fatalf("budget with AckWait 5s: %s (%v), want 2s", c.ProcessingBudget, c.Validate())
	}
}

// TestPolicyAgainstMaxDeliver: with a positive MaxDeliver the policy must leave one delivery
// for a failed dead-letter write; Capabilities says so to the router too.
func TestPolicyAgainstMaxDeliver(t *testing.T) {
	c := Config{Durable: "d", MaxDeliver: 4}
	if err := c.ValidatePolicy(millrace.RetryPolicy{MaxAttempts: 3}); err != nil {
		t.Fatalf("3 attempts under MaxDeliver 4: %v", err)
	}
	err := c.ValidatePolicy(millrace.RetryPolicy{MaxAttempts: 4})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "RetryPolicy.MaxAttempts = 4: must be below nats.Config.MaxDeliver (4)") {
		t.Fatalf("4 attempts under MaxDeliver 4: %v", err)
	}
	if err := (Config{Durable: "d"}).ValidatePolicy(millrace.RetryPolicy{MaxAttempts: 1000}); err != nil {
		t.Fatalf("no cap: %v", err)
	}
	a := &Adapter{cfg: c}
	if got := a.Capabilities().DeliveryLimit; got != 3 {
		t.Fatalf("DeliveryLimit %d, want 3", got)
	}
}

// TestStreamName: distinct subjects get distinct valid names.
func TestStreamName(t *testing.T) {
	seen := map[string]string{}
	for _, s := range []string{"orders.created", "orders_2Ecreated", "orders-created", "a.b.dlq", "ü.x"} {
		n := StreamName(s)
		if !validName(n) {
			t.Errorf("StreamName(%q) = %q: not a valid name", s, n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("StreamName(%q) = StreamName(%q) = %q", s, o, n)
		}
		seen[n] = s
	}
	if got := StreamName("orders.created"); got != "orders_2Ecreated" {
		t.Errorf("StreamName = %q", got)
	}
}
