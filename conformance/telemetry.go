package conformance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// telemetryReading is one collection of the metrics of the fixture's topic.
type telemetryReading struct {
	sums     map[string]int64 // counter points by name{outcome,reason}
	gauges   map[string]int64 // backlog gauges by name
	attempts metricdata.HistogramDataPoint[int64]
	duration metricdata.HistogramDataPoint[float64]
	bad      []string // points of the topic with wrong attributes
}

// readTelemetry collects reader and keeps the points of topic.
// group is the consumer group the handler's metrics must carry as messaging.consumer.group.name
// ("": none).
func readTelemetry(t *testing.T, reader *sdkmetric.ManualReader, topic, handler, broker, group string) telemetryReading {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	r := telemetryReading{sums: map[string]int64{}, gauges: map[string]int64{}}
	check := func(name string, set attribute.Set, withHandler bool) (key string, ok bool) {
		if v, _ := set.Value(telemetry.KeyDestination); v.AsString() != topic {
			return "", false
		}
		if v, _ := set.Value(telemetry.KeyMessagingSystem); v.AsString() != broker {
			r.bad = append(r.bad, fmt.Sprintf("%s: messaging.system %q, want %q", name, v.AsString(), broker))
		}
		if v, _ := set.Value(telemetry.KeyHandler); withHandler && v.AsString() != handler {
			r.bad = append(r.bad, fmt.Sprintf("%s: millrace.handler %q, want %q", name, v.AsString(), handler))
		}
		if v, _ := set.Value(telemetry.KeyConsumerGroup); withHandler && v.AsString() != group {
			r.bad = append(r.bad, fmt.Sprintf("%s: messaging.consumer.group.name %q, want %q (the adapter's ConsumerGroup)", name, v.AsString(), group))
		}
		var parts []string
		for _, k := range []attribute.Key{telemetry.KeyOutcome, telemetry.KeyReason} {
			if v, ok := set.Value(k); ok {
				parts = append(parts, v.AsString())
			}
		}
		if len(parts) == 0 {
			return name, true
		}
		return name + "{" + strings.Join(parts, ",") + "}", true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if k, ok := check(m.Name, dp.Attributes, true); ok {
						r.sums[k] += dp.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					if k, ok := check(m.Name, dp.Attributes, false); ok {
						r.gauges[k] += dp.Value
					}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					if _, ok := check(m.Name, dp.Attributes, true); ok && m.Name == "millrace.attempts" {
						r.attempts = dp
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if _, ok := check(m.Name, dp.Attributes, true); ok && m.Name == "millrace.handler.duration" {
						r.duration = dp
					}
				}
			}
		}
	}
	return r
}

