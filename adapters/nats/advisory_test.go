package nats

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// failingDeadLetters is the adapter with every router dead-letter write failing.
type failingDeadLetters struct {
	*Adapter
	calls atomic.Int32
}

func (f *failingDeadLetters) DeadLetter(context.Context, *message.Message, deadletter.Record) error {
	f.calls.Add(1)
	return errors.New("injected: dead-letter destination down")
}

// TestMaxDeliveriesAdvisoryDeadLetters: with MaxDeliver 2 and every dead-letter write of the
// router failing, JetStream stops delivering the message after its second delivery; the
// max-deliveries advisory then dead-letters it, payload and headers intact, exactly once.
func TestMaxDeliveriesAdvisoryDeadLetters(t *testing.T) {
	cfg := testConfig()
	cfg.MaxDeliver = 2
	a := newTestAdapter(t, cfg)
	topic := uniqueSubject(t)
	faulty := &failingDeadLetters{Adapter: a}
	r, err := router.New(router.Config{Adapter: faulty, Policy: millrace.RetryPolicy{MaxAttempts: 1},
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), CloseTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r.Handle("advisory-test", topic, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	<-r.Running()

	msg := message.NewMessage("uuid-advisory", []byte("\x00payload"))
	msg.Metadata.Set("x-kept", "yes")
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(topic)
	store, err := NewDeadLetterStore(a.JetStream(), dlq, a.Config().StreamName(dlq))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := store.Count(context.Background(), deadletter.Filter{})
		if err == nil && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter from the advisory after 15 s (count %d, %v); router writes %d", n, err, faulty.calls.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	entries, _, err := store.List(context.Background(), deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List: %d entries, %v; want exactly 1", len(entries), err)
	}
	rec := entries[0].Record
	if rec.UUID != msg.UUID || string(rec.Payload) != "\x00payload" || rec.Metadata["x-kept"] != "yes" ||
		rec.Reason != deadletter.Exhausted || rec.Attempts != 2 || rec.OriginalTopic != topic || !strings.Contains(rec.LastError, "MaxDeliver 2") {
		t.Errorf("dead letter %+v", rec)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1 (the second delivery is past MaxAttempts)", n)
	}
	if n := faulty.calls.Load(); n != 2 {
		t.Errorf("router dead-letter writes %d, want 2 (one per delivery)", n)
	}
}
