package redisstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"group required", Config{}, "Group"},
		{"start id", Config{Group: "g", GroupStartID: ">"}, "GroupStartID"},
		{"negative window", Config{Group: "g", Window: -1}, "Window"},
		{"read block below 1ms", Config{Group: "g", ReadBlock: time.Microsecond}, "ReadBlock"},
		{"negative budget", Config{Group: "g", ProcessingBudget: -time.Second}, "ProcessingBudget"},
		{"min idle below budget", Config{Group: "g", ProcessingBudget: 2 * time.Minute, MinIdle: time.Minute}, "MinIdle"},
		{"min idle below default budget", Config{Group: "g", MinIdle: 10 * time.Second}, "MinIdle"},
		{"negative interval", Config{Group: "g", ReclaimInterval: -1}, "ReclaimInterval"},
		{"negative batch", Config{Group: "g", ReclaimBatch: -1}, "ReclaimBatch"},
		{"negative maxlen", Config{Group: "g", MaxLen: -1}, "MaxLen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			var ce *millrace.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("err %v, want a *millrace.ConfigError wrapping ErrInvalidConfig", err)
			}
			if ce.Field != "redisstream.Config."+c.field {
				t.Fatalf("field %q, want redisstream.Config.%s", ce.Field, c.field)
			}
			if _, err := New(c.cfg); !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("New accepted an invalid config: %v", err)
			}
		})
	}
	ok := Config{Group: "g", ProcessingBudget: 2 * time.Minute, MinIdle: 5 * time.Minute, ReclaimInterval: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the field report's setup is refused: %v", err)
	}
	if err := (Config{Group: "g", ProcessingBudget: time.Minute, MinIdle: time.Minute}).Validate(); err != nil {
		t.Fatalf("MinIdle equal to ProcessingBudget is refused: %v", err)
	}
}

func TestValidateBudget(t *testing.T) {
	cfg := Config{Group: "g", ProcessingBudget: 2 * time.Minute}
	if err := cfg.ValidateBudget(104 * time.Second); err != nil {
		t.Fatalf("router budget below ProcessingBudget refused: %v", err)
	}
	for _, b := range []time.Duration{0, 3 * time.Minute} {
		err := cfg.ValidateBudget(b)
		if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), "router.Config.Budget") {
			t.Fatalf("router budget %s: err %v, want a ConfigError naming router.Config.Budget", b, err)
		}
	}
}

func TestThresholds(t *testing.T) {
	policy := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Delays{100 * time.Millisecond, time.Second, 5 * time.Second}}
	th := newThresholds(&policy, 200*time.Millisecond)
	want := map[int64]time.Duration{0: 200 * time.Millisecond, 1: 200 * time.Millisecond, 2: time.Second, 3: 5 * time.Second, 4: 5 * time.Second, 9: 5 * time.Second}
	for c, w := range want {
		if got := th.forCount(c); got != w {
			t.Errorf("count %d: threshold %s, want %s", c, got, w)
		}
	}
	if th.min != 200*time.Millisecond {
		t.Errorf("min %s, want 200ms", th.min)
	}

	jittered := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.5}}
	th = newThresholds(&jittered, time.Millisecond)
	if got := th.forCount(2); got != 2*time.Second {
		t.Errorf("jittered exponential, count 2: threshold %s, want the unjittered 2s", got)
	}

	none := newThresholds(nil, 300*time.Millisecond)
	if none.forCount(1) != 300*time.Millisecond || none.forCount(7) != 300*time.Millisecond {
		t.Errorf("unprovisioned stream: thresholds %v, want MinIdle", none.byCount)
	}
	single := millrace.RetryPolicy{MaxAttempts: 1}
	if got := newThresholds(&single, time.Second).forCount(1); got != time.Second {
		t.Errorf("MaxAttempts 1 without backoff: threshold %s, want MinIdle", got)
	}
}

func TestAddedAt(t *testing.T) {
	if got := addedAt("1700000000123-4"); !got.Equal(time.UnixMilli(1700000000123)) {
		t.Errorf("addedAt = %s", got)
	}
	for _, id := range []string{"1-1", "garbage", "99999999999999-0"} {
		if got := addedAt(id); !got.IsZero() {
			t.Errorf("addedAt(%q) = %s, want zero", id, got)
		}
	}
}

// TestAdapterValidateBudget: the adapter method has the signature the router's optional check
// looks for, refuses what Config.ValidateBudget refuses, and reads 0 as the router's default
// (MaxBudget), which fits.
func TestAdapterValidateBudget(t *testing.T) {
	a, err := New(Config{Group: "g", ProcessingBudget: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var check interface{ ValidateBudget(time.Duration) error } = a
	for b, ok := range map[time.Duration]bool{0: true, 104 * time.Second: true, 2 * time.Minute: true, 3 * time.Minute: false, -time.Second: false} {
		err := check.ValidateBudget(b)
		if ok && err != nil {
			t.Errorf("router budget %s refused: %v", b, err)
		}
		if !ok && !errors.Is(err, millrace.ErrInvalidConfig) {
			t.Errorf("router budget %s: err %v, want a ConfigError", b, err)
		}
	}
}
