package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// promNames maps every millrace instrument to its Prometheus family, as the OpenTelemetry
// Prometheus exporter renders it with UnderscoreEscapingWithSuffixes: read off the real
// scrapes of this test (the example's, and the name-check scrapes below), not derived by rule.
// An instrument defined in the source and missing here fails TestScrapeHasEveryFamily.
var promNames = map[string]family{
	"millrace.deliveries":           {"millrace_deliveries_total", dto.MetricType_COUNTER, "example", handlerLabels("millrace_outcome", "millrace_reason")},
	"millrace.retries":              {"millrace_retries_total", dto.MetricType_COUNTER, "example", handlerLabels()},
	"millrace.retry.failures":       {"millrace_retry_failures_total", dto.MetricType_COUNTER, "example", handlerLabels()},
	"millrace.dead_letters":         {"millrace_dead_letters_total", dto.MetricType_COUNTER, "example", handlerLabels("millrace_reason")},
	"millrace.dead_letter.failures": {"millrace_dead_letter_failures_total", dto.MetricType_COUNTER, "example", handlerLabels()},
	"millrace.panics":               {"millrace_panics_total", dto.MetricType_COUNTER, "example", handlerLabels()},
	"millrace.handler.duration":     {"millrace_handler_duration_seconds", dto.MetricType_HISTOGRAM, "example", handlerLabels()},
	"millrace.attempts":             {"millrace_attempts", dto.MetricType_HISTOGRAM, "example", handlerLabels()},
	"millrace.time_to_outcome":      {"millrace_time_to_outcome_seconds", dto.MetricType_HISTOGRAM, "example", handlerLabels()},
	"millrace.backlog.waiting":      {"millrace_backlog_waiting", dto.MetricType_GAUGE, "example", topicLabels},
	"millrace.backlog.in_flight":    {"millrace_backlog_in_flight", dto.MetricType_GAUGE, "example", topicLabels},
	"millrace.retries.waiting":      {"millrace_retries_waiting", dto.MetricType_GAUGE, "example", topicLabels},
	"millrace.dead_letter.depth":    {"millrace_dead_letter_depth", dto.MetricType_GAUGE, "example", topicLabels},
	// Only a broker with partitions (Kafka) reports it: the memory adapter has none.
	"millrace.partition.lag": {"millrace_partition_lag", dto.MetricType_GAUGE, "partitions", []string{"messaging_system", "messaging_destination_name", "messaging_destination_partition_id"}},
	// The idempotency guard's counters (idempotency.RouterGuard.Instrument).
	"millrace.idempotency.claims":    {"millrace_idempotency_claims_total", dto.MetricType_COUNTER, "example", handlerLabels("millrace_result")},
	"millrace.idempotency.fail_open": {"millrace_idempotency_fail_open_total", dto.MetricType_COUNTER, "example", handlerLabels()},
	// Only a RedisStore reports its memory: the example's store is in-process.
	"millrace.lease_store.memory.used":  {"millrace_lease_store_memory_used_bytes", dto.MetricType_GAUGE, "redis", []string{"server_address"}},
	"millrace.lease_store.memory.max":   {"millrace_lease_store_memory_max_bytes", dto.MetricType_GAUGE, "redis", []string{"server_address"}},
	"millrace.lease_store.evicted_keys": {"millrace_lease_store_evicted_keys_total", dto.MetricType_COUNTER, "redis", []string{"server_address"}},
}

// topicLabels are the labels of the backlog gauges (per topic); handlerLabels those of a
// handler's series, with extra.
var topicLabels = []string{"messaging_destination_name", "messaging_system"}

func handlerLabels(extra ...string) []string {
	return append([]string{"messaging_destination_name", "messaging_system", "millrace_handler"}, extra...)
}

// checkLabels checks that the series of mf carry exactly f's labels, the exporter's
// otel_scope_* (and a histogram's le) aside.
func checkLabels(t *testing.T, otel string, f family, mf *dto.MetricFamily) {
	t.Helper()
	got := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if !strings.HasPrefix(lp.GetName(), "otel_scope_") {
				got[lp.GetName()] = true
			}
		}
	}
	want := map[string]bool{}
	for _, l := range f.labels {
		want[l] = true
	}
	for l := range want {
		if !got[l] {
			t.Errorf("%s (%s): no label %s; labels %v", otel, f.name, l, got)
		}
	}
	for l := range got {
		if !want[l] {
			t.Errorf("%s (%s): label %s not in the README's table; labels %v", otel, f.name, l, got)
		}
	}
}

