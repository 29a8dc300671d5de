package sqs_test

import (
	"context"
	"testing"
	"time"

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
