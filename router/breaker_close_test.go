package router_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/router"
)

// TestCloseHandsBackWhatTheBreakerHolds: a message waiting in an open breaker is handed back
// (never handled, left with the broker) when the router closes, instead of holding Close up
// to its CloseTimeout (a minute here).
func TestCloseHandsBackWhatTheBreakerHolds(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{
		Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Hour)},
		Breaker:      &middleware.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour},
		CloseTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	r.Handle("h", "t", func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("dependency down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler calls %d, want 1: the held message must not be handled", n)
	}
	if n := a.Outstanding("t"); n < 2 {
		t.Fatalf("outstanding %d, want both messages still with the broker (a retry and the handed-back one)", n)
	}
}
