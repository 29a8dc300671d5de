package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// printer is a DeadLetterer that prints each record instead of writing it to a broker.
type printer struct{}

func (printer) DeadLetter(_ context.Context, _ *message.Message, rec deadletter.Record) error {
	fmt.Printf("dead letter %s: %s, %d attempt(s), %q, payload %q\n", rec.UUID, rec.Reason, rec.Attempts, rec.LastError, rec.Payload)
	return nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Classify gives every error an Outcome: the handler's own (millrace.Discard, ...) or the
// classifier's verdict for errors that carry none.
func ExampleClassify() {
	errNotFound := errors.New("customer not found")
	classify := middleware.Classify(func(err error) millrace.Outcome {
		if errors.Is(err, errNotFound) {
			return millrace.OutcomeDiscard
		}
		return millrace.OutcomeRetry
	})
	for _, cause := range []error{fmt.Errorf("load: %w", errNotFound), errors.New("database is down"), millrace.Discard(errors.New("expired")), nil} {
		h := classify(func(*message.Message) ([]*message.Message, error) { return nil, cause })
		_, err := h(message.NewMessage("id", nil))
		var oe *millrace.OutcomeError
		if errors.As(err, &oe) {
			fmt.Println(oe.Outcome, "-", oe.Err)
		} else {
			fmt.Println("success:", err)
		}
	}
	// Output:
	// DISCARD - load: customer not found
	// RETRY - database is down
	// DISCARD - expired
	// success: <nil>
}

// Recover turns a panic into a Retry whose cause is a *millrace.PanicError with the value and
// the stack.
func ExampleRecover() {
	h := middleware.Recover()(func(*message.Message) ([]*message.Message, error) {
		var m map[string]int
		m["x"]++ // panics
		return nil, nil
	})
	_, err := h(message.NewMessage("id", nil))
	var pe *millrace.PanicError
	fmt.Println(millrace.Classify(err, nil).Outcome, errors.As(err, &pe), len(pe.Stack) > 0)
	fmt.Println(pe.Value)
	// Output:
	// RETRY true true
	// assignment to entry in nil map
}

// Poison dead-letters malformed and exhausted messages, and discarded ones when asked to, with
// the payload unchanged; the original is acknowledged (nil error) only after the write. A
// Retry below the last attempt is not its business: the error goes on to the router.
func ExamplePoison() {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	poison := middleware.Poison(printer{}, middleware.PoisonConfig{Broker: "memory", DeadLetterDiscards: true, Logger: quiet,
		Now: func() time.Time { return at }})
	for _, c := range []struct {
		uuid  string
		cause error
	}{
		{"m-1", millrace.Malformed(errors.New("invalid character '}' in JSON"))},
		{"m-2", &millrace.ExhaustedError{Attempts: 5, Err: errors.New("smtp: connection refused")}},
		{"m-3", millrace.Discard(errors.New("user opted out"))},
		{"m-4", millrace.Retry(errors.New("timeout"))},
	} {
		h := poison(func(*message.Message) ([]*message.Message, error) { return nil, c.cause })
		_, err := h(message.NewMessage(c.uuid, []byte(`{"to":"a@example.com"}`)))
		fmt.Printf("%s -> handler error %v\n", c.uuid, err)
	}
	// Output:
	// dead letter m-1: malformed, 1 attempt(s), "invalid character '}' in JSON", payload "{\"to\":\"a@example.com\"}"
	// m-1 -> handler error <nil>
	// dead letter m-2: exhausted, 5 attempt(s), "smtp: connection refused", payload "{\"to\":\"a@example.com\"}"
	// m-2 -> handler error <nil>
	// dead letter m-3: discarded, 1 attempt(s), "user opted out", payload "{\"to\":\"a@example.com\"}"
	// m-3 -> handler error <nil>
	// m-4 -> handler error RETRY: timeout
}

// downDestination is a DeadLetterer whose destination is down.
type downDestination struct{}

func (downDestination) DeadLetter(context.Context, *message.Message, deadletter.Record) error {
	return errors.New("broker unreachable")
}

// A failed dead-letter write is an error wrapping millrace.ErrDeadLetterFailed: the router nacks
// and the broker delivers the message again, so nothing is lost.
func ExamplePoison_writeFailed() {
	h := middleware.Poison(downDestination{}, middleware.PoisonConfig{Logger: quiet})(func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.Malformed(errors.New("not JSON"))
	})
	_, err := h(message.NewMessage("m-1", []byte("x")))
	fmt.Println(errors.Is(err, millrace.ErrDeadLetterFailed))
	fmt.Println(err)
	// Output:
	// true
	// millrace: dead-letter publish failed: broker unreachable (message was malformed: not JSON)
}

// scheduler is a RetryScheduler that prints each request instead of asking a broker.
type scheduler struct{}

func (scheduler) ScheduleRetry(_ context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	fmt.Printf("retry %s after attempt %d in %s: %v\n", msg.UUID, req.Attempt.Number, req.Delay, req.Err)
	return millrace.AckOriginal, nil
}

// Retry schedules a Retry outcome below MaxAttempts through the adapter (the policy's delay, or
// the handler's own with RetryAfter, capped at MaxDelay) and returns nil: the original is then
// acknowledged. On the last attempt it returns an ExhaustedError for Poison instead.
func ExampleRetry() {
	retry := middleware.Retry(scheduler{}, middleware.RetryConfig{
		Policy:   millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Second, time.Minute}},
		MaxDelay: time.Hour, Logger: quiet,
	})
	for _, c := range []struct {
		attempt int
		cause   error
	}{
		{1, errors.New("timeout")},
		{2, millrace.RetryAfter(errors.New("429 Too Many Requests"), 2*time.Hour)},
		{3, errors.New("timeout")},
	} {
		msg := message.NewMessage(fmt.Sprintf("m-%d", c.attempt), nil)
		msg.SetContext(millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: c.attempt, MaxAttempts: 3}))
		h := retry(func(*message.Message) ([]*message.Message, error) { return nil, c.cause })
		_, err := h(msg)
		fmt.Printf("attempt %d -> %v (exhausted %v)\n", c.attempt, err, errors.Is(err, millrace.ErrExhausted))
	}
	// Output:
	// retry m-1 after attempt 1 in 1s: timeout
	// attempt 1 -> <nil> (exhausted false)
	// retry m-2 after attempt 2 in 1h0m0s: 429 Too Many Requests
	// attempt 2 -> <nil> (exhausted false)
	// attempt 3 -> millrace: retry attempts exhausted after 3 attempts: timeout (exhausted true)
}

// Budget gives the handler a context deadline: a handler that honours its context stops when
// the processing budget is spent, and its error is then a Retry like any other.
func ExampleBudget() {
	h := middleware.Budget(20 * time.Millisecond)(func(msg *message.Message) ([]*message.Message, error) {
		_, hasDeadline := msg.Context().Deadline()
		fmt.Println("deadline set:", hasDeadline)
		<-msg.Context().Done() // a call that honours its context, cut short by the budget
		return nil, msg.Context().Err()
	})
	_, err := h(message.NewMessage("m-1", nil))
	fmt.Println(err, millrace.Classify(err, nil).Outcome)
	// Output:
	// deadline set: true
	// context deadline exceeded RETRY
}
