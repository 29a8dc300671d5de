package amqp_test

import (
	"context"
	"testing"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance"
)

// harness gives the conformance suite adapters on the real broker with one queue type.
type harness struct{ queueType amqp.QueueType }

func (h harness) NewAdapter(ctx context.Context, t testing.TB) (millrace.Adapter, error) {
	// A short requeue pause keeps the "failed write leaves the original unacked" tests quick.
	return newAdapter(ctx, t, amqp.Config{QueueType: h.queueType, RequeueDelay: 50e6}), nil
}

func (harness) Options() conformance.Options { return conformance.Options{} }

// TestConformance runs the shared suite on classic and on quorum queues.
func TestConformance(t *testing.T) {
	t.Run("classic", func(t *testing.T) { conformance.Run(t, harness{amqp.Classic}) })
	t.Run("quorum", func(t *testing.T) { conformance.Run(t, harness{amqp.Quorum}) })
}
