package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	natsadapter "github.com/millrace/millrace/adapters/nats"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/testenv"
)

// sqsURL returns the sqs+http:// URL of the local endpoint (fauxqs, `. .ci/services/sqs.sh`).
func sqsURL(t *testing.T) string {
	t.Helper()
	ep := testenv.Getenv("MILLRACE_SQS_ENDPOINT", "")
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", "MILLRACE_SQS_ENDPOINT", errors.New("not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatalf("MILLRACE_SQS_ENDPOINT: %v", err)
	}
	return "sqs+" + u.Scheme + "://" + u.Host
}

// TestFieldReportBudgetIsRefusedOnSQS: the report's 104 s budget with SQS's 60 s visibility
// timeout would let a second consumer receive a message still being handled; it is refused at
// start-up, before any connection, and the example's 50 s budget is accepted.
func TestFieldReportBudgetIsRefusedOnSQS(t *testing.T) {
	ctx := context.Background()
	timing := ProductionTiming(slog.New(slog.NewTextHandler(io.Discard, nil)))
	timing.Budget = 104 * time.Second
	_, err := NewAdapter(ctx, "sqs+http://127.0.0.1:1", timing)
	if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), "ProcessingBudget") {
		t.Fatalf("104s budget with 60s visibility: %v, want a ProcessingBudget error", err)
	}

	timing = ProductionTiming(slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, err := NewAdapter(ctx, sqsURL(t), timing)
	if err != nil {
		t.Fatalf("production timing refused: %v", err)
	}
	defer a.Close()
	// The visibility timeout reached the adapter: it bounds the longest delay.
	if got, want := a.Capabilities().MaxDelay, sqs.MaxVisibility-timing.Visibility; got != want {
		t.Errorf("MaxDelay %v, want 12h - Timing.Visibility = %v", got, want)
	}
}

func TestNewAdapterRefusesUnknownSchemeAndParameter(t *testing.T) {
	ctx := context.Background()
	if _, err := NewAdapter(ctx, "amqp://127.0.0.1:5672", ProductionTiming(nil)); !errors.Is(err, brokerurl.ErrUnknownScheme) {
		t.Fatalf("amqp URL: %v, want brokerurl.ErrUnknownScheme (only kafka, sqs and nats are imported)", err)
	}
	_, err := NewAdapter(ctx, "kafka://127.0.0.1:1?tsl=true", ProductionTiming(nil))
	if !errors.Is(err, brokerurl.ErrUnknownParameter) || !strings.Contains(err.Error(), "tsl") {
		t.Fatalf("kafka URL with a typo: %v, want an unknown parameter error naming tsl", err)
	}
}

// TestWithTiming: the Timing a broker needs at open is added to its URL, and what the URL sets
// is kept, except a processing budget other than the router's.
func TestWithTiming(t *testing.T) {
	timing := ProductionTiming(nil)
	for _, c := range []struct{ in, want string }{
		{"kafka://h:9092", "kafka://h:9092?group=notification&partitions=3"},
		{"kafka://u:p@h:9092?group=billing&partitions=6&sasl=plain", "kafka://u:p@h:9092?group=billing&partitions=6&sasl=plain"},
		{"sqs+http://h:1?create=true", "sqs+http://h:1?create=true&processing_budget=50s&visibility=1m0s"},
		{"sqs+https://sqs.eu-west-1.amazonaws.com?visibility=120s", "sqs+https://sqs.eu-west-1.amazonaws.com?processing_budget=50s&visibility=120s"},
		{"sqs+https://sqs.eu-west-1.amazonaws.com?processing_budget=50000ms", "sqs+https://sqs.eu-west-1.amazonaws.com?processing_budget=50s&visibility=1m0s"},
		{"nats://h:4222", "nats://h:4222?ack_wait=2m0s&durable=notification&processing_budget=50s"},
		{"nats://u:p@h:4222?durable=billing&ack_wait=5m&window=8", "nats://u:p@h:4222?ack_wait=5m&durable=billing&processing_budget=50s&window=8"},
		{"nats://h:4222?processing_budget=50s", "nats://h:4222?ack_wait=2m0s&durable=notification&processing_budget=50s"},
	} {
		got, err := withTiming(c.in, timing)
		if err != nil || got != c.want {
			t.Errorf("withTiming(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"sqs+http://h:1?processing_budget=104s", "nats://h:4222?processing_budget=104s"} {
		if _, err := withTiming(in, timing); err == nil || !strings.Contains(err.Error(), "processing_budget=104s") {
			t.Errorf("withTiming(%s), a URL budget other than Timing.Budget: %v, want it refused", in, err)
		}
	}
}

// TestNATSAckWaitCarriesTheBudget: on NATS the budget must stay below half of the ack wait (a
// message may wait one budget in the pull buffer, then run one). Production's 2 min ack wait
// carries the 50 s budget; the report's 104 s budget, or an ack wait of the SQS visibility
// timeout's 60 s, is refused at start-up, before any connection, naming the rule.
func TestNATSAckWaitCarriesTheBudget(t *testing.T) {
	ctx := context.Background()
	timing := ProductionTiming(slog.New(slog.NewTextHandler(io.Discard, nil)))
	// refused checks that opening the URL with timing fails on the budget rule against ackWait,
	// as the driver reports it: the processing_budget parameter withTiming set.
	refused := func(brokerURL string, timing Timing, ackWait string) {
		t.Helper()
		_, err := NewAdapter(ctx, brokerURL, timing)
		var pe *brokerurl.ParameterError
		if !errors.As(err, &pe) || pe.Name != "processing_budget" || !strings.Contains(pe.Rule, "below half of AckWait ("+ackWait+")") {
			t.Errorf("%s with budget %v: %v, want processing_budget refused against AckWait %s", brokerURL, timing.Budget, err, ackWait)
		}
	}
	timing.Budget = 104 * time.Second
	refused("nats://127.0.0.1:1", timing, "2m0s")
	timing = ProductionTiming(slog.New(slog.NewTextHandler(io.Discard, nil)))
	refused("nats://127.0.0.1:1?ack_wait=60s", timing, "1m0s")

	a, err := NewAdapter(ctx, natsURL(t), timing)
	if err != nil {
		t.Fatalf("production timing refused: %v", err)
	}
	defer a.Close()
	cfg := a.(*natsadapter.Adapter).Config()
	if cfg.AckWait != timing.AckWait || cfg.ProcessingBudget != timing.Budget || cfg.Durable != "notification" {
		t.Errorf("adapter AckWait %v, ProcessingBudget %v, Durable %q; want Timing's %v, %v and notification",
			cfg.AckWait, cfg.ProcessingBudget, cfg.Durable, timing.AckWait, timing.Budget)
	}
}

// natsURL returns the NATS server's URL (MILLRACE_NATS_URL, default nats://127.0.0.1:4222),
// failing in CI and skipping elsewhere when it is unreachable.
func natsURL(t *testing.T) string {
	t.Helper()
	u := testenv.Getenv("MILLRACE_NATS_URL", natsadapter.DefaultURL)
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "nats" || p.Host == "" || p.RawQuery != "" {
		t.Fatalf("MILLRACE_NATS_URL %q: want nats://host:port (%v)", u, err)
	}
	if err := dial(p.Host); err != nil {
		testenv.Unreachable(t, "NATS", u, "MILLRACE_NATS_URL", err)
	}
	return u
}
