package amqp_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/router"
)

// TestRouterCloseLetsInFlightHandlerFinish: Watermill closes the subscriber as soon as the
// router starts closing. A handler still running then keeps an uncancelled context, its
// success is acked within the router's CloseTimeout, and the message is not redelivered.
func TestRouterCloseLetsInFlightHandlerFinish(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("drain")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		r, err := router.New(router.Config{
			Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)},
			CloseTimeout: 10 * time.Second,
			Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		ctxErr := make(chan error, 1)
		var rec recorder
		r.Handle("drain", topic, func(hctx context.Context, msg *message.Message, at millrace.Attempt) error {
			rec.add(msg, at)
			started <- struct{}{}
			<-release
			ctxErr <- hctx.Err()
			return nil
		})
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		select {
		case <-r.Running():
		case err := <-done:
			t.Fatalf("router stopped: %v", err)
		}
		publishKey(t, a, topic, topic, "payload")
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("handler never started")
		}
		closed := make(chan error, 1)
		go func() { closed <- r.Close() }()
		time.Sleep(300 * time.Millisecond) // the router is closing, the subscriber closed
		close(release)
		if err := <-ctxErr; err != nil {
			t.Errorf("handler context cancelled while the router was closing: %v", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("router.Close: %v", err)
		}
		cancel()
		<-done
		if n := queueDepth(t, topic); n != 0 {
			t.Errorf("work queue holds %d messages after a successful handler: it was requeued", n)
		}
		if n := len(rec.snapshot()); n != 1 {
			t.Errorf("handler called %d times, want 1", n)
		}
	})
}