// family is one Prometheus metric family and the scrape that shows it: "example" (the
// example's own), "partitions" (a Backlog with partitions, TestNameCheckScrapes) or "redis" (a
// RedisStore lease, TestNameCheckScrapes).
type family struct {
	name   string
	typ    dto.MetricType
	scrape string
	labels []string // beyond the exporter's otel_scope_*
}

// workload runs the example once for every test of the package.
var workload = sync.OnceValues(func() (*result, error) {
	var out bytes.Buffer
	rep, err := run(context.Background(), &out)
	if err != nil {
		return nil, err
	}
	fams, err := parseScrape(rep.Scrape)
	if err != nil {
		return nil, err
	}
	return &result{rep: rep, out: out.String(), fams: fams}, nil
})

type result struct {
	rep  *Report
	out  string
	fams map[string]*dto.MetricFamily
}

func runWorkload(t *testing.T) *result {
	t.Helper()
	res, err := workload()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func parseScrape(text string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}

// defined returns every millrace instrument the library defines (its name as passed to a
// Meter's Int64Counter, Float64Histogram, Int64ObservableGauge, ... in a non-test file of
// telemetry/ or idempotency/), with the file that defines it.
func defined(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`\w*(?:Counter|Histogram|Gauge|counter|gauge)\(\s*"(millrace\.[a-z0-9_.]+)"`)
	out := map[string]string{}
	for _, dir := range []string{"../../telemetry", "../../idempotency"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				out[string(m[1])] = f
			}
		}
	}
	if len(out) < 14 {
		t.Fatalf("found %d instruments in telemetry/ and idempotency/, want at least 14: %v", len(out), out)
	}
	return out
}

// documented returns the instruments telemetry/doc.go lists in its Metrics section.
func documented(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../telemetry/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^//\s+(millrace\.[a-z0-9_.]+)\s+(?:counter|histogram|gauge)`)
	var names []string
	for _, m := range re.FindAllSubmatch(b, -1) {
		names = append(names, string(m[1]))
	}
	if len(names) < 9 {
		t.Fatalf("telemetry/doc.go lists %d instruments, want at least 9", len(names))
	}
	return names
}

