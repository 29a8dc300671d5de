package telemetry

import (
	"fmt"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of millrace's meter and tracer.
const ScopeName = "github.com/millrace/millrace"

// Config configures Telemetry. The zero Config is valid: no-op providers, W3C trace context.
type Config struct {
	// MeterProvider makes millrace's instruments. Default: a no-op provider (nothing recorded).
	MeterProvider metric.MeterProvider
	// TracerProvider makes millrace's spans. Default: a no-op provider (no spans; trace context
	// is then neither read nor written).
	TracerProvider trace.TracerProvider
	// Propagator reads the producer's trace context from message metadata and writes each
	// attempt's into it. Default: propagation.TraceContext{} (the W3C traceparent header).
	Propagator propagation.TextMapPropagator
}

// Telemetry holds millrace's instruments and tracer. Give it to router.Config.Telemetry; one
// Telemetry may serve several routers. It is safe for concurrent use.
type Telemetry struct {
	tracer  trace.Tracer
	tracing bool // a real TracerProvider was given
	prop    propagation.TextMapPropagator

	deliveries    metric.Int64Counter
	retries       metric.Int64Counter
	retryFailures metric.Int64Counter
	deadLetters   metric.Int64Counter
	dlFailures    metric.Int64Counter
	panics        metric.Int64Counter
	duration      metric.Float64Histogram
	finalAttempt  metric.Int64Histogram
	timeToOutcome metric.Float64Histogram
	meter         metric.Meter
	backlog       backlogGauges
}

// New returns the Telemetry of cfg.
func New(cfg Config) (*Telemetry, error) {
	mp, tp := cfg.MeterProvider, cfg.TracerProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	t := &Telemetry{prop: cfg.Propagator, tracing: tp != nil}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if _, isNoop := tp.(tracenoop.TracerProvider); isNoop {
		t.tracing = false
	}
	if t.prop == nil {
		t.prop = propagation.TraceContext{}
	}
	t.tracer = tp.Tracer(ScopeName)
	t.meter = mp.Meter(ScopeName)
	m := t.meter
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	t.deliveries = counter("millrace.deliveries", "{delivery}", "Handler calls by outcome (SUCCESS, DISCARD, RETRY, MALFORMED) and reason, and deliveries refused before the handler.")
	t.retries = counter("millrace.retries", "{retry}", "Retries scheduled and confirmed by the broker.")
	t.retryFailures = counter("millrace.retry.failures", "{failure}", "Retries whose scheduling failed; the original was not acknowledged.")
	t.deadLetters = counter("millrace.dead_letters", "{message}", "Dead letters written and confirmed, by reason (exhausted, malformed, discarded).")
	t.dlFailures = counter("millrace.dead_letter.failures", "{failure}", "Dead-letter writes that failed; the original was not acknowledged.")
	t.panics = counter("millrace.panics", "{panic}", "Handler panics recovered (each a RETRY).")
	if err != nil {
		return nil, fmt.Errorf("millrace telemetry: %w", err)
	}
	if t.duration, err = m.Float64Histogram("millrace.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one handler call, the budget's deadline included."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)); err != nil {
		return nil, fmt.Errorf("millrace telemetry: %w", err)
	}
	if t.finalAttempt, err = m.Int64Histogram("millrace.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("The attempt number at which a message ended (succeeded, discarded or dead-lettered)."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50, 100)); err != nil {
		return nil, fmt.Errorf("millrace telemetry: %w", err)
	}
	if t.timeToOutcome, err = m.Float64Histogram("millrace.time_to_outcome", metric.WithUnit("s"),
		metric.WithDescription("Time from a message's first attempt to its final outcome, where the broker knows the first attempt."),
		metric.WithExplicitBucketBoundaries(0.01, 0.1, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400)); err != nil {
		return nil, fmt.Errorf("millrace telemetry: %w", err)
	}
	return t, nil
}

// Meter returns the meter millrace's instruments come from, for adapters' and stores' gauges.
func (t *Telemetry) Meter() metric.Meter { return t.meter }
