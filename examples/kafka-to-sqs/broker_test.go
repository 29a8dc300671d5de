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
		t.Fatalf("amqp URL: %v, want brokerurl.ErrUnknownScheme (only kafka and sqs are imported)", err)
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
	} {
		got, err := withTiming(c.in, timing)
		if err != nil || got != c.want {
			t.Errorf("withTiming(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if _, err := withTiming("sqs+http://h:1?processing_budget=104s", timing); err == nil || !strings.Contains(err.Error(), "processing_budget=104s") {
		t.Errorf("a URL budget other than Timing.Budget: %v, want it refused", err)
	}
}
