package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/conformance"
)

type harness struct{}

func (harness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	return sqs.New(testConfig(t))
}

// Options: SQS delays are whole seconds (visibility timeouts), so the suite's delay is 1 s; the
// tolerance covers the long poll noticing the message once it is visible again. Bodies are
// UTF-8 text, so the binary-payload test does not apply.
func (harness) Options() conformance.Options {
	return conformance.Options{
		Delay:            time.Second,
		Tolerance:        time.Second,
		Quiet:            time.Second,
		TextPayloadsOnly: true,
	}
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }

// fifoHarness runs the suite on FIFO queues: every topic the suite makes ends in ".fifo", and
// each message is a group of its own (Config.MessageGroup), as the suite's messages need no
// order among them: retries, dead letters (to the standard dead-letter queue of a FIFO topic),
// decode errors and the hostile-input battery must hold on a FIFO queue as on a standard one.
// The order within a group is TestFIFO*'s.
type fifoHarness struct{ harness }

func (fifoHarness) NewAdapter(_ context.Context, t testing.TB) (millrace.Adapter, error) {
	return sqs.New(groupPerMessage(testConfig(t)))
}

func (fifoHarness) NewClaimAdapter(_ context.Context, t testing.TB, claim time.Duration) (millrace.Adapter, error) {
	return sqs.New(groupPerMessage(claimConfig(t, claim)))
}

// groupPerMessage makes every message published to a FIFO queue a message group of its own.
func groupPerMessage(cfg sqs.Config) sqs.Config {
	cfg.MessageGroup = func(msg *message.Message) string { return msg.UUID }
	return cfg
}

func (h fifoHarness) Options() conformance.Options {
	o := h.harness.Options()
	o.TopicName = func(name string) string { return name + ".fifo" }
	return o
}

func TestConformanceFIFO(t *testing.T) { conformance.Run(t, fifoHarness{}) }
