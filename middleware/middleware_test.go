package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// recorder stands in for an adapter's retry and dead-letter side: these tests pin the
// middleware's decisions, the conformance suite covers real adapters.
type recorder struct {
	number     int
	lastError  string
	disp       millrace.Disposition
	retryErr   error
	dlErr      error
	retries    []millrace.RetryRequest
	deadLetter []deadletter.Record
}

func (r *recorder) DecodeAttempt(*message.Message) millrace.Attempt {
	return millrace.Attempt{Number: r.number, Broker: "test", OriginalTopic: "orders", LastError: r.lastError}
}

func (r *recorder) ScheduleRetry(_ context.Context, _ *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	r.retries = append(r.retries, req)
	return r.disp, r.retryErr
}

func (r *recorder) DeadLetter(_ context.Context, _ *message.Message, rec deadletter.Record) error {
	if r.dlErr != nil {
		return r.dlErr
	}
	r.deadLetter = append(r.deadLetter, rec)
	return nil
}

func chain(r *recorder, policy millrace.RetryPolicy, h message.HandlerFunc) message.HandlerFunc {
	mws := []message.HandlerMiddleware{
		middleware.Poison(r, middleware.PoisonConfig{}),
		middleware.Attempt(r, policy),
		middleware.Retry(r, middleware.RetryConfig{Policy: policy, MaxDelay: 10 * time.Second}),
		middleware.Classify(nil),
		middleware.Budget(0),
		middleware.Recover(),
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

func msgWithCtx() *message.Message { return message.NewMessage("m-1", []byte(`{"a":1}`)) }

var errDown = errors.New("dependency down")

func failing() message.HandlerFunc {
	return func(*message.Message) ([]*message.Message, error) { return nil, errDown }
}

var policy = millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(2 * time.Second)}

func TestRetryBelowCapAcksAfterSchedule(t *testing.T) {
	r := &recorder{number: 1, disp: millrace.AckOriginal}
	_, err := chain(r, policy, failing())(msgWithCtx())
	if err != nil {
		t.Fatalf("err = %v, want nil (ack after the retry copy is safe)", err)
	}
	if len(r.retries) != 1 || r.retries[0].Delay != 2*time.Second || r.retries[0].Attempt.Number != 1 || !errors.Is(r.retries[0].Err, errDown) {
		t.Fatalf("retries %+v", r.retries)
	}
}

func TestRetryNativeRedeliveryNacks(t *testing.T) {
	r := &recorder{number: 2, disp: millrace.NackOriginal}
	msg := msgWithCtx()
	_, err := chain(r, policy, failing())(msg)
	if err != nil {
		t.Fatalf("err = %v, want nil: a planned retry is no handler failure", err)
	}
	select {
	case <-msg.Nacked():
	default:
		t.Fatal("original not nacked: the broker would not redeliver it")
	}
	if msg.Ack() {
		t.Fatal("the router's Ack after a nil return acknowledged a nacked original")
	}
}

func TestFailedRetryScheduleNeverAcks(t *testing.T) {
	r := &recorder{number: 1, retryErr: errors.New("retry topic missing")}
	_, err := chain(r, policy, failing())(msgWithCtx())
	if !errors.Is(err, millrace.ErrRetryPublishFailed) {
		t.Fatalf("err = %v, want ErrRetryPublishFailed (the router nacks)", err)
	}
	if len(r.deadLetter) != 0 {
		t.Fatal("a failed retry schedule must not dead-letter")
	}
}

func TestLastAttemptIsDeadLettered(t *testing.T) {
	r := &recorder{number: 3}
	_, err := chain(r, policy, failing())(msgWithCtx())
	if err != nil {
		t.Fatalf("err = %v, want nil after the dead letter is written", err)
	}
	if len(r.retries) != 0 || len(r.deadLetter) != 1 {
		t.Fatalf("retries %d dead letters %d", len(r.retries), len(r.deadLetter))
	}
	rec := r.deadLetter[0]
	if rec.Reason != deadletter.Exhausted || rec.Attempts != 3 || rec.LastError != errDown.Error() || rec.OriginalTopic != "orders" || rec.Broker != "test" {
		t.Fatalf("record %+v", rec)
	}
}

func TestFailedDeadLetterNeverAcks(t *testing.T) {
	r := &recorder{number: 3, dlErr: errors.New("dlq unavailable")}
	_, err := chain(r, policy, failing())(msgWithCtx())
	if !errors.Is(err, millrace.ErrDeadLetterFailed) {
		t.Fatalf("err = %v, want ErrDeadLetterFailed", err)
	}
}

func TestOverLimitArrivalSkipsHandler(t *testing.T) {
	r := &recorder{number: 9}
	called := false
	_, err := chain(r, policy, func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })(msgWithCtx())
	if err != nil || called {
		t.Fatalf("err %v called %v: an arrival past MaxAttempts must be dead-lettered without a handler call", err, called)
	}
	// The retry state says 8 attempts came before this delivery; the policy's 3 would claim
	// handler calls nobody saw, and the error text must say the handler did not run.
	if len(r.deadLetter) != 1 || r.deadLetter[0].Attempts != 8 || r.deadLetter[0].Reason != deadletter.Exhausted ||
		!strings.Contains(r.deadLetter[0].LastError, "delivered as attempt 9, past MaxAttempts 3: the handler was not called") {
		t.Fatalf("dead letters %+v: want one exhausted record with the 8 attempts of its history and a LastError saying the handler did not run", r.deadLetter)
	}
}

// A redelivery after a failed dead-letter write (attempt MaxAttempts+1) records MaxAttempts.
func TestRedeliveryAfterFailedDeadLetterRecordsMaxAttempts(t *testing.T) {
	r := &recorder{number: 4}
	if _, err := chain(r, policy, failing())(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.deadLetter) != 1 || r.deadLetter[0].Attempts != 3 {
		t.Fatalf("dead letters %+v: want one record with 3 attempts", r.deadLetter)
	}
}

func TestUndecodableDeliveryIsMalformed(t *testing.T) {
	r := &recorder{number: 1}
	msg := msgWithCtx()
	msg.SetContext(millrace.WithDecodeError(context.Background(), errors.New("metadata is not JSON")))
	called := false
	_, err := chain(r, policy, func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })(msg)
	if err != nil || called || len(r.deadLetter) != 1 || r.deadLetter[0].Reason != deadletter.Malformed {
		t.Fatalf("err %v called %v dead letters %+v", err, called, r.deadLetter)
	}
	if string(r.deadLetter[0].Payload) != `{"a":1}` {
		t.Fatalf("payload %q", r.deadLetter[0].Payload)
	}
}

func TestRetryAfterIsCappedAtAdapterMaximum(t *testing.T) {
	r := &recorder{number: 1, disp: millrace.AckOriginal}
	h := func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.RetryAfter(errDown, time.Hour)
	}
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if got := r.retries[0].Delay; got != 10*time.Second {
		t.Fatalf("delay %s, want the 10s cap", got)
	}
}

func TestPanicBecomesRetryWithStack(t *testing.T) {
	r := &recorder{number: 1, disp: millrace.AckOriginal}
	h := func(*message.Message) ([]*message.Message, error) { panic("nil map") }
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	var pe *millrace.PanicError
	if len(r.retries) != 1 || !errors.As(r.retries[0].Err, &pe) || pe.Value != "nil map" || len(pe.Stack) == 0 {
		t.Fatalf("retries %+v", r.retries)
	}
}

func TestBudgetRestoresContext(t *testing.T) {
	msg := msgWithCtx()
	parent := msg.Context()
	var sawDeadline bool
	h := middleware.Budget(50 * time.Millisecond)(func(m *message.Message) ([]*message.Message, error) {
		_, sawDeadline = m.Context().Deadline()
		return nil, nil
	})
	if _, err := h(msg); err != nil {
		t.Fatal(err)
	}
	if !sawDeadline || msg.Context() != parent || msg.Context().Err() != nil {
		t.Fatalf("deadline %v, context restored %v", sawDeadline, msg.Context() == parent)
	}
}

func TestDiscardAcksWithoutDeadLetterByDefault(t *testing.T) {
	r := &recorder{number: 1}
	h := func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.Discard(errors.New("opted out"))
	}
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.retries)+len(r.deadLetter) != 0 {
		t.Fatalf("a Discard was retried or dead-lettered: %+v %+v", r.retries, r.deadLetter)
	}
}

func TestOverLimitArrivalKeepsTheCarriedError(t *testing.T) {
	r := &recorder{number: 4, lastError: "provider 503"}
	if _, err := chain(r, policy, failing())(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.deadLetter) != 1 || r.deadLetter[0].LastError != "provider 503" || r.deadLetter[0].Attempts != 3 {
		t.Fatalf("dead letters %+v: want the carried error and 3 attempts", r.deadLetter)
	}
}

// A scheduled retry is logged at Info with the attempt, the limit, the delay and the cause;
// a logger above Info gets nothing.
func TestRetryScheduledIsLogged(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		r := &recorder{number: 1, disp: millrace.AckOriginal}
		h := middleware.Retry(r, middleware.RetryConfig{Policy: policy, Logger: logger})(failing())
		if _, err := h(msgWithCtx()); err != nil {
			t.Fatal(err)
		}
		line := buf.String()
		if level == slog.LevelWarn {
			if line != "" {
				t.Fatalf("logged above its level: %q", line)
			}
			continue
		}
		for _, want := range []string{"retry scheduled", "message_uuid=m-1", "attempt=1", "max_attempts=3", "delay=2s", `error="dependency down"`} {
			if !strings.Contains(line, want) {
				t.Fatalf("log line %q lacks %q", line, want)
			}
		}
	}
}

// The attempt layer costs one allocation per message, the context that carries the Attempt:
// context.WithValue with a pointer took two (the Attempt escaped to the heap as well), a
// twenty-fourth of a Redis Streams message's allocations (issue 16).
func TestAttemptAllocatesOneContextPerMessage(t *testing.T) {
	r := &recorder{number: 1}
	h := middleware.Attempt(r, millrace.RetryPolicy{MaxAttempts: 3})(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	msg := msgWithCtx()
	base := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		msg.SetContext(base)
		_, _ = h(msg)
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per message, want at most 1", allocs)
	}
	if a := millrace.AttemptFrom(msg); a.Number != 1 || a.MaxAttempts != 3 || a.OriginalTopic != "orders" {
		t.Fatalf("the context carries %+v", a)
	}
}
