package sqs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// TestRetentionNeedCannotOverflow: the time from the first receive to the give-up grows with
// MaxAttempts x the longest delay; many attempts of long delays must be refused for SQS's
// retention, not overflow into a small (or negative) need that passes. 300000 attempts of 11 h
// overflowed int64 nanoseconds and were accepted while 1000 of them were refused.
func TestRetentionNeedCannotOverflow(t *testing.T) {
	for _, attempts := range []int{1000, 300000} {
		spec := plan.Spec{Topic: "orders", Policy: millrace.RetryPolicy{MaxAttempts: attempts, Backoff: millrace.Fixed(11 * time.Hour)}, Budget: 30 * time.Second}
		r := plantest.Plan(t, spec, "sqs+http://127.0.0.1:19324?visibility=60s&give_up=send", false)
		if problems := strings.Join(r.Problems(), "\n"); r.OK || !strings.Contains(problems, "exceeds SQS's longest message retention") {
			t.Errorf("%d attempts of 11h: OK %v, problems %q; want the retention refused", attempts, r.OK, problems)
		}
	}
}
