package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/conformance"
)

type harness struct{}

func (harness) NewAdapter(context.Context, testing.TB) (millrace.Adapter, error) {
	return memory.New(memory.Config{})
}

func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 200 * time.Millisecond, Tolerance: 300 * time.Millisecond, Quiet: 300 * time.Millisecond}
}

func TestConformance(t *testing.T) { conformance.Run(t, harness{}) }
