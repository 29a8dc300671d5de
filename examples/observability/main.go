// Command observability shows millrace's OpenTelemetry metrics and traces on the in-memory
// adapter, with no services. It runs a router whose telemetry.Telemetry records into the
// OpenTelemetry SDK, serves the metrics in the Prometheus format through the OpenTelemetry
// Prometheus exporter on a loopback port (127.0.0.1, a port the kernel picks), drives a mix of
// outcomes (successes, retries that succeed, messages retried until they are dead-lettered, a
// malformed message, a discard, a panic, a handler past its budget, one failed retry write and
// one failed dead-letter write, and a duplicate that its idempotency claim finds done), prints
// the trace of a retried and of a dead-lettered message, then scrapes its own /metrics over
// HTTP and prints the millrace_* families.
//
//	go run ./examples/observability
//
// Beside it: grafana-dashboard.json (a Grafana dashboard over these metrics) and alerts.yml
// (Prometheus alert rules); main_test.go checks the scrape against the workload and that every
// metric and label they use is in it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// Topic and Handler name what the example consumes; they are the messaging.destination.name and
// millrace.handler labels of every series.
const (
	Topic   = "orders"
	Handler = "orders"
)

// Delay is the wait before each retry.
const Delay = 250 * time.Millisecond

// Policy is the example's retry policy: three attempts, short delays so that it ends at once.
var Policy = millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(Delay)}

// Budget is the handler's processing budget; the "slow" message runs past it once.
const Budget = 200 * time.Millisecond

// LeaseTTL is the idempotency lease: longer than Budget, shorter than the policy's retry window
// (2 x Delay), as idempotency.Config requires.
const LeaseTTL = 400 * time.Millisecond

// Workload is what the example publishes: how many messages of each kind.
var Workload = []struct {
	Kind  string
	Count int
	What  string
}{
	{"ok", 6, "succeeds at once"},
	{"flaky", 3, "fails once, then succeeds"},
	{"down", 2, "fails every attempt: dead-lettered as exhausted after 3"},
	{"broken", 1, "is not JSON: dead-lettered as malformed"},
	{"opted-out", 1, "is discarded (dead-lettered as discarded: DeadLetterDiscards is on)"},
	{"panic", 1, "panics once, then succeeds"},
	{"slow", 1, "runs past its budget once (a timeout), then succeeds"},
	{"retry-write", 1, "fails once and its retry write fails: redelivered, then succeeds"},
	{"dead-letter-write", 1, "is malformed and its first dead-letter write fails: redelivered, then dead-lettered"},
}

// Duplicate is published again, with the same UUID, once everything has settled: its
// idempotency claim finds it done and it is acknowledged without running the handler's work.
const Duplicate = "ok-0"

// Report is what run observed.
type Report struct {
	// MetricsURL is the address /metrics was served on.
	MetricsURL string
	// Scrape is the whole body of the final scrape of /metrics (Prometheus text format).
	Scrape string
	// Spans are the spans the example's tracer recorded, in the order they ended.
	Spans tracetest.SpanStubs
	// DeadLetters are the dead letters of Topic, by message UUID.
	DeadLetters map[string]deadletter.Record
}

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

