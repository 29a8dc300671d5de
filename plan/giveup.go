package plan

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/satmath"
)

// Duration is a time.Duration that JSON writes as Go duration text ("1m0s").
type Duration time.Duration

// String returns the Go duration text.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as Go duration text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads Go duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// PolicySteps returns the delayed retries of p as the policy alone asks for them: the wait
// after delivery n (its last attempt, attempt After) is at least its shortest delay and at most
// its longest (RetryPolicy.DelayRange: jitter only ever shortens an exponential delay, so the
// longest is its unjittered value). Immediate attempts wait nothing and have no step: with
// RetryPolicy.Immediate 1 and MaxAttempts 5 the steps come after attempts 2 and 4.
func PolicySteps(p millrace.RetryPolicy) []Step {
	retries := p.DelayedRetries()
	if p.Backoff == nil || retries < 1 {
		return nil
	}
	steps := make([]Step, 0, retries)
	for n := 1; n <= retries; n++ {
		lo, hi := p.DelayRange(n)
		last := min(p.FirstAttemptOf(n+1)-1, p.MaxAttempts)
		steps = append(steps, Step{After: last, Min: Duration(lo), Max: Duration(hi)})
	}
	return steps
}

// GiveUp bounds the time from the start of the first of deliveries to its dead letter: the
// retries' waits (steps), and each delivery taking nothing (Min) or its whole budget (Max:
// the immediate attempts of a delivery share its budget). A budget of 0 leaves the
// deliveries' time unbounded. Pass RetryPolicy.Deliveries() (MaxAttempts when Immediate is 0).
func GiveUp(deliveries int, steps []Step, budget time.Duration) Range {
	var r Range
	for _, s := range steps {
		r.Min = Duration(satmath.Add(time.Duration(r.Min), time.Duration(s.Min)))
		r.Max = Duration(satmath.Add(time.Duration(r.Max), time.Duration(s.Max)))
	}
	if budget > 0 && deliveries > 0 {
		r.Max = Duration(satmath.Add(time.Duration(r.Max), satmath.Mul(deliveries, budget)))
	}
	r.Unbounded = budget <= 0
	return r
}

// MapSteps applies a broker's own delay rounding to every wait of steps: f is the delay the
// broker waits when asked for d (SQS rounds up to whole seconds, a tiered broker picks a tier).
func MapSteps(steps []Step, f func(d time.Duration) time.Duration) {
	for i := range steps {
		steps[i].Min = Duration(f(time.Duration(steps[i].Min)))
		steps[i].Max = Duration(f(time.Duration(steps[i].Max)))
	}
}
