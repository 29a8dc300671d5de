package main

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

// TestFieldReportBudgetIsRefusedOnSQS: the report's 104 s budget with SQS's 60 s visibility
// timeout would let a second consumer receive a message still being handled; it is refused at
// start-up, and the example's 50 s budget is accepted.
func TestFieldReportBudgetIsRefusedOnSQS(t *testing.T) {
	timing := ProductionTiming(slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, err := NewAdapter("sqs+http://127.0.0.1:1", timing)
	if err != nil {
		t.Fatalf("production timing refused: %v", err)
	}
	_ = a.Close()

	timing.Budget = 104 * time.Second
	_, err = NewAdapter("sqs+http://127.0.0.1:1", timing)
	if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), "ProcessingBudget") {
		t.Fatalf("104s budget with 60s visibility: %v, want a ProcessingBudget error", err)
	}
}

func TestNewAdapterRefusesUnknownScheme(t *testing.T) {
	if _, err := NewAdapter("amqp://127.0.0.1:5672", ProductionTiming(nil)); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Fatalf("amqp URL: %v, want an unknown scheme error", err)
	}
}