// run is the whole example: it writes what it shows to out and returns what it observed.
func run(ctx context.Context, out io.Writer) (*Report, error) {
	reg, mp, err := newMetrics()
	if err != nil {
		return nil, err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()

	// Traces: the SDK's TracerProvider; an application would give it an OTLP exporter, the
	// example keeps the spans in memory to print them.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tel, err := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		return nil, err
	}

	// /metrics on a loopback port only.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"

	mem, err := memory.New(memory.Config{})
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	broker := newFaultyBroker(mem)

	// The idempotency lease (an in-process store here; RedisStore in production): its claims
	// are counted by result in millrace_idempotency_claims_total once the router runs with
	// Telemetry (a RedisStore adds the lease store's memory and evictions).
	store, err := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	if err != nil {
		return nil, err
	}
	r, err := router.New(router.Config{
		Adapter:            broker,
		Policy:             Policy,
		Budget:             Budget,
		DeadLetterDiscards: true,
		Idempotency:        idempotency.ForRouter(idempotency.Config{Store: store, LeaseTTL: LeaseTTL}),
		Telemetry:          tel,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	r.Handle(Handler, Topic, handle)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-r.Running():
	case err := <-done:
		return nil, fmt.Errorf("router: %w", err)
	}

	fmt.Fprintf(out, "serving %s\n\nworkload on topic %q (policy: %d attempts, %v apart; budget %v; idempotency lease %v):\n",
		metricsURL, Topic, Policy.MaxAttempts, Delay, Budget, LeaseTTL)
	for _, w := range Workload {
		fmt.Fprintf(out, "  %d x %-17s %s\n", w.Count, w.Kind, w.What)
		for i := range w.Count {
			id := fmt.Sprintf("%s-%d", w.Kind, i)
			body := fmt.Sprintf(`{"id":%q,"kind":%q}`, id, w.Kind)
			if w.Kind == "broken" || w.Kind == "dead-letter-write" {
				body = `{"id":"` + id + `", "kind":` // cut short: not JSON
			}
			switch w.Kind {
			case "retry-write":
				broker.failFirstRetry(id)
			case "dead-letter-write":
				broker.failFirstDeadLetter(id)
			}
			if err := publish(ctx, tp, mem, message.NewMessage(id, []byte(body))); err != nil {
				return nil, err
			}
		}
	}

	// Every message ends (succeeds or is dead-lettered) within a few hundred milliseconds.
	if err := settle(ctx, mem, 30*time.Second); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  then %s again (same UUID): a duplicate, acknowledged by its idempotency claim (done)\n", Duplicate)
	if err := publish(ctx, tp, mem, message.NewMessage(Duplicate, []byte(`{"id":"`+Duplicate+`","kind":"ok"}`))); err != nil {
		return nil, err
	}
	if err := settle(ctx, mem, 30*time.Second); err != nil {
		return nil, err
	}

	// Scrape while the router runs: the backlog gauges are read from the adapter on every
	// collection, only while the router consumes the topic.
	scrape, err := get(ctx, metricsURL)
	if err != nil {
		return nil, err
	}
	_ = r.Close()
	stop()
	<-done

	rep := &Report{MetricsURL: metricsURL, Scrape: scrape, Spans: spans.GetSpans(), DeadLetters: map[string]deadletter.Record{}}
	for _, m := range mem.Peek(mem.DeadLetterTopic(Topic)) {
		rec, err := deadletter.FromMessage(m)
		if err != nil {
			return nil, err
		}
		rep.DeadLetters[rec.UUID] = rec
	}

	printTraces(out, rep)
	fmt.Fprintf(out, "\nscrape of %s (millrace_* families):\n\n", metricsURL)
	for _, line := range MillraceLines(scrape) {
		fmt.Fprintln(out, line)
	}
	return rep, nil
}

// publish publishes msg under a producer span of its own, its trace context in the message's
// traceparent header, as an instrumented producer would: every attempt's span is then a child
// of it, in its trace.
func publish(ctx context.Context, tp trace.TracerProvider, mem *memory.Adapter, msg *message.Message) error {
	ctx, span := tp.Tracer("example/producer").Start(ctx, "publish "+Topic, trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(msg.Metadata))
	return mem.Publish(Topic, msg)
}

// newMetrics returns the SDK's MeterProvider with the OpenTelemetry Prometheus exporter as its
// reader, registered in a registry of its own (an application that already serves
// prometheus.DefaultRegisterer would pass that). The translation strategy is set explicitly:
// with it "millrace.deliveries" is millrace_deliveries_total and "millrace.handler.duration"
// (unit s) millrace_handler_duration_seconds, the names the dashboard and the alerts use; the
// exporter's default follows prometheus/common's name validation scheme, which may keep the dots.
func newMetrics() (*prometheus.Registry, *sdkmetric.MeterProvider, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, err
	}
	return reg, sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}

// order is the message body the handler expects.
type order struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// handle is the business handler: what each kind of message does.
func handle(ctx context.Context, msg *message.Message, a millrace.Attempt) error {
	var o order
	if err := json.Unmarshal(msg.Payload, &o); err != nil {
		return millrace.Malformed(err)
	}
	switch o.Kind {
	case "flaky", "retry-write":
		if a.Number == 1 {
			return errors.New("inventory service unavailable")
		}
	case "down":
		return millrace.Retry(errors.New("payment provider down"))
	case "opted-out":
		return millrace.Discard(errors.New("customer opted out"))
	case "panic":
		if a.Number == 1 {
			panic("nil map in the pricing rules")
		}
	case "slow":
		if a.Number == 1 {
			<-ctx.Done() // the budget's deadline
			return ctx.Err()
		}
	}
	return nil
}

