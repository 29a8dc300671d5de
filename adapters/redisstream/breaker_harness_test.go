package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

// The outage-breaker test holds messages for seconds: the harnesses give it adapters whose
// ProcessingBudget (and MinIdle, its default) outlast that, instead of the suite's 200 ms, after
// which the recovery pass would claim a waiting entry again and count one more delivery.
var (
	_ conformance.ClaimHarness = harness{}
	_ conformance.ClaimHarness = clusterHarness{}
)

func claimConfig(claim time.Duration) Config {
	cfg := testConfig()
	cfg.ProcessingBudget = claim
	return cfg
}

func (harness) NewClaimAdapter(_ context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error) {
	return newTestAdapter(t, claimConfig(claim)), nil
}

func (clusterHarness) NewClaimAdapter(_ context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error) {
	return newClusterTestAdapter(t, claimConfig(claim)), nil
}
