package kafka

import (
	"testing"

	"github.com/rcrowley/go-metrics"
)

// Sarama type-asserts what the registry returns (a wrong type panics in a broker goroutine), so
// every kind of metric it asks for must come back as that kind, and record nothing.
func TestDiscardMetricsKeepsTypes(t *testing.T) {
	r := discardMetrics{}
	h := metrics.GetOrRegisterHistogram("h", r, metrics.NewUniformSample(10))
	h.Update(5)
	if h.Count() != 0 {
		t.Fatalf("histogram recorded %d values", h.Count())
	}
	m := metrics.GetOrRegisterMeter("m", r)
	m.Mark(1)
	if m.Count() != 0 {
		t.Fatalf("meter recorded %d events", m.Count())
	}
	c := metrics.GetOrRegisterCounter("c", r)
	c.Inc(1)
	if c.Count() != 0 {
		t.Fatalf("counter recorded %d", c.Count())
	}
	_ = metrics.GetOrRegisterGauge("g", r)
	_ = metrics.GetOrRegisterTimer("t", r)
	if got := r.GetOrRegister("custom", func() metrics.EWMA { return metrics.NewEWMA1() }); got == nil {
		t.Fatal("a constructor of another kind must still yield its metric")
	} else if _, ok := got.(metrics.EWMA); !ok {
		t.Fatalf("custom constructor gave %T", got)
	}
	if r.Get("h") != nil || len(r.GetAll()) != 0 {
		t.Fatal("the registry must hold nothing")
	}
}

// Without a Sarama configuration of the caller's, nothing is recorded; the caller's registry is
// kept.
func TestSaramaMetricsOnlyInCallersRegistry(t *testing.T) {
	if _, ok := (Config{}).saramaConfig().MetricRegistry.(discardMetrics); !ok {
		t.Fatal("default configuration records Sarama metrics nobody can read")
	}
	own := metrics.NewRegistry()
	sc := Config{}.saramaConfig()
	sc.MetricRegistry = own
	if got := (Config{Sarama: sc}).saramaConfig().MetricRegistry; got != own {
		t.Fatalf("caller's registry replaced by %T", got)
	}
}

func TestCommitIntervalDefaultAndValidation(t *testing.T) {
	if d := (Config{}).withDefaults().CommitInterval; d <= 0 {
		t.Fatalf("default CommitInterval %v", d)
	}
	err := Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g", CommitInterval: -1}.Validate()
	if err == nil {
		t.Fatal("negative CommitInterval accepted")
	}
}