// faultyBroker is the memory adapter with injected write failures: the first retry write, or
// the first dead-letter write, of the messages named fails, as a broker that refuses a write
// would. The router then leaves the original unacknowledged and it is delivered again; the
// failures are counted in millrace_retry_failures_total and millrace_dead_letter_failures_total.
// Every other method (Backlog included) is the memory adapter's.
type faultyBroker struct {
	*memory.Adapter
	mu              sync.Mutex
	failRetry       map[string]bool // message UUID -> its next retry write fails
	failDeadLetter  map[string]bool // message UUID -> its next dead-letter write fails
	errBrokerRefuse error
}

func newFaultyBroker(a *memory.Adapter) *faultyBroker {
	return &faultyBroker{Adapter: a, failRetry: map[string]bool{}, failDeadLetter: map[string]bool{},
		errBrokerRefuse: errors.New("broker refused the write (injected by the example)")}
}

func (b *faultyBroker) failFirstRetry(uuid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failRetry[uuid] = true
}

func (b *faultyBroker) failFirstDeadLetter(uuid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failDeadLetter[uuid] = true
}

// take reports whether uuid's next write of this kind fails, and clears it.
func (b *faultyBroker) take(m map[string]bool, uuid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fail := m[uuid]
	delete(m, uuid)
	return fail
}

func (b *faultyBroker) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	if b.take(b.failRetry, msg.UUID) {
		return 0, b.errBrokerRefuse
	}
	return b.Adapter.ScheduleRetry(ctx, msg, req)
}

func (b *faultyBroker) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	if b.take(b.failDeadLetter, rec.UUID) {
		return b.errBrokerRefuse
	}
	return b.Adapter.DeadLetter(ctx, msg, rec)
}

var _ millrace.BacklogReporter = (*faultyBroker)(nil)

// settle waits until nothing of Topic is waiting, in flight or scheduled for a retry.
func settle(ctx context.Context, mem *memory.Adapter, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for mem.Outstanding(Topic) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages of %s still outstanding after %v", mem.Outstanding(Topic), Topic, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// get scrapes url as Prometheus does (a plain GET) and returns the body.
func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// MillraceLines returns the lines of a text-format scrape that belong to millrace_* families:
// their # HELP and # TYPE lines and their samples.
func MillraceLines(scrape string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(scrape))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name := line
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name = rest
		} else if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = rest
		}
		if strings.HasPrefix(name, "millrace_") {
			lines = append(lines, line)
		}
	}
	return lines
}

// printTraces prints the spans of one retried message (flaky-0) and one dead-lettered message
// (down-0): one span per attempt, each a link to the attempt before, and the span the dead
// letter links to.
func printTraces(out io.Writer, rep *Report) {
	byMessage := map[string][]tracetest.SpanStub{}
	for _, s := range rep.Spans {
		for _, kv := range s.Attributes {
			if kv.Key == telemetry.KeyMessageID {
				byMessage[kv.Value.AsString()] = append(byMessage[kv.Value.AsString()], s)
			}
		}
	}
	for _, id := range []string{"flaky-0", "down-0"} {
		ss := byMessage[id]
		sort.Slice(ss, func(i, j int) bool { return attemptOf(ss[i]) < attemptOf(ss[j]) })
		fmt.Fprintf(out, "\ntrace of %s:\n", id)
		for _, s := range ss {
			link := "no link"
			if len(s.Links) > 0 {
				link = "links to span " + s.Links[0].SpanContext.SpanID().String()
			}
			fmt.Fprintf(out, "  attempt %d: span %s %q in trace %s, child of the producer's span %s, %s, %s\n", attemptOf(s),
				s.SpanContext.SpanID(), s.Name, s.SpanContext.TraceID(), s.Parent.SpanID(), outcomeOf(s), link)
		}
		if rec, ok := rep.DeadLetters[id]; ok {
			fmt.Fprintf(out, "  dead letter (%s, %d attempts) links to span %s\n", rec.Reason, rec.Attempts,
				telemetry.LinkedAttempt(rec.Metadata).SpanID())
		}
	}
}

func attemptOf(s tracetest.SpanStub) int64 {
	for _, kv := range s.Attributes {
		if kv.Key == telemetry.KeyAttempt {
			return kv.Value.AsInt64()
		}
	}
	return 0
}

func outcomeOf(s tracetest.SpanStub) string {
	var outcome, reason string
	for _, kv := range s.Attributes {
		switch kv.Key {
		case telemetry.KeyOutcome:
			outcome = kv.Value.AsString()
		case telemetry.KeyReason:
			reason = kv.Value.AsString()
		}
	}
	return outcome + "/" + reason
}
