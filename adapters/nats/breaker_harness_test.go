package nats

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

// The outage-breaker test holds messages for seconds: the harness gives it an adapter whose
// ProcessingBudget outlasts that, with an AckWait above twice it (Validate's rule), instead of
// the suite's 3 s AckWait, after which JetStream would deliver a waiting message again.
var _ conformance.ClaimHarness = harness{}

func (harness) NewClaimAdapter(_ context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error) {
	cfg := testConfig()
	cfg.ProcessingBudget = claim
	cfg.AckWait = 2*claim + time.Second
	return newTestAdapter(t, cfg), nil
}
