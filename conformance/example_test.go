package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/conformance"
)

// memoryHarness gives the suite a fresh in-process adapter per test, with the memory
// adapter's tight timings (it needs no broker).
type memoryHarness struct{}

func (memoryHarness) NewAdapter(context.Context, testing.TB) (millrace.Adapter, error) {
	return memory.New(memory.Config{})
}

func (memoryHarness) Options() conformance.Options {
	return conformance.Options{Delay: 200 * time.Millisecond, Tolerance: 300 * time.Millisecond, Quiet: 300 * time.Millisecond}
}

// An adapter certifies itself with a Harness and one test, in a _test.go file of its package
// (adapters/memory's conformance_test.go does exactly this):
//
//	func TestConformance(t *testing.T) { conformance.Run(t, memoryHarness{}) }
//
// Run needs the *testing.T of a test, so this example only compiles.
func ExampleRun() {
	testConformance := func(t *testing.T) { conformance.Run(t, memoryHarness{}) }
	_ = testConformance
}

// A broker with rules for names gets them through Options.TopicName: a Redis Cluster harness
// wraps each topic in a hash tag, so that the stream, its dead-letter stream and its retry
// schedule share a slot.
func ExampleOptions() {
	opts := conformance.Options{
		Delay:     time.Second, // whole-second delays (SQS)
		TopicName: func(name string) string { return "{" + name + "}" },
	}
	fmt.Println(opts.TopicName("conf.testconformance-retry.1a2b3c4d"))
	// Output:
	// {conf.testconformance-retry.1a2b3c4d}
}
