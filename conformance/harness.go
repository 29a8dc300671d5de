// Package conformance is the shared test suite every millrace adapter must pass, and that users
// run against their own brokers to certify a setup. It is modelled on gocloud.dev's
// pubsub/drivertest: an adapter package supplies a Harness and calls Run from a test named
// TestConformance. Tests skip only on capabilities the adapter declares, and each skip says why.
//
// Every test asserts exact counts and contents: attempt numbers, handler calls, dead-letter
// records and their payload bytes.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Harness gives the suite fresh adapters for one broker.
type Harness interface {
	// NewAdapter returns a connected adapter. The suite calls it once per test, uses topics
	// unique to that test, and closes the adapter when the test ends.
	NewAdapter(ctx context.Context, t testing.TB) (millrace.Adapter, error)
	// Options returns the timing and payload rules the broker needs.
	Options() Options
}

// DeadLetterReader is an optional Harness interface. By default the suite reads dead letters
// through the test adapter's own Subscriber; where that would share state with the router's
// subscription (a Kafka consumer group, whose rebalance would delay the handler), the harness
// returns a separate subscriber for the dead-letter destination, as an operator's tool would use.
type DeadLetterReader interface {
	// DeadLetterSubscriber returns a subscriber that can read adapter.DeadLetterTopic(topic).
	DeadLetterSubscriber(ctx context.Context, t testing.TB, adapter millrace.Adapter) (message.Subscriber, error)
}

// Options are the broker-specific knobs of the suite. Zero fields take the defaults shown.
type Options struct {
	// Delay is the retry delay the suite configures. Default 300 ms. Brokers whose delays are
	// whole seconds (SQS) need at least 1 s.
	Delay time.Duration
	// Tolerance is how much later than Delay a retry may arrive. Default 1 s.
	Tolerance time.Duration
	// ClockSlack is how much earlier than Delay, measured from the handler's start, a retry may
	// arrive: brokers count the delay from the delivery, just before the handler starts.
	// Default 25 ms.
	ClockSlack time.Duration
	// Quiet is how long the suite watches for deliveries that must not happen. Default 500 ms.
	Quiet time.Duration
	// Timeout bounds each wait for an expected event. Default 30 s.
	Timeout time.Duration
	// TextPayloadsOnly declares that payloads must be valid UTF-8 text (SQS message bodies);
	// the binary-payload test is then skipped.
	TextPayloadsOnly bool
	// TopicName shapes the topic names the suite makes (unique per test, such as
	// "conf.testconformance-retry.1a2b3c4d") as the broker needs them. Default: the name as
	// it is. A Redis Cluster wraps the name in a hash tag, "{conf....}", so that a stream, its
	// dead-letter stream and its retry schedule share a slot.
	TopicName func(name string) string
}

func (o Options) withDefaults() Options {
	if o.Delay == 0 {
		o.Delay = 300 * time.Millisecond
	}
	if o.Tolerance == 0 {
		o.Tolerance = time.Second
	}
	if o.ClockSlack == 0 {
		o.ClockSlack = 25 * time.Millisecond
	}
	if o.Quiet == 0 {
		o.Quiet = 500 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.TopicName == nil {
		o.TopicName = func(name string) string { return name }
	}
	return o
}
