package sqs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/router"
)

// offline is a valid configuration that never touches the network before Provision's checks.
func offline() sqs.Config {
	return sqs.Config{Endpoint: "http://127.0.0.1:1", ProcessingBudget: 50 * time.Second}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*sqs.Config)
		field string // "" = valid
	}{
		{"defaults with endpoint and budget", func(*sqs.Config) {}, ""},
		{"no endpoint and no AWS config", func(c *sqs.Config) { c.Endpoint = "" }, "Endpoint"},
		{"budget missing", func(c *sqs.Config) { c.ProcessingBudget = 0 }, "ProcessingBudget"},
		{"budget equals visibility", func(c *sqs.Config) { c.ProcessingBudget = 60 * time.Second }, "ProcessingBudget"},
		{"field report: 104s budget with 60s visibility", func(c *sqs.Config) { c.ProcessingBudget = 104 * time.Second }, "ProcessingBudget"},
		{"budget within the margin of visibility", func(c *sqs.Config) { c.ProcessingBudget = 59999 * time.Millisecond }, "ProcessingBudget"},
		{"budget exactly the margin below visibility", func(c *sqs.Config) { c.ProcessingBudget = 60*time.Second - sqs.MinVisibilityMargin }, ""},
		{"budget below visibility", func(c *sqs.Config) { c.VisibilityTimeout = 2 * time.Minute; c.ProcessingBudget = 104 * time.Second }, ""},
		{"visibility not whole seconds", func(c *sqs.Config) { c.VisibilityTimeout = 1500 * time.Millisecond; c.ProcessingBudget = time.Second }, "VisibilityTimeout"},
		{"visibility above 12h", func(c *sqs.Config) { c.VisibilityTimeout = 13 * time.Hour }, "VisibilityTimeout"},
		{"suffix with a dot", func(c *sqs.Config) { c.DeadLetterSuffix = ".dlq" }, "DeadLetterSuffix"},
		{"retention above 14 days", func(c *sqs.Config) { c.DeadLetterRetention = 15 * 24 * time.Hour }, "DeadLetterRetention"},
		{"wait above 20s", func(c *sqs.Config) { c.WaitTime = 21 * time.Second }, "WaitTime"},
		{"unknown give-up", func(c *sqs.Config) { c.GiveUp = 7 }, "GiveUp"},
		{"negative call timeout", func(c *sqs.Config) { c.CallTimeout = -time.Second }, "CallTimeout"},
		{"short call timeout", func(c *sqs.Config) { c.CallTimeout = 100 * time.Millisecond }, ""},
		{"negative window", func(c *sqs.Config) { c.Window = -1 }, "Window"},
		{"window above MaxWindow", func(c *sqs.Config) { c.Window = sqs.MaxWindow + 1 }, "Window"},
		{"window 1", func(c *sqs.Config) { c.Window = 1; c.Pollers = 1 }, ""},
		{"window 1 with the default pollers", func(c *sqs.Config) { c.Window = 1 }, "Pollers"},
		{"negative pollers", func(c *sqs.Config) { c.Pollers = -1 }, "Pollers"},
		{"pollers above MaxPollers", func(c *sqs.Config) { c.Window = sqs.MaxWindow; c.Pollers = sqs.MaxPollers + 1 }, "Pollers"},
		{"pollers above window", func(c *sqs.Config) { c.Window = 4; c.Pollers = 5 }, "Pollers"},
		{"pollers equal window", func(c *sqs.Config) { c.Window = 4; c.Pollers = 4 }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := offline()
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var ce *millrace.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want a *millrace.ConfigError", err)
			}
			if ce.Field != "sqs.Config."+tc.field {
				t.Fatalf("field %q, want sqs.Config.%s (error: %v)", ce.Field, tc.field, err)
			}
			if _, err := sqs.New(cfg); !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("New accepted an invalid configuration: %v", err)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	cfg := offline()
	cfg.VisibilityTimeout = 90 * time.Second
	cfg.ProcessingBudget = 80 * time.Second
	a, err := sqs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := a.Capabilities()
	if c.Broker != "sqs" || !c.NativeAttemptCount || !c.PerMessageDelay || c.CarriesLastError {
		t.Fatalf("capabilities %+v", c)
	}
	if c.MaxDelay != 12*time.Hour-90*time.Second {
		t.Fatalf("MaxDelay %s, want 12h minus the 90s visibility timeout", c.MaxDelay)
	}
	if c.DelayGranularity != time.Second {
		t.Fatalf("DelayGranularity %s, want 1s", c.DelayGranularity)
	}

	// The router refuses what SQS cannot do: sub-second delays and delays beyond MaxDelay.
	for _, p := range []millrace.RetryPolicy{
		{MaxAttempts: 3, Backoff: millrace.Fixed(1500 * time.Millisecond)},
		{MaxAttempts: 2, Backoff: millrace.Fixed(12 * time.Hour)},
	} {
		if _, err := router.New(router.Config{Adapter: a, Policy: p}); !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
			t.Errorf("policy %+v: %v, want ErrPolicyExceedsAdapter", p, err)
		}
	}
	// The field report's policy fits.
	if _, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)}}); err != nil {
		t.Errorf("field report policy refused: %v", err)
	}
}

// TestProvisionRefusesPolicyBeyondRetention: a policy whose attempts and delays outlast SQS's
// 14-day retention is refused before any queue is touched.
func TestProvisionRefusesPolicyBeyondRetention(t *testing.T) {
	a, err := sqs.New(offline())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p := millrace.RetryPolicy{MaxAttempts: 40, Backoff: millrace.Fixed(11 * time.Hour)}
	err = a.Provision(context.Background(), "orders", p)
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("Provision: %v, want a retention limit error", err)
	}
}

func TestCheckLease(t *testing.T) {
	fieldReport := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)} // window 4 min
	cases := []struct {
		lease time.Duration
		ok    bool
	}{
		{2 * time.Minute, true},   // the fix
		{15 * time.Minute, false}, // the bug: longer than the 4 redeliveries
		{4 * time.Minute, false},  // equal to the window: the last retry may still see BUSY
		{0, false},
	}
	for _, c := range cases {
		err := sqs.CheckLease(c.lease, fieldReport)
		if c.ok && err != nil {
			t.Errorf("lease %s: %v, want nil", c.lease, err)
		}
		if !c.ok && !errors.Is(err, millrace.ErrInvalidConfig) {
			t.Errorf("lease %s: %v, want ErrInvalidConfig", c.lease, err)
		}
		if !c.ok && err != nil && !strings.Contains(err.Error(), "4m0s") {
			t.Errorf("lease %s: error %q does not name the 4m window", c.lease, err)
		}
	}
}

func TestQueueName(t *testing.T) {
	a, err := sqs.New(offline())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	long := strings.Repeat("x", 100)
	cases := map[string]string{
		"push.requested":               "push-requested",
		"orders_v2-eu":                 "orders_v2-eu",
		"a/b c":                        "a-b-c",
		"push.requested-dlq":           "push-requested-dlq",
		"jobs.fifo":                    "jobs.fifo",
		"jobs.v2.fifo":                 "jobs-v2.fifo",
		"jobs-fifo":                    "jobs-fifo",
		a.DeadLetterTopic("q"):         "q-dlq",
		a.DeadLetterTopic("jobs.fifo"): "jobs-fifo-dlq",
	}
	for topic, want := range cases {
		if got := a.QueueName(topic); got != want {
			t.Errorf("QueueName(%q) = %q, want %q", topic, got, want)
		}
	}
	n1, n2 := a.QueueName(long), a.QueueName(long+"y")
	if len(n1) != 80 || len(n2) != 80 || n1 == n2 {
		t.Errorf("long topics: %q and %q, want two distinct 80-character names", n1, n2)
	}
	dl := a.QueueName(a.DeadLetterTopic(long))
	if len(dl) != 80 || !strings.HasSuffix(dl, "-dlq") || dl == n1 {
		t.Errorf("long dead-letter topic: %q, want 80 characters ending in -dlq", dl)
	}
	// FIFO names keep ".fifo" last within the 80 characters, the dead-letter suffix before it.
	f1, f2 := a.QueueName(long+".fifo"), a.QueueName(long+"y.fifo")
	if len(f1) != 80 || len(f2) != 80 || f1 == f2 || !strings.HasSuffix(f1, ".fifo") {
		t.Errorf("long FIFO topics: %q and %q, want two distinct 80-character names ending in .fifo", f1, f2)
	}
	fdl := a.QueueName(a.DeadLetterTopic(long + ".fifo")) // a standard queue
	if len(fdl) != 80 || !strings.HasSuffix(fdl, "-dlq") {
		t.Errorf("long FIFO topic's dead-letter topic: %q, want 80 characters ending in -dlq", fdl)
	}
}
