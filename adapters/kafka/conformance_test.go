package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

type harness struct{}

func (harness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	// The suite closes the adapter itself; newAdapter's cleanup makes a second Close a no-op.
	return newAdapter(t, "", nil), nil
}

func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 300 * time.Millisecond, Tolerance: time.Second, Quiet: 500 * time.Millisecond}
}

// DeadLetterSubscriber reads dead letters through an adapter in a consumer group of its own, as
// an operator's tool would: sharing the router's group would rebalance it mid-test.
func (harness) DeadLetterSubscriber(_ context.Context, t testing.TB, _ millrace.Adapter) (message.Subscriber, error) {
	return newAdapter(t, "", nil).Subscriber(), nil
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }
