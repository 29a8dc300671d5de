package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// A Record travels as a message: the original payload and metadata, unchanged, plus the
// millrace-dlq-* keys. A producer's own key that looks like a record key is escaped, so it can
// never forge one, and FromMessage gives it back under its own name.
func ExampleRecord() {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := deadletter.Record{
		UUID: "m-1", Payload: []byte(`{"order":42}`),
		Metadata: map[string]string{"trace": "abc", "millrace-dlq-reason": "forged"},
		Reason:   deadletter.Exhausted, Attempts: 5, LastError: "smtp: connection refused",
		OriginalTopic: "emails", Broker: "memory", Handler: "send-email",
		FirstFailureAt: at.Add(-4 * time.Minute), LastFailureAt: at,
	}
	msg := rec.Message()
	for _, k := range slices.Sorted(maps.Keys(msg.Metadata)) {
		fmt.Printf("%s: %s\n", k, msg.Metadata[k])
	}

	back, err := deadletter.FromMessage(msg)
	fmt.Println(err, back.Reason, back.Attempts, back.Metadata["millrace-dlq-reason"], string(back.Payload))

	_, err = deadletter.FromMessage(message.NewMessage("x", nil))
	fmt.Println(errors.Is(err, deadletter.ErrNotDeadLetter))
	// Output:
	// millrace-dlq-attempts: 5
	// millrace-dlq-broker: memory
	// millrace-dlq-esc.millrace-dlq-reason: forged
	// millrace-dlq-first-failure: 2026-03-01T11:56:00Z
	// millrace-dlq-handler: send-email
	// millrace-dlq-last-error: smtp: connection refused
	// millrace-dlq-last-failure: 2026-03-01T12:00:00Z
	// millrace-dlq-message-uuid: m-1
	// millrace-dlq-original-topic: emails
	// millrace-dlq-reason: exhausted
	// trace: abc
	// <nil> exhausted 5 forged {"order":42}
	// true
}

// A Filter selects dead letters by topic, reason, time, handler and error text; stores that
// filter in Go use Match. Validate names the field that breaks a rule.
func ExampleFilter() {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := []deadletter.Record{
		{UUID: "a", OriginalTopic: "emails", Reason: deadletter.Exhausted, LastError: "smtp: timeout", LastFailureAt: at},
		{UUID: "b", OriginalTopic: "emails", Reason: deadletter.Malformed, LastError: "invalid JSON", LastFailureAt: at},
		{UUID: "c", OriginalTopic: "sms", Reason: deadletter.Exhausted, LastError: "smtp: timeout", LastFailureAt: at.Add(-48 * time.Hour)},
	}
	f := deadletter.Filter{Reason: deadletter.Exhausted, ErrorContains: "smtp", Since: at.Add(-24 * time.Hour)}
	for _, r := range recs {
		fmt.Println(r.UUID, f.Match(r))
	}
	fmt.Println(deadletter.Filter{Reason: "lost"}.Validate())
	// Output:
	// a true
	// b false
	// c false
	// deadletter: invalid filter: Reason = lost: must be discarded, exhausted or malformed
}

// Replay: a message is dead-lettered on the memory adapter while its dependency is down; once
// it is back, the dead letters that match a filter are re-published to their original topic
// with ReplayMessage (ResetHistory: a full retry budget again) and succeed.
func ExampleReplayMessage() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(10 * time.Millisecond)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	down := true
	r.Handle("send-email", "emails", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if down {
			fmt.Printf("%s attempt %d: smtp down\n", msg.UUID, at.Number)
			return errors.New("smtp: connection refused")
		}
		fmt.Printf("%s attempt %d: sent\n", msg.UUID, at.Number)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	wait := func(topic string) {
		for a.Outstanding(topic) > 0 {
			time.Sleep(time.Millisecond)
		}
	}

	if err := a.Publish("emails", message.NewMessage("m-1", []byte("hello"))); err != nil {
		panic(err)
	}
	wait("emails")

	down = false // the handler is idle: nothing runs until the replay below
	dlq := a.DeadLetterTopic("emails")
	f := deadletter.Filter{Topic: "emails", ErrorContains: "smtp"}
	for _, m := range a.Peek(dlq) {
		rec, err := deadletter.FromMessage(m)
		if err != nil || !f.Match(rec) {
			continue
		}
		fmt.Printf("replay %s (%s after %d attempts)\n", rec.UUID, rec.Reason, rec.Attempts)
		if err := a.Publish(rec.OriginalTopic, deadletter.ReplayMessage(rec, deadletter.ResetHistory)); err != nil {
			panic(err)
		}
		wait(rec.OriginalTopic)
	}
	_ = r.Close()
	// Output:
	// m-1 attempt 1: smtp down
	// m-1 attempt 2: smtp down
	// replay m-1 (exhausted after 2 attempts)
	// m-1 attempt 1: sent
}
