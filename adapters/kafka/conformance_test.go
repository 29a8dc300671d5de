package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

type harness struct{}

func (harness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	// The suite closes the adapter itself; newAdapter's cleanup makes a second Close a no-op.
	return newAdapter(t, "", nil), nil
}

func (harness) Options() conformance.Options {
	// Delay and tolerance as for the memory adapter, plus a rebalance's worth of slack: a
	// retry can wait for a group rebalance (the suite's dead-letter reader joins the same group).
	return conformance.Options{Delay: 300 * time.Millisecond, Tolerance: 2 * time.Second, Quiet: 500 * time.Millisecond}
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }
