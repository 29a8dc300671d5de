// Package plantest holds what the adapters' plan tests share: field report 3's policy and a
// one-broker brokerurl.Plan that fails the test on an error.
package plantest

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

// FieldReport is field report 3's spec on topic: 5 attempts, fixed 60 s, lease 2 min, with
// the processing budget given.
func FieldReport(topic string, budget time.Duration) plan.Spec {
	return plan.Spec{Topic: topic, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		Budget: budget, Lease: 2 * time.Minute}
}

// Plan plans spec on the one broker rawURL names through the default Mux (with its live
// settings compared when check is set) and fails tb on an error.
func Plan(tb testing.TB, spec plan.Spec, rawURL string, check bool) plan.Report {
	tb.Helper()
	r, err := brokerurl.Plan(context.Background(), spec, []string{rawURL}, brokerurl.PlanOptions{Check: check})
	if err != nil {
		tb.Fatalf("plan %s: %v", rawURL, err)
	}
	return r
}
