package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// observed is a router on the memory adapter with a real metric SDK (a manual reader) and a
// span recorder.
type observed struct {
	a      *memory.Adapter
	r      *router.Router
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newObserved(t *testing.T, policy millrace.RetryPolicy) *observed {
	t.Helper()
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tel, err := telemetry.New(telemetry.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Telemetry: tel,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &observed{a: a, r: r, reader: reader, spans: spans}
}

func (o *observed) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = o.r.Run(ctx) }()
	<-o.r.Running()
	t.Cleanup(func() { _ = o.r.Close(); cancel(); <-done })
}

func (o *observed) settle(t *testing.T, topic string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for o.a.Outstanding(topic) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not settled", topic)
		}
		time.Sleep(time.Millisecond)
	}
}

// sums returns every Int64 sum data point as "name{k=v,...}" -> value, with the attributes
// that vary (outcome, reason) only.
func (o *observed) collect(t *testing.T) (sums map[string]int64, hists map[string]metricdata.HistogramDataPoint[int64], fhists map[string]metricdata.HistogramDataPoint[float64]) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums, hists, fhists = map[string]int64{}, map[string]metricdata.HistogramDataPoint[int64]{}, map[string]metricdata.HistogramDataPoint[float64]{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sums[m.Name+varying(dp.Attributes)] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					sums[m.Name] += dp.Value
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					hists[m.Name] = dp
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					fhists[m.Name] = dp
				}
			}
		}
	}
	return sums, hists, fhists
}

