package router_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/router"
)

// keepsContexts is the memory adapter whose messages' contexts outlive the subscription, as
// the broker adapters' do (the memory subscriber cancels them when it closes, which would end
// the wait by itself).
type keepsContexts struct{ *memory.Adapter }

func (k keepsContexts) Subscriber() message.Subscriber { return contextKeeper{k.Adapter.Subscriber()} }

type contextKeeper struct{ message.Subscriber }

func (c contextKeeper) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := c.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			m.SetContext(context.WithoutCancel(m.Context()))
			out <- m
		}
	}()
	return out, nil
}

// heldByBreaker runs a router whose breaker (Threshold 1, no probe within the test) has opened
// on message "opens" and holds message "held", on the memory adapter with message contexts that
// outlive the subscription, and a CloseTimeout of a minute. It returns the adapter, the router,
// the handler's call count, cancel for Run's ctx, and Run's result.
func heldByBreaker(t *testing.T) (*memory.Adapter, *router.Router, *atomic.Int64, context.CancelFunc, <-chan error) {
	t.Helper()
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{
		Adapter: keepsContexts{a}, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Hour)},
		Breaker:      &middleware.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour},
		CloseTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := new(atomic.Int64)
	r.Handle("h", "t", func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("dependency down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Running()
	if err := a.Publish("t", message.NewMessage("opens", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first call", func() bool { return calls.Load() == 1 })
	if err := a.Publish("t", message.NewMessage("held", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // "held" reaches the open breaker and waits there
	return a, r, calls, cancel, done
}

// TestCloseReleasesWhatTheBreakerHolds: a message waiting in an open breaker is let through
// when the router closes, instead of holding Close up to its CloseTimeout (a minute here); it
// is handled once (its failure schedules a retry), never handed back into a redelivery loop
// that would dead-letter it unhandled.
func TestCloseReleasesWhatTheBreakerHolds(t *testing.T) {
	a, r, calls, _, done := heldByBreaker(t)
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for the message the breaker holds")
	}
	<-done
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler calls %d, want 2: the held message is handled once at Close", n)
	}
	b, _ := a.Backlog(context.Background(), "t")
	if b.DeadLetters != 0 || b.RetriesWaiting != 2 {
		t.Fatalf("backlog %+v, want both messages waiting for their retry and no dead letter", b)
	}
}

// TestCancelledRunReleasesWhatTheBreakerHolds: stopping the router by cancelling Run's ctx
// (signal.NotifyContext, the quick start) ends the holding as Close does: Run returns well
// before its CloseTimeout (a minute) and the held message is handled once.
func TestCancelledRunReleasesWhatTheBreakerHolds(t *testing.T) {
	_, _, calls, cancel, done := heldByBreaker(t)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits for the message the breaker holds")
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler calls %d, want 2: the held message is handled once at shutdown", n)
	}
}

// TestBreakerWithImmediateAttempts (the review's H2 and H3): a policy with immediate attempts
// and a Budget. A message that waits in the open breaker longer than the Budget is not handed
// back by the delivery's deadline (a delivery lost each time: it was dead-lettered unhandled,
// "past MaxAttempts", in 0.4 s); it is handled when the breaker lets it through. And a delivery
// whose immediate attempt meets the open breaker ends with the handler's own error, not the
// breaker's.
func TestBreakerWithImmediateAttempts(t *testing.T) {
	a := newMemory(t, memory.Config{})
	var dead []router.DeadLetterEvent
	var retries []router.RetryEvent
	var mu sync.Mutex
	r, err := router.New(router.Config{
		Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Immediate: 1, Backoff: millrace.Fixed(time.Hour)},
		Budget:  200 * time.Millisecond,
		Breaker: &middleware.BreakerConfig{Threshold: 1, ProbeInterval: 600 * time.Millisecond},
		OnDeadLetter: func(_ context.Context, _ *message.Message, ev router.DeadLetterEvent) {
			mu.Lock()
			dead = append(dead, ev)
			mu.Unlock()
		},
		OnRetry: func(_ context.Context, msg *message.Message, ev router.RetryEvent) {
			if msg.UUID == "opens" {
				mu.Lock()
				retries = append(retries, ev)
				mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var heldCalls, openerCalls atomic.Int64
	r.Handle("h", "t", func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		if msg.UUID == "opens" {
			openerCalls.Add(1)
			return errors.New("db: connection refused")
		}
		heldCalls.Add(1)
		return nil
	})
	runRouter(t, r)
	if err := a.Publish("t", message.NewMessage("opens", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the breaker to open", func() bool { return openerCalls.Load() == 1 })
	if err := a.Publish("t", message.NewMessage("held", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held message to be handled", func() bool { return heldCalls.Load() == 1 })
	if n := openerCalls.Load(); n != 1 {
		t.Errorf("the opener was called %d times, want 1: its immediate attempt meets the open breaker and is not made", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range dead {
		t.Errorf("dead letter %+v: nothing may be dead-lettered", ev.Record)
	}
	if len(retries) != 1 || retries[0].Attempt.Number != 1 || retries[0].Err == nil || retries[0].Err.Error() != "db: connection refused" {
		t.Errorf("the opener's retries %+v, want one, after attempt 1, with the handler's error", retries)
	}
}