// TestScrapeHasEveryFamily: every instrument telemetry/doc.go lists, and every instrument the
// library defines (the backlog gauges and the idempotency counters included), is in the
// example's scrape under its Prometheus name with its type, except those only a broker with
// partitions or a RedisStore reports, which TestNameCheckScrapes finds.
func TestScrapeHasEveryFamily(t *testing.T) {
	res := runWorkload(t)
	defs := defined(t)
	for _, name := range documented(t) {
		if _, ok := defs[name]; !ok {
			t.Errorf("telemetry/doc.go lists %s, which no non-test file of telemetry/ or idempotency/ defines", name)
		}
	}
	for name, file := range defs {
		f, ok := promNames[name]
		if !ok {
			t.Errorf("%s (defined in %s) has no Prometheus name in promNames: add it from the scrape, and to the README's metric table, the dashboard and the alerts", name, file)
			continue
		}
		if f.scrape != "example" {
			continue
		}
		mf, ok := res.fams[f.name]
		if !ok {
			t.Errorf("%s: family %s not in the example's scrape", name, f.name)
			continue
		}
		if mf.GetType() != f.typ {
			t.Errorf("%s: family %s is a %v, want %v", name, f.name, mf.GetType(), f.typ)
		}
		checkLabels(t, name, f, mf)
	}
	if _, ok := res.fams["target_info"]; !ok {
		t.Error("no target_info family in the example's scrape")
	}
	for name, f := range promNames {
		if _, ok := defs[name]; !ok {
			t.Logf("expected later: %s (Prometheus %s) is not defined in telemetry/ or idempotency/ yet", name, f.name)
		}
	}
	for _, line := range MillraceLines(res.rep.Scrape) {
		if !strings.Contains(res.out, line) {
			t.Fatalf("the example did not print scrape line %q", line)
		}
	}
	var names []string
	for n := range res.fams {
		if strings.HasPrefix(n, "millrace_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	t.Logf("millrace families in the example's scrape (%d): %s", len(names), strings.Join(names, " "))
}

// value sums the samples of family name whose labels include want (a counter's or gauge's
// value; a histogram's count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

// TestScrapeCountsTheWorkload: the scrape's numbers are what the example's workload implies.
func TestScrapeCountsTheWorkload(t *testing.T) {
	res := runWorkload(t)
	defs := defined(t)
	base := map[string]string{"messaging_system": "memory", "messaging_destination_name": Topic}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	h := func(kv ...string) map[string]string {
		return with(append([]string{"millrace_handler", Handler}, kv...)...)
	}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		// 6 ok, 3 flaky, panic, slow, retry-write on their second attempt, and the duplicate
		// (acknowledged by its claim inside the handler call's instrumentation).
		{"millrace_deliveries_total", h("millrace_outcome", "SUCCESS", "millrace_reason", "handler"), 13},
		{"millrace_deliveries_total", h("millrace_outcome", "RETRY", "millrace_reason", "handler"), 10}, // 3 flaky + 2 x 3 down + retry-write
		{"millrace_deliveries_total", h("millrace_outcome", "RETRY", "millrace_reason", "panic"), 1},
		{"millrace_deliveries_total", h("millrace_outcome", "RETRY", "millrace_reason", "timeout"), 1},
		{"millrace_deliveries_total", h("millrace_outcome", "MALFORMED", "millrace_reason", "handler"), 3}, // broken, dead-letter-write x 2
		{"millrace_deliveries_total", h("millrace_outcome", "DISCARD", "millrace_reason", "handler"), 1},
		{"millrace_retries_total", h(), 9}, // 3 flaky + 2 x 2 down + panic + slow (retry-write's failed)
		{"millrace_retry_failures_total", h(), 1},
		{"millrace_dead_letters_total", h("millrace_reason", "exhausted"), 2},
		{"millrace_dead_letters_total", h("millrace_reason", "malformed"), 2},
		{"millrace_dead_letters_total", h("millrace_reason", "discarded"), 1},
		{"millrace_dead_letter_failures_total", h(), 1},
		{"millrace_panics_total", h(), 1},
		{"millrace_handler_duration_seconds", h(), 29}, // every handler call
		{"millrace_attempts", h(), 18},                 // 17 messages ended, and the duplicate
		{"millrace_time_to_outcome_seconds", h(), 18},
		{"millrace_dead_letter_depth", with(), 5},
		{"millrace_backlog_waiting", with(), 0},
		{"millrace_backlog_in_flight", with(), 0},
		{"millrace_retries_waiting", with(), 0},
		{"millrace_idempotency_claims_total", h("millrace_result", "acquired"), 28}, // every call but the duplicate's
		{"millrace_idempotency_claims_total", h("millrace_result", "done"), 1},
		{"millrace_idempotency_claims_total", h("millrace_result", "busy"), 0},
		{"millrace_idempotency_fail_open_total", h(), 0},
	} {
		got, ok := value(res.fams, c.family, c.labels)
		if !ok {
			if otel, later := expectedLater(defs, c.family); later {
				t.Logf("expected later: %s (%s is not defined in the library yet)", c.family, otel)
				continue
			}
			t.Errorf("%s%v: no series", c.family, c.labels)
			continue
		}
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	// The attempts histogram's sum: ok 6x1, flaky 3x2, down 2x3, broken 1, opted-out 1, panic 2,
	// slow 2, retry-write 2, dead-letter-write 2, the duplicate 1.
	if mf := res.fams["millrace_attempts"]; mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetHistogram().GetSampleSum() != 29 {
		t.Errorf("millrace_attempts sum: %v, want 29", mf)
	}
}

// TestTracesLinkAttempts: the example's retried and dead-lettered messages have one span per
// attempt, each a child of the producer's span, each after the first linked to the one before;
// the dead letter links to the last attempt's span.
func TestTracesLinkAttempts(t *testing.T) {
	res := runWorkload(t)
	for _, c := range []struct {
		id       string
		attempts int
	}{{"flaky-0", 2}, {"down-0", 3}, {"ok-1", 1}} {
		byAttempt := map[int64]int{}
		for i, s := range res.rep.Spans {
			for _, kv := range s.Attributes {
				if kv.Key == telemetry.KeyMessageID && kv.Value.AsString() == c.id {
					byAttempt[attemptOf(s)] = i
				}
			}
		}
		if len(byAttempt) != c.attempts {
			t.Errorf("%s: spans for attempts %v, want %d", c.id, byAttempt, c.attempts)
			continue
		}
		first := res.rep.Spans[byAttempt[1]]
		if !first.Parent.IsValid() || !first.Parent.IsRemote() {
			t.Errorf("%s: attempt 1's parent %v is not the producer's span from traceparent", c.id, first.Parent)
		}
		for n := int64(1); n <= int64(c.attempts); n++ {
			s := res.rep.Spans[byAttempt[n]]
			if s.Parent.SpanID() != first.Parent.SpanID() || s.SpanContext.TraceID() != first.SpanContext.TraceID() {
				t.Errorf("%s attempt %d: parent %s in trace %s, want the producer's span %s in trace %s", c.id, n,
					s.Parent.SpanID(), s.SpanContext.TraceID(), first.Parent.SpanID(), first.SpanContext.TraceID())
			}
			if n == 1 {
				if len(s.Links) != 0 {
					t.Errorf("%s attempt 1 has links %v", c.id, s.Links)
				}
				continue
			}
			prev := res.rep.Spans[byAttempt[n-1]]
			if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != prev.SpanContext.SpanID() {
				t.Errorf("%s attempt %d links %v, want attempt %d's span %s", c.id, n, s.Links, n-1, prev.SpanContext.SpanID())
			}
		}
	}
	rec, ok := res.rep.DeadLetters["down-0"]
	if !ok || rec.Reason != deadletter.Exhausted {
		t.Fatalf("down-0's dead letter: %+v", rec)
	}
	var last int64
	for _, s := range res.rep.Spans {
		for _, kv := range s.Attributes {
			if kv.Key == telemetry.KeyMessageID && kv.Value.AsString() == "down-0" && attemptOf(s) == 3 {
				if got := telemetry.LinkedAttempt(rec.Metadata).SpanID(); got != s.SpanContext.SpanID() {
					t.Errorf("down-0's dead letter links span %s, want attempt 3's %s", got, s.SpanContext.SpanID())
				}
				last = 3
			}
		}
	}
	if last != 3 {
		t.Error("no span of down-0's attempt 3")
	}
	if !strings.Contains(res.out, "dead letter (exhausted, 3 attempts) links to span "+telemetry.LinkedAttempt(rec.Metadata).SpanID().String()) {
		t.Errorf("the example does not print down-0's dead-letter link:\n%s", res.out)
	}
}

// partitioned is a Backlog with partitions, as the Kafka adapter's would be: TestNameCheckScrapes
// reads the exporter's name of the partition-lag gauge through telemetry.ObserveBacklog.
type partitioned struct{}

func (partitioned) Backlog(context.Context, string) (millrace.Backlog, error) {
	return millrace.Backlog{Waiting: 7, InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown, DeadLetters: millrace.Unknown,
		Partitions: []millrace.PartitionBacklog{{Topic: "orders", Partition: 0, Lag: 3}, {Topic: "orders", Partition: 1, Lag: 4}}}, nil
}

// nameCheckScrape gathers the exporter's registry of a Telemetry set up by setup, as text, and
// parses it: the same exporter and options as the example.
func nameCheckScrape(t *testing.T, setup func(tel *telemetry.Telemetry) (stop func())) map[string]*dto.MetricFamily {
	t.Helper()
	reg, mp, err := newMetrics()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	stop := setup(tel)
	defer stop()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	fams, err := parseScrape(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// scrapePartitions is the name-check scrape of a Backlog with partitions.
func scrapePartitions(t *testing.T) map[string]*dto.MetricFamily {
	return nameCheckScrape(t, func(tel *telemetry.Telemetry) func() {
		stop, err := tel.ObserveBacklog(partitioned{}, "kafka", "orders", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return stop
	})
}

// scrapeRedisLease is the name-check scrape of a router whose idempotency lease is a RedisStore
// on the test Redis (MILLRACE_REDIS_URL, default the local one), with one message handled; nil
// when the lease-store instruments are not defined yet.
func scrapeRedisLease(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	if _, ok := defined(t)["millrace.lease_store.memory.used"]; !ok {
		t.Log("expected later: the lease-store instruments (millrace.lease_store.*) are not defined in idempotency/ yet")
		return nil
	}
	raw := testenv.Getenv("MILLRACE_REDIS_URL", "redis://127.0.0.1:6379/0")
	u, err := url.Parse(raw)
	if err != nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" && u.Hostname() != "::1") {
		t.Fatalf("MILLRACE_REDIS_URL %q: a loopback Redis URL is required (%v)", raw, err)
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis", opts.Addr, "MILLRACE_REDIS_URL", err)
	}
	store, err := idempotency.NewRedisStore(client, idempotency.StoreOptions{Prefix: fmt.Sprintf("millrace-obs-test-%d:", time.Now().UnixNano()),
		Eviction: idempotency.EvictionIgnore})
	if err != nil {
		t.Fatal(err)
	}
	return nameCheckScrape(t, func(tel *telemetry.Telemetry) func() {
		mem, err := memory.New(memory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := router.New(router.Config{Adapter: mem, Policy: Policy, Budget: Budget, Telemetry: tel,
			Idempotency: idempotency.ForRouter(idempotency.Config{Store: store, LeaseTTL: LeaseTTL}),
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		r.Handle("h", "lease", func(context.Context, *message.Message, millrace.Attempt) error { return nil })
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(runCtx) }()
		<-r.Running()
		if err := mem.Publish("lease", message.NewMessage("m", []byte("x"))); err != nil {
			t.Fatal(err)
		}
		for mem.Outstanding("lease") > 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		// The router stays up (its guard's instruments registered) until the gather is done.
		return func() { _ = r.Close(); stop(); <-done; _ = mem.Close() }
	})
}

// TestNameCheckScrapes: the families the memory example cannot show are rendered under the
// names in promNames by the same exporter: the partition lag of a Backlog with partitions, and
// the lease-store gauges of a RedisStore on the test Redis.
func TestNameCheckScrapes(t *testing.T) {
	check := func(scrape string, fams map[string]*dto.MetricFamily) {
		for otel, f := range promNames {
			if f.scrape != scrape {
				continue
			}
			mf, ok := fams[f.name]
			if !ok {
				t.Errorf("%s: family %s not in the %s scrape (%d families)", otel, f.name, scrape, len(fams))
				continue
			}
			if mf.GetType() != f.typ {
				t.Errorf("%s: %s is a %v, want %v", otel, f.name, mf.GetType(), f.typ)
			}
			checkLabels(t, otel, f, mf)
		}
	}
	parts := scrapePartitions(t)
	check("partitions", parts)
	if got, _ := value(parts, "millrace_partition_lag", map[string]string{"messaging_destination_partition_id": "1"}); got != 4 {
		t.Errorf("millrace_partition_lag of partition 1 = %v, want 4", got)
	}
	// A count the broker cannot give (millrace.Unknown) is left out; the others are observed.
	if got, ok := value(parts, "millrace_backlog_waiting", map[string]string{"messaging_system": "kafka"}); !ok || got != 7 {
		t.Errorf("millrace_backlog_waiting = %v (%v), want 7", got, ok)
	}
	for _, name := range []string{"millrace_backlog_in_flight", "millrace_retries_waiting", "millrace_dead_letter_depth"} {
		if _, ok := parts[name]; ok {
			t.Errorf("%s observed though the broker reported it Unknown", name)
		}
	}
	if fams := scrapeRedisLease(t); fams != nil {
		check("redis", fams)
	}
}

// knownFamilies is every family of the example's scrape and of the name-check scrapes, with
// the label names its series carry.
func knownFamilies(t *testing.T) map[string]map[string]bool {
	t.Helper()
	known := map[string]map[string]bool{}
	add := func(fams map[string]*dto.MetricFamily) {
		for name, mf := range fams {
			if known[name] == nil {
				known[name] = map[string]bool{}
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					known[name][lp.GetName()] = true
				}
			}
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				known[name]["le"] = true
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					known[name+suffix] = known[name]
				}
			}
		}
	}
	add(runWorkload(t).fams)
	add(scrapePartitions(t))
	if fams := scrapeRedisLease(t); fams != nil {
		add(fams)
	}
	return known
}

// expectedLater reports whether name (a family, or a histogram's series) belongs to an
// instrument in promNames that the library does not define yet.
func expectedLater(defs map[string]string, name string) (string, bool) {
	for otel, f := range promNames {
		if name == f.name || strings.HasPrefix(name, f.name+"_") && f.typ == dto.MetricType_HISTOGRAM {
			_, ok := defs[otel]
			return otel, !ok
		}
	}
	return "", false
}

// rulecheckReport is tools/rulecheck's output.
type rulecheckReport struct {
	Rules  []checkedExpr `json:"rules"`
	Exprs  []checkedExpr `json:"exprs"`
	Errors []string      `json:"errors"`
	Counts struct {
		Alerting int `json:"alerting"`
	} `json:"counts"`
}

type checkedExpr struct {
	Rule        string            `json:"rule"`
	Alert       bool              `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
	Selectors   []struct {
		Metric string   `json:"metric"`
		Labels []string `json:"labels"`
	} `json:"selectors"`
	Grouping []string `json:"grouping"`
}

// rulecheck runs tools/rulecheck (a module of its own: Prometheus's rule and PromQL parsers)
// on alerts.yml and the expressions exprs.
func rulecheck(t *testing.T, rules string, exprs []string) *rulecheckReport {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("the go command is needed to run tools/rulecheck: %v", err)
		}
		t.Skipf("no go command to run tools/rulecheck: %v", err)
	}
	dir := t.TempDir()
	exprFile := filepath.Join(dir, "exprs.json")
	b, _ := json.Marshal(exprs)
	if err := os.WriteFile(exprFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "."}
	if rules != "" {
		abs, err := filepath.Abs(rules)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "-rules", abs)
	}
	args = append(args, "-exprs", exprFile)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = "../../tools/rulecheck"
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep rulecheckReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("tools/rulecheck: %v (%v); stderr:\n%s", err, runErr, stderr.String())
	}
	if runErr != nil && len(rep.Errors) == 0 {
		t.Fatalf("tools/rulecheck: %v; stderr:\n%s", runErr, stderr.String())
	}
	return &rep
}

// grafanaVars replaces Grafana's variables by what Prometheus would get: a range for
// $__rate_interval and the like, a match-all for a dashboard variable.
var (
	grafanaInterval = regexp.MustCompile(`\$\{?__(?:rate_interval|interval|range)\}?`)
	grafanaVar      = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(?::[a-z]+)?\}?`)
	labelValues     = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
	legendLabel     = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	templateLabel   = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
)

func promQL(grafana string) string {
	return grafanaVar.ReplaceAllString(grafanaInterval.ReplaceAllString(grafana, "5m"), ".*")
}

// dashboard is the part of the Grafana dashboard JSON the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestAlertsAndDashboard: alerts.yml loads with Prometheus's rule parser, every expression of
// it and of grafana-dashboard.json parses with Prometheus's PromQL parser, and every metric and
// label they use (in selectors, by/on clauses, legends and annotation templates) is in the
// example's scrape or a name-check scrape; the dashboard has the panels the README lists.
func TestAlertsAndDashboard(t *testing.T) {
	known := knownFamilies(t)
	defs := defined(t)

	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var exprs []string
	legends := map[int]string{} // index in exprs -> legend format
	ids := map[int]bool{}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the dashboard's Prometheus variable", p.Title, p.Datasource)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			legends[len(exprs)] = tg.LegendFormat
			exprs = append(exprs, promQL(tg.Expr))
		}
	}
	vars := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		vars++
		legends[len(exprs)] = "{{" + m[2] + "}}" // the label the variable lists must be on the selector
		exprs = append(exprs, promQL(m[1]))
	}
	if vars != 3 {
		t.Errorf("%d query variables, want 3 (system, topic, handler)", vars)
	}
	for _, want := range []string{"Deliveries by outcome", "Retries", "Dead letters by reason", "Write failures", "Panics",
		"Dead-letter depth", "Backlog: waiting and in flight", "Partition lag (Kafka)", "Handler duration p50 / p99",
		"Attempts at the outcome", "Time to outcome p50 / p99", "Lease store memory (Redis)", "Lease store evictions (Redis)",
		"Idempotency claims by result"} {
		if !titles[want] {
			t.Errorf("the dashboard has no panel %q", want)
		}
	}

	rep := rulecheck(t, "alerts.yml", exprs)
	for _, e := range rep.Errors {
		t.Errorf("Prometheus's parser: %s", e)
	}
	if len(rep.Exprs) != len(exprs) {
		t.Fatalf("rulecheck returned %d expressions, want %d", len(rep.Exprs), len(exprs))
	}
	alerts := map[string]bool{}
	for _, r := range rep.Rules {
		alerts[r.Rule] = r.Alert
	}
	for _, want := range []string{"MillraceDeadLetterGrowth", "MillraceDeadLetterQueueGrowing", "MillraceRetryStorm",
		"MillraceConsumerLagGrowing", "MillracePartitionLagGrowing", "MillraceLeaseStoreEvicting",
		"MillraceDeadLetterWriteFailing", "MillraceRetryWriteFailing"} {
		if !alerts[want] {
			t.Errorf("alerts.yml has no alert %s", want)
		}
	}

	checked := map[string]bool{}
	checkExpr := func(where string, e checkedExpr, refs []string) {
		labels := map[string]bool{}
		later := false
		for _, s := range e.Selectors {
			if s.Metric == "" {
				t.Errorf("%s: a selector without a metric name in %q", where, e.Expr)
				continue
			}
			fam, ok := known[s.Metric]
			if !ok {
				if otel, isLater := expectedLater(defs, s.Metric); isLater {
					t.Logf("expected later: %s uses %s (%s, not defined in the library yet)", where, s.Metric, otel)
					later = true
					continue
				}
				t.Errorf("%s: metric %s is in no scrape (expression %q)", where, s.Metric, e.Expr)
				continue
			}
			checked[s.Metric] = true
			for l := range fam {
				labels[l] = true
			}
			for _, l := range s.Labels {
				if !fam[l] {
					t.Errorf("%s: %s has no label %s (expression %q)", where, s.Metric, l, e.Expr)
				}
			}
		}
		if later {
			return
		}
		for _, l := range e.Grouping {
			if !labels[l] {
				t.Errorf("%s: by/on label %s is on none of the metrics it selects (expression %q)", where, l, e.Expr)
			}
		}
		// What the expression returns: its by/on labels where it aggregates, else its metrics'.
		out := labels
		if len(e.Grouping) > 0 {
			out = map[string]bool{}
			for _, l := range e.Grouping {
				out[l] = true
			}
		}
		for _, l := range refs {
			if !out[l] {
				t.Errorf("%s: label %s (legend or annotation) is not among the labels the expression returns (expression %q)", where, l, e.Expr)
			}
		}
	}
	for i, e := range rep.Exprs {
		var refs []string
		for _, m := range legendLabel.FindAllStringSubmatch(legends[i], -1) {
			refs = append(refs, m[1])
		}
		checkExpr(fmt.Sprintf("dashboard query %d", i), e, refs)
	}
	for _, r := range rep.Rules {
		var refs []string
		for _, a := range r.Annotations {
			for _, m := range templateLabel.FindAllStringSubmatch(a, -1) {
				refs = append(refs, m[1])
			}
		}
		checkExpr("alert "+r.Rule, r, refs)
	}
	var names []string
	for n := range checked {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("%d alerts, %d dashboard queries; metrics checked against the scrapes: %s", rep.Counts.Alerting, len(exprs), strings.Join(names, " "))
}