func varying(set attribute.Set) string {
	var parts []string
	for _, k := range []attribute.Key{telemetry.KeyOutcome, telemetry.KeyReason} {
		if v, ok := set.Value(k); ok {
			parts = append(parts, v.AsString())
		}
	}
	for _, k := range []attribute.Key{telemetry.KeyHandler, telemetry.KeyMessagingSystem, telemetry.KeyDestination} {
		if _, ok := set.Value(k); !ok {
			parts = append(parts, "MISSING-"+string(k))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestCountsMatchAKnownWorkload: 5 messages succeed, 3 fail once, 2 fail every attempt (3),
// 1 is malformed, 1 discarded, 1 panics once; the counters and histograms read through the
// SDK are exactly what that workload implies.
func TestCountsMatchAKnownWorkload(t *testing.T) {
	o := newObserved(t, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Millisecond)})
	o.r.Handle("h", "work", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		kind, _, _ := strings.Cut(string(msg.Payload), "-")
		switch {
		case kind == "once" && at.Number == 1:
			return errors.New("once")
		case kind == "forever":
			return errors.New("forever")
		case kind == "malformed":
			return millrace.Malformed(errors.New("bad json"))
		case kind == "discard":
			return millrace.Discard(errors.New("opted out"))
		case kind == "panic" && at.Number == 1:
			panic("bug")
		}
		return nil
	})
	o.run(t)
	var payloads []string
	for i := range 5 {
		payloads = append(payloads, fmt.Sprintf("ok-%d", i))
	}
	payloads = append(payloads, "once-0", "once-1", "once-2", "forever-0", "forever-1", "malformed-0", "discard-0", "panic-0")
	for _, p := range payloads {
		if err := o.a.Publish("work", message.NewMessage(p, []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	o.settle(t, "work")
	sums, hists, fhists := o.collect(t)
	want := map[string]int64{
		"millrace.deliveries{SUCCESS,handler}":   9, // 5 ok, 3 once on attempt 2, panic on attempt 2
		"millrace.deliveries{RETRY,handler}":     9, // 3 once, 2 forever x 3
		"millrace.deliveries{RETRY,panic}":       1,
		"millrace.deliveries{MALFORMED,handler}": 1,
		"millrace.deliveries{DISCARD,handler}":   1,
		"millrace.retries":                       8, // 3 once + 2 forever x 2 + 1 panic
		"millrace.dead_letters{exhausted}":       2,
		"millrace.dead_letters{malformed}":       1,
		"millrace.panics":                        1,
		"millrace.dead_letter.depth":             3, // a gauge: 2 exhausted + 1 malformed
		"millrace.backlog.waiting":               0,
		"millrace.backlog.in_flight":             0,
		"millrace.retries.waiting":               0,
	}
	for k, v := range want {
		if got, ok := sums[k]; got != v || !ok {
			t.Errorf("%s = %d, want %d", k, sums[k], v)
		}
	}
	for k, v := range sums {
		if _, ok := want[k]; !ok && v != 0 {
			t.Errorf("unexpected %s = %d", k, v)
		}
	}
	// 13 messages ended: 5 at attempt 1, 3 at 2, 2 at 3, malformed 1, discard 1, panic 2.
	if h := hists["millrace.attempts"]; h.Count != 13 || h.Sum != 21 {
		t.Errorf("millrace.attempts: count %d sum %d, want 13 and 21", h.Count, h.Sum)
	}
	if h := fhists["millrace.handler.duration"]; h.Count != 21 {
		t.Errorf("millrace.handler.duration: count %d, want 21 (one per handler call)", h.Count)
	}
	if h := fhists["millrace.time_to_outcome"]; h.Count != 13 {
		t.Errorf("millrace.time_to_outcome: count %d, want 13", h.Count)
	}
}

// TestSpansLinkAcrossRetriesAndDeadLetter: with a producer's traceparent on the message, every
// attempt's span is a child of the producer's trace; the retry's span links to the attempt
// before; the dead letter carries the last attempt's span context.
func TestSpansLinkAcrossRetriesAndDeadLetter(t *testing.T) {
	o := newObserved(t, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Millisecond)})
	o.r.Handle("h", "work", func(context.Context, *message.Message, millrace.Attempt) error { return errors.New("down") })
	o.run(t)
	const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msg := message.NewMessage("m", []byte("x"))
	msg.Metadata.Set("traceparent", producer)
	if err := o.a.Publish("work", msg); err != nil {
		t.Fatal(err)
	}
	o.settle(t, "work")
	ended := o.spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans, want 3 (one per attempt)", len(ended))
	}
	byAttempt := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("span %s: parent %s, want the producer's span", s.Name(), s.Parent().SpanID())
		}
		if s.SpanKind() != trace.SpanKindConsumer || s.Name() != "process work" {
			t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.KeyAttempt {
				byAttempt[kv.Value.AsInt64()] = s
			}
		}
	}
	for n := int64(2); n <= 3; n++ {
		s, prev := byAttempt[n], byAttempt[n-1]
		if s == nil || prev == nil {
			t.Fatalf("attempt spans %v", byAttempt)
		}
		links := s.Links()
		if len(links) != 1 || links[0].SpanContext.SpanID() != prev.SpanContext().SpanID() {
			t.Errorf("attempt %d links %v, want attempt %d's span %s", n, links, n-1, prev.SpanContext().SpanID())
		}
	}
	dls := o.a.Peek(o.a.DeadLetterTopic("work"))
	if len(dls) != 1 {
		t.Fatalf("%d dead letters", len(dls))
	}
	if got := telemetry.LinkedAttempt(dls[0].Metadata); got.SpanID() != byAttempt[3].SpanContext().SpanID() {
		t.Errorf("dead letter links span %s, want the last attempt's %s", got.SpanID(), byAttempt[3].SpanContext().SpanID())
	}
	rec, err := deadletter.FromMessage(dls[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := telemetry.RecordTrace(rec), byAttempt[3].SpanContext(); got.SpanID() != want.SpanID() || got.TraceID() != want.TraceID() ||
		got.TraceFlags() != want.TraceFlags() || rec.Trace != "00-"+want.TraceID().String()+"-"+want.SpanID().String()+"-01" {
		t.Errorf("dead letter record trace %q (%s/%s), want the last attempt's %s/%s", rec.Trace, got.TraceID(), got.SpanID(), want.TraceID(), want.SpanID())
	}
	if dls[0].Metadata.Get("traceparent") != producer {
		t.Errorf("the producer's traceparent was rewritten: %q", dls[0].Metadata.Get("traceparent"))
	}
}

// TestNoopTelemetryRecordsNothingAndKeepsMetadata: the zero Config (no-op providers) runs the
// same workload without writing any header into the message.
func TestNoopTelemetryKeepsMetadata(t *testing.T) {
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tel, err := telemetry.New(telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, Telemetry: tel,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen message.Metadata
	r.Handle("h", "t", func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		mu.Lock()
		seen = msg.Metadata
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	if err := a.Publish("t", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for a.Outstanding("t") > 0 {
		time.Sleep(time.Millisecond)
	}
	_ = r.Close()
	mu.Lock()
	defer mu.Unlock()
	for k := range seen {
		if strings.HasPrefix(k, telemetry.AttemptTraceHeader) {
			t.Errorf("no-op telemetry wrote %s", k)
		}
	}
}

// TestBacklogGauges: while the handler holds one message, the gauges read from the adapter
// show the rest waiting and one in flight; the gauges stop when the router stops.
func TestBacklogGauges(t *testing.T) {
	o := newObserved(t, millrace.RetryPolicy{MaxAttempts: 1})
	release := make(chan struct{})
	o.r.Handle("h", "slow", func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	o.run(t)
	for i := range 4 {
		if err := o.a.Publish("slow", message.NewMessage(fmt.Sprint(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sums, _, _ := o.collect(t)
		if sums["millrace.backlog.in_flight"] >= 1 && sums["millrace.backlog.waiting"]+sums["millrace.backlog.in_flight"] == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gauges %v, want 4 messages waiting or in flight, at least one in flight", sums)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	o.settle(t, "slow")
	_ = o.r.Close()
	time.Sleep(50 * time.Millisecond)
	if sums, _, _ := o.collect(t); len(sums) > 0 {
		if _, ok := sums["millrace.backlog.waiting"]; ok {
			t.Errorf("gauges still observed after the router stopped: %v", sums)
		}
	}
}

// RecordTrace reads a record's traceparent as a remote span context, and gives an invalid one
// for a record without a valid trace, whatever its metadata carries.
func TestRecordTrace(t *testing.T) {
	sc := telemetry.RecordTrace(deadletter.Record{Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("RecordTrace = %+v", sc)
	}
	if sc := telemetry.RecordTrace(deadletter.Record{Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}); !sc.IsValid() || sc.IsSampled() {
		t.Fatalf("unsampled: %+v", sc)
	}
	attempt := map[string]string{telemetry.AttemptTraceHeader + "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	for _, v := range []string{"", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"} {
		if sc := telemetry.RecordTrace(deadletter.Record{Trace: v, Metadata: attempt}); sc.IsValid() {
			t.Errorf("RecordTrace(%q) = %+v, want invalid", v, sc)
		}
	}
}

// TestOneSpanPerImmediateAttempt: with RetryPolicy.Immediate each handler call of a delivery
// has a span of its own, a child of the delivery's span with its attempt number and outcome,
// linked to the call before it; the handler sees its own attempt's span.
func TestOneSpanPerImmediateAttempt(t *testing.T) {
	o := newObserved(t, millrace.RetryPolicy{MaxAttempts: 3, Immediate: 2, Backoff: millrace.Fixed(time.Millisecond)})
	var seen []trace.SpanID
	o.r.Handle("h", "work", func(ctx context.Context, _ *message.Message, at millrace.Attempt) error {
		seen = append(seen, trace.SpanContextFromContext(ctx).SpanID())
		if at.Number < 3 {
			return errors.New("down")
		}
		return nil
	})
	o.run(t)
	if err := o.a.Publish("work", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	o.settle(t, "work")
	var delivery sdktrace.ReadOnlySpan
	attempts := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range o.spans.Ended() {
		switch s.Name() {
		case "process work":
			delivery = s
		case "attempt work":
			var n int64
			for _, kv := range s.Attributes() {
				if kv.Key == telemetry.KeyAttempt {
					n = kv.Value.AsInt64()
				}
			}
			attempts[n] = s
		default:
			t.Errorf("unexpected span %q", s.Name())
		}
	}
	if delivery == nil || len(attempts) != 3 {
		t.Fatalf("delivery span %v, attempt spans %v: want one delivery span and attempts 1, 2, 3", delivery != nil, attempts)
	}
	if len(seen) != 3 {
		t.Fatalf("%d handler calls, want 3", len(seen))
	}
	for n := int64(1); n <= 3; n++ {
		s := attempts[n]
		if s == nil {
			t.Fatalf("no span for attempt %d", n)
		}
		if s.Parent().SpanID() != delivery.SpanContext().SpanID() {
			t.Errorf("attempt %d: parent %s, want the delivery's span %s", n, s.Parent().SpanID(), delivery.SpanContext().SpanID())
		}
		if seen[n-1] != s.SpanContext().SpanID() {
			t.Errorf("attempt %d: the handler saw span %s, want its attempt's %s", n, seen[n-1], s.SpanContext().SpanID())
		}
		outcome := ""
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.KeyOutcome {
				outcome = kv.Value.AsString()
			}
		}
		if want := map[int64]string{1: "RETRY", 2: "RETRY", 3: "SUCCESS"}[n]; outcome != want {
			t.Errorf("attempt %d: outcome %q, want %q", n, outcome, want)
		}
		links := s.Links()
		if n == 1 {
			if len(links) != 0 {
				t.Errorf("attempt 1 links %v, want none", links)
			}
			continue
		}
		if len(links) != 1 || links[0].SpanContext.SpanID() != attempts[n-1].SpanContext().SpanID() {
			t.Errorf("attempt %d links %v, want attempt %d's span", n, links, n-1)
		}
	}
}
