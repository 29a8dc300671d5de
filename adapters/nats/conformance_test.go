package nats

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

// harness runs the shared suite against the NATS server at $MILLRACE_NATS_URL (default local).
type harness struct{}

func (harness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	return newTestAdapter(t, testConfig()), nil
}

// Options: JetStream redelivers a NakWithDelay message on its own timer, within a few ms.
func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 300 * time.Millisecond, Tolerance: 400 * time.Millisecond, Quiet: 400 * time.Millisecond}
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }
