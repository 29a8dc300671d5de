package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
)

// harness runs the shared suite against the Redis at $MILLRACE_REDIS_URL (default local).
type harness struct{}

func (harness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	return newTestAdapter(t, testConfig()), nil
}

// Options: a retry arrives up to one reclaim interval (50 ms) after it is due, plus a read.
func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 300 * time.Millisecond, Tolerance: 400 * time.Millisecond, Quiet: 400 * time.Millisecond}
}

// DeadLetterSubscriber reads dead-letter streams as a tool does: through the adapter's
// DeadLetterSubscriber, whose messages carry the record fields (the work stream's Subscriber
// never reads an entry's fields as a record).
func (harness) DeadLetterSubscriber(_ context.Context, _ testing.TB, a millrace.Adapter) (message.Subscriber, error) {
	return a.(*Adapter).DeadLetterSubscriber(), nil
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }
