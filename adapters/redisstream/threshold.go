package redisstream

import (
	"time"

	"github.com/millrace/millrace"
)

// thresholds is the reclaim idle time of a stream's entries per delivery count: an entry that
// was delivered c times is claimed once it has been idle for max(policy delay before retry c,
// MinIdle). A jittered backoff counts with its longest delay (JitteredBackoff.MaxDelay, an
// Exponential's unjittered value): ScheduleRetry shifts each failed entry's delivery time by
// the jitter it drew, so the spread survives.
type thresholds struct {
	byCount []time.Duration // byCount[c-1]; counts past the end use the last element
	min     time.Duration   // the shortest of them: the XPENDING IDLE filter
}

// newThresholds computes the thresholds of policy; a nil policy (a stream nobody provisioned,
// e.g. a dead-letter stream read by a tool) uses minIdle for every count.
func newThresholds(policy *millrace.RetryPolicy, minIdle time.Duration) thresholds {
	n := 1
	if policy != nil && policy.MaxAttempts > 1 {
		n = policy.MaxAttempts - 1
	}
	t := thresholds{byCount: make([]time.Duration, n), min: -1}
	for c := 1; c <= n; c++ {
		d := minIdle
		if policy != nil {
			_, longest := policy.DelayRange(c)
			d = max(longest, minIdle)
		}
		t.byCount[c-1] = d
		if t.min < 0 || d < t.min {
			t.min = d
		}
	}
	return t
}

// forCount returns the idle time after which an entry delivered count times is due.
func (t thresholds) forCount(count int64) time.Duration {
	i := int(min(max(count, 1), int64(len(t.byCount)))) - 1
	return t.byCount[i]
}
