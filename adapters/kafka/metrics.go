package kafka

import (
	"reflect"

	"github.com/rcrowley/go-metrics"
)

// discardMetrics is a go-metrics registry that records nothing. Sarama updates histograms and
// meters (each behind a lock, histograms with a sampled reservoir) on every request and
// response; with the registry sarama.NewConfig creates, nobody reads them, yet they cost about
// a twentieth of a busy consumer's CPU. Sarama's own switch, metrics.UseNilMetrics, is a global.
type discardMetrics struct{}

var _ metrics.Registry = discardMetrics{}

func (discardMetrics) Each(func(string, any))                 {}
func (discardMetrics) Get(string) any                         { return nil }
func (discardMetrics) GetAll() map[string]map[string]any      { return nil }
func (discardMetrics) Register(string, any) error             { return nil }
func (discardMetrics) RunHealthchecks()                       {}
func (discardMetrics) Unregister(string)                      {}
func (discardMetrics) UnregisterAll()                         {}
func (discardMetrics) GetOrRegister(_ string, metric any) any { return nilMetric(metric) }

// nilMetric returns the no-op metric of the kind metric (a metric or its constructor) makes.
func nilMetric(metric any) any {
	switch metric.(type) {
	case func() metrics.Histogram, metrics.Histogram:
		return metrics.NilHistogram{}
	case func() metrics.Meter, metrics.Meter:
		return metrics.NilMeter{}
	case func() metrics.Counter, metrics.Counter:
		return metrics.NilCounter{}
	case func() metrics.Gauge, metrics.Gauge:
		return metrics.NilGauge{}
	case func() metrics.GaugeFloat64, metrics.GaugeFloat64:
		return metrics.NilGaugeFloat64{}
	case func() metrics.Timer, metrics.Timer:
		return metrics.NilTimer{}
	}
	// Any other constructor: build the metric, so the caller's type assertion holds.
	if v := reflect.ValueOf(metric); v.Kind() == reflect.Func && v.Type().NumIn() == 0 && v.Type().NumOut() == 1 {
		return v.Call(nil)[0].Interface()
	}
	return metric
}
