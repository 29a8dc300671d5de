package plan

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/millrace/millrace"
)

// Spec is what a consumer will run with: the topic, the retry policy, the router's processing
// budget and the idempotency lease.
type Spec struct {
	// Topic is the work topic the plan provisions. Required.
	Topic string
	// Policy is the retry policy of the topic's handler. Required.
	Policy millrace.RetryPolicy
	// Budget is the router's processing budget (router.Config.Budget): the handler's deadline.
	// 0 means what the router uses then: the adapter's MaxBudget on brokers that bound it
	// (Redis Streams, SQS), no deadline elsewhere.
	Budget time.Duration
	// Lease is the idempotency middleware's LeaseTTL. 0: the consumer runs without the
	// idempotency middleware, and its rules are not checked.
	Lease time.Duration
}

// Keys lists the settings Set and ParseSpec take, in the order the documentation gives them.
var Keys = []string{"topic", "attempts", "backoff", "budget", "lease"}

// Set sets the setting key (one of Keys) from its text, as a flag or a spec file line gives it.
// Errors name the key and the rule.
func (s *Spec) Set(key, value string) error {
	value = strings.TrimSpace(value)
	switch key {
	case "topic":
		if value == "" {
			return fmt.Errorf("topic %q: must not be empty", value)
		}
		s.Topic = value
	case "attempts":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return fmt.Errorf("attempts %q: must be a whole number, at least 1 (the first attempt counts)", value)
		}
		s.Policy.MaxAttempts = n
	case "backoff":
		b, err := ParseBackoff(value)
		if err != nil {
			return err
		}
		s.Policy.Backoff = b
	case "budget", "lease":
		d, err := ParseDuration(value)
		if err != nil {
			return fmt.Errorf("%s %q: %w", key, value, err)
		}
		if key == "budget" {
			s.Budget = d
		} else {
			s.Lease = d
		}
	default:
		return fmt.Errorf("unknown setting %q (known: %s)", key, strings.Join(Keys, ", "))
	}
	return nil
}

// ParseSpec reads a key=value spec file (see the package documentation). Errors name the line.
func ParseSpec(r io.Reader) (Spec, error) {
	var s Spec
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, value, ok := strings.Cut(text, "=")
		if !ok {
			return Spec{}, fmt.Errorf("line %d: %q is not key = value", line, text)
		}
		key = strings.TrimSpace(key)
		if prev, dup := seen[key]; dup {
			return Spec{}, fmt.Errorf("line %d: %s is already set on line %d", line, key, prev)
		}
		seen[key] = line
		if err := s.Set(key, value); err != nil {
			return Spec{}, fmt.Errorf("line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Validate checks what a plan needs before any rule: a topic, and a policy that passes
// millrace.RetryPolicy.Validate.
func (s Spec) Validate() error {
	if s.Topic == "" {
		return fmt.Errorf("topic: is required")
	}
	if s.Budget < 0 {
		return fmt.Errorf("budget %s: must not be negative", s.Budget)
	}
	if s.Lease < 0 {
		return fmt.Errorf("lease %s: must not be negative", s.Lease)
	}
	return s.Policy.Validate()
}

// String describes s in one line, e.g. "push.requested: 5 attempts, fixed 1m0s, budget 50s,
// lease 2m0s".
func (s Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d attempt", s.Topic, s.Policy.MaxAttempts)
	if s.Policy.MaxAttempts != 1 {
		b.WriteString("s")
	}
	b.WriteString(", " + FormatBackoff(s.Policy.Backoff))
	if s.Budget > 0 {
		b.WriteString(", budget " + s.Budget.String())
	} else {
		b.WriteString(", budget: the adapter's default")
	}
	if s.Lease > 0 {
		b.WriteString(", lease " + s.Lease.String())
	} else {
		b.WriteString(", no idempotency lease")
	}
	return b.String()
}

// ParseDuration reads a Go duration (90s, 2m, 1h30m) or a whole number of days (7d). Negative
// durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("must be a duration such as 90s, 2m or 7d")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as 90s, 2m or 7d")
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return d, nil
}

// ParseBackoff reads a backoff as the package documentation writes it. Errors name the part
// that is wrong; the values themselves are checked by millrace.RetryPolicy.Validate.
func ParseBackoff(s string) (millrace.Backoff, error) {
	s = strings.TrimSpace(s)
	kind, arg, _ := strings.Cut(s, ":")
	switch strings.ToLower(kind) {
	case "none", "":
		if arg != "" {
			return nil, fmt.Errorf("backoff %q: none takes no value", s)
		}
		return nil, nil
	case "fixed":
		d, err := ParseDuration(arg)
		if err != nil {
			return nil, fmt.Errorf("backoff %q: fixed delay %w", s, err)
		}
		return millrace.Fixed(d), nil
	case "delays":
		var ds millrace.Delays
		for i, part := range strings.Split(arg, ",") {
			d, err := ParseDuration(part)
			if err != nil {
				return nil, fmt.Errorf("backoff %q: delay %d (%q) %w", s, i+1, part, err)
			}
			ds = append(ds, d)
		}
		return ds, nil
	case "exponential", "exp":
		var e millrace.Exponential
		for part := range strings.SplitSeq(arg, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				return nil, fmt.Errorf("backoff %q: %q is not name=value (initial, max, multiplier, jitter)", s, part)
			}
			var err error
			switch k {
			case "initial":
				e.Initial, err = ParseDuration(v)
			case "max":
				e.Max, err = ParseDuration(v)
			case "multiplier":
				e.Multiplier, err = strconv.ParseFloat(v, 64)
			case "jitter":
				e.Jitter, err = strconv.ParseFloat(v, 64)
			default:
				return nil, fmt.Errorf("backoff %q: unknown exponential setting %q (initial, max, multiplier, jitter)", s, k)
			}
			if err != nil {
				return nil, fmt.Errorf("backoff %q: %s=%q is not a valid value", s, k, v)
			}
		}
		return e, nil
	}
	if d, err := ParseDuration(s); err == nil {
		return millrace.Fixed(d), nil
	}
	return nil, fmt.Errorf("backoff %q: must be fixed:<duration>, delays:<d1>,<d2>..., exponential:initial=<d>,max=<d>[,multiplier=<m>][,jitter=<j>] or none", s)
}

// FormatBackoff writes b for people: "fixed 1m0s", "delays 1s, 10s, 1m0s", "exponential 1s to
// 5m0s x2 jitter 0.2", "no retry"; a backoff of another type by its String method when it is a
// fmt.Stringer, else by its Go type.
func FormatBackoff(b millrace.Backoff) string {
	switch v := b.(type) {
	case nil:
		return "no retry"
	case millrace.Fixed:
		return "fixed " + time.Duration(v).String()
	case millrace.Delays:
		parts := make([]string, len(v))
		for i, d := range v {
			parts[i] = d.String()
		}
		return "delays " + strings.Join(parts, ", ")
	case millrace.Exponential:
		m := v.Multiplier
		if m == 0 {
			m = 2
		}
		out := fmt.Sprintf("exponential %s to %s x%g", v.Initial, v.Max, m)
		if v.Jitter > 0 {
			out += fmt.Sprintf(" jitter %g", v.Jitter)
		}
		return out
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprintf("%T", b)
}
