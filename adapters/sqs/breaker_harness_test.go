package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/conformance"
)

// The outage-breaker test holds messages for seconds: the harness gives it an adapter whose
// ProcessingBudget outlasts that, with the visibility timeout the next whole second at least
// MinVisibilityMargin above it, instead of the suite's 3 s, after which SQS would hand a
// waiting message out again.
var _ conformance.ClaimHarness = harness{}

func (harness) NewClaimAdapter(_ context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error) {
	return sqs.New(claimConfig(t, claim))
}

// claimConfig is testConfig with a ProcessingBudget of claim and the visibility timeout it needs.
func claimConfig(t testing.TB, claim time.Duration) sqs.Config {
	cfg := testConfig(t)
	cfg.ProcessingBudget = claim
	cfg.VisibilityTimeout = (claim + sqs.MinVisibilityMargin + time.Second - 1).Truncate(time.Second)
	return cfg
}