// testTelemetryCountsAKnownWorkload: a router with telemetry on a real metric SDK (a manual
// reader) runs a known workload: n messages succeed, m fail once then succeed, k fail every
// attempt (MaxAttempts 3) and are dead-lettered, 1 is Malformed. The counters read back
// exactly: deliveries by outcome and reason, retries, dead letters by reason, no failures or
// panics, the attempts histogram (count and sum) and the handler-duration count; every handler
// metric carries the adapter's consumer group (millrace.ConsumerGroupNamer; none when the
// adapter names none) as messaging.consumer.group.name; and where the
// adapter is a millrace.BacklogReporter, the dead-letter depth gauge settles at k+1 (nothing
// reads the dead letters here).
func testTelemetryCountsAKnownWorkload(t *testing.T, h Harness, opts Options) {
	const n, m, k, maxAttempts = 4, 2, 2, 3
	f := newFixture(t, h, opts)
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(telemetry.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatalf("telemetry.New: %v", err)
	}
	f.run(router.Config{Policy: f.policy(maxAttempts, opts.Delay), Telemetry: tel}, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		kind, _, _ := strings.Cut(string(msg.Payload), "-")
		switch {
		case kind == "once" && a.Number == 1:
			return fmt.Errorf("transient failure on attempt %d", a.Number)
		case kind == "exhaust":
			return fmt.Errorf("attempt %d: %w", a.Number, &dependencyError{status: 503})
		case kind == "malformed":
			return millrace.Malformed(errors.New("invalid JSON"))
		}
		return nil
	})
	var msgs []*message.Message
	add := func(kind string, count int) {
		for i := range count {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "%s-%d", kind, i)))
		}
	}
	add("ok", n)
	add("once", m)
	add("exhaust", k)
	add("malformed", 1)
	f.publish(msgs...)

	calls := n + m*2 + k*maxAttempts + 1
	f.waitCalls(fmt.Sprintf("%d handler calls", calls), func(c []call) bool { return len(c) >= calls })
	want := map[string]int64{
		"millrace.deliveries{SUCCESS,handler}":   n + m,
		"millrace.deliveries{RETRY,handler}":     m + k*maxAttempts,
		"millrace.deliveries{MALFORMED,handler}": 1,
		"millrace.retries":                       m + k*(maxAttempts-1),
		"millrace.dead_letters{exhausted}":       k,
		"millrace.dead_letters{malformed}":       1,
	}
	ended := int64(n + m + k + 1)
	attemptSum := int64(n*1 + m*2 + k*maxAttempts + 1)
	matches := func(r telemetryReading) bool {
		for name, v := range want {
			if r.sums[name] != v {
				return false
			}
		}
		return r.attempts.Count == uint64(ended)
	}
	caps := f.adapter.Capabilities()
	group := ""
	if g, ok := f.adapter.(millrace.ConsumerGroupNamer); ok {
		group = g.ConsumerGroup(f.topic)
	}
	deadline := time.Now().Add(opts.Timeout)
	for r := readTelemetry(t, reader, f.topic, f.handler, caps.Broker, group); !matches(r); r = readTelemetry(t, reader, f.topic, f.handler, caps.Broker, group) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for the counters of the workload: %v, attempts count %d", opts.Timeout, r.sums, r.attempts.Count)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(opts.Quiet) // nothing more may come
	if got := f.snapshot(); len(got) != calls {
		t.Fatalf("want exactly %d handler calls, got %d: %s", calls, len(got), describe(got))
	}
	r := readTelemetry(t, reader, f.topic, f.handler, caps.Broker, group)
	for _, b := range r.bad {
		t.Error(b)
	}
	names := make([]string, 0, len(r.sums))
	for name := range r.sums {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, expected := want[name]; !expected && r.sums[name] != 0 {
			t.Errorf("%s = %d, want none", name, r.sums[name])
		}
	}
	for name, v := range want {
		if r.sums[name] != v {
			t.Errorf("%s = %d, want %d", name, r.sums[name], v)
		}
	}
	if r.attempts.Count != uint64(ended) || r.attempts.Sum != attemptSum {
		t.Errorf("millrace.attempts: count %d sum %d, want count %d (every message ended once) sum %d", r.attempts.Count, r.attempts.Sum, ended, attemptSum)
	}
	if r.duration.Count != uint64(calls) {
		t.Errorf("millrace.handler.duration: count %d, want %d (one per handler call)", r.duration.Count, calls)
	}

	if _, ok := f.adapter.(millrace.BacklogReporter); !ok {
		t.Logf("%s reports no backlog (not a millrace.BacklogReporter): dead-letter depth not checked", caps.Broker)
		return
	}
	depthDeadline := time.Now().Add(opts.Timeout)
	for {
		r = readTelemetry(t, reader, f.topic, f.handler, caps.Broker, group)
		if d, ok := r.gauges["millrace.dead_letter.depth"]; ok && d == k+1 {
			break
		}
		if time.Now().After(depthDeadline) {
			t.Fatalf("millrace.dead_letter.depth: gauges %v after %s, want depth %d", r.gauges, opts.Timeout, k+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s backlog gauges after the workload: %v", caps.Broker, r.gauges)
}
