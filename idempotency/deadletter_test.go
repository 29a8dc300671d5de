package idempotency_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/router"
)

// flakyDeadLetters fails the first dead-letter write, as a DLQ outage would.
type flakyDeadLetters struct {
	*memory.Adapter
	mu    sync.Mutex
	calls int
}

func (a *flakyDeadLetters) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	a.mu.Lock()
	a.calls++
	first := a.calls == 1
	a.mu.Unlock()
	if first {
		return errors.New("dead-letter destination unavailable")
	}
	return a.Adapter.DeadLetter(ctx, msg, rec)
}

// TestFailedDeadLetterIsNotAckedAsDuplicate: a message that is about to be dead-lettered
// (Malformed, or a Discard with DeadLetterDiscards) must not be marked done first; otherwise a
// failed dead-letter write brings it back as a "duplicate", it is acked and the dead letter is
// never written.
func TestFailedDeadLetterIsNotAckedAsDuplicate(t *testing.T) {
	cases := []struct {
		name       string
		handlerErr error
		dlDiscards bool
		reason     deadletter.Reason
	}{
		{"malformed", millrace.Malformed(errors.New("invalid JSON")), false, deadletter.Malformed},
		{"discard with DeadLetterDiscards", millrace.Discard(errors.New("expired")), true, deadletter.Discarded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem, err := memory.New(memory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			adapter := &flakyDeadLetters{Adapter: mem}
			policy := fixedPolicy(5, time.Second)
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			guard := mustNew(t, idempotency.Config{
				Store: newMemory(t, idempotency.StoreOptions{}), Policy: policy, LeaseTTL: 2 * time.Second,
				DeadLetterDiscards: c.dlDiscards, Logger: quiet,
			})
			r, err := router.New(router.Config{Adapter: adapter, Policy: policy, DeadLetterDiscards: c.dlDiscards, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			r.HandleMessage("h", "t", func(msg *message.Message) error {
				_, err := guard.Wrap(func(*message.Message) ([]*message.Message, error) {
					calls.Add(1)
					return nil, c.handlerErr
				})(msg)
				return err
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = r.Run(ctx) }()
			<-r.Running()
			dlq, err := mem.Subscriber().Subscribe(ctx, mem.DeadLetterTopic("t"))
			if err != nil {
				t.Fatal(err)
			}
			if err := mem.Publish("t", message.NewMessage("m-1", []byte("{not json"))); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-dlq:
				rec, err := deadletter.FromMessage(got)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Reason != c.reason || string(rec.Payload) != "{not json" {
					t.Fatalf("dead letter %+v", rec)
				}
				got.Ack()
			case <-time.After(10 * time.Second):
				t.Fatalf("no dead letter after the first write failed (handler calls %d, duplicates %d): the redelivery was acked as a duplicate",
					calls.Load(), guard.Stats().Duplicates)
			}
			if d := guard.Stats().Duplicates; d != 0 {
				t.Fatalf("%d duplicates: the redelivery after the failed dead-letter write was taken for one", d)
			}
			_ = r.Close()
		})
	}
}

// TestClassifierDecidesCompletion: with the router's Classifier, an unmarked error the
// classifier calls Discard finishes the message, so a broker duplicate does not run it again.
func TestClassifierDecidesCompletion(t *testing.T) {
	m := mustNew(t, idempotency.Config{
		Store: newMemory(t, idempotency.StoreOptions{}), Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second,
		Classifier: func(error) millrace.Outcome { return millrace.OutcomeDiscard },
	})
	var calls atomic.Int32
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, errors.New("provider 400: invalid token")
	})
	_ = deliver(h, "m-400", 1, 5)
	if err := deliver(h, "m-400", 2, 5); err != nil {
		t.Fatalf("duplicate of a classified Discard = %v, want nil", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
}

// lostLeaseStore loses every lease at Complete, as a takeover after expiry would.
type lostLeaseStore struct{ idempotency.Store }

func (lostLeaseStore) Complete(context.Context, string, string, time.Duration) error {
	return idempotency.ErrLeaseLost
}

// TestCompleteFailureOnLastAttemptKeepsResult: a handled message whose done marker cannot be
// written is retried, except on its last attempt, where retrying would dead-letter work that
// was done.
func TestCompleteFailureOnLastAttemptKeepsResult(t *testing.T) {
	m := mustNew(t, idempotency.Config{
		Store: lostLeaseStore{newMemory(t, idempotency.StoreOptions{})}, Policy: fixedPolicy(3, time.Second), LeaseTTL: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	if err := deliver(h, "m-a", 1, 3); !errors.Is(err, idempotency.ErrLeaseLost) || outcome(err) != millrace.OutcomeRetry {
		t.Fatalf("attempt 1 of 3 = %v, want a Retry wrapping ErrLeaseLost", err)
	}
	if err := deliver(h, "m-b", 3, 3); err != nil {
		t.Fatalf("attempt 3 of 3 = %v, want the handler's nil", err)
	}
}
