package amqp_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/router"
)

// restartMsgs is how many messages the restart tests queue: more than any default prefetch.
const restartMsgs = 300

// restartCost is what the package documentation ("Shutdown") says a graceful stop of a
// subscription with the default Config costs at most: the deliveries prefetched beyond those
// handed to handlers, Prefetch (48) in all, each coming back flagged redelivered.
const restartCost = 32 + 16

// fillQueue provisions topic with policy and queues restartMsgs messages in it.
func fillQueue(ctx context.Context, t *testing.T, a *amqp.Adapter, topic string, policy millrace.RetryPolicy) {
	t.Helper()
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	msgs := make([]*message.Message, restartMsgs)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// startRouter runs a router with h on topic and returns its stop function, which returns once
// Run did.
func startRouter(t *testing.T, a *amqp.Adapter, topic string, policy millrace.RetryPolicy, h router.HandlerFunc) (stop func()) {
	t.Helper()
	r, err := router.New(router.Config{
		Adapter: a, Policy: policy, CloseTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("restart", topic, h)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30s")
	}
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			_ = r.Close()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestGracefulStopCostsAtMostPrefetchAttempts: a subscription that handled one message and was
// stopped gives back what amqp091 had buffered for it, flagged redelivered, and every such
// delivery arrives as attempt 2 (classic: the redelivered flag; quorum: x-delivery-count) on
// the next subscription. With the default Config that is at most Prefetch (48). On the old
// default (Prefetch 256) 256 of the 299 came back as attempt 2.
func TestGracefulStopCostsAtMostPrefetchAttempts(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("restart")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
		fillQueue(ctx, t, a, topic, policy)

		subCtx, cancel := context.WithCancel(ctx)
		msgs, err := a.Subscriber().Subscribe(subCtx, topic)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			m.Ack()
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery")
		}
		time.Sleep(500 * time.Millisecond) // the ack goes, the broker tops the prefetch up
		cancel()
		for m := range msgs { // one handed out as the stop came: back to the queue
			m.Nack()
		}

		b := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		var rec recorder
		var calls atomic.Int64
		startRouter(t, b, topic, policy, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
			rec.add(msg, at)
			calls.Add(1)
			return nil
		})
		waitFor(t, 60*time.Second, "the other 299 messages", func() bool { return calls.Load() >= restartMsgs-1 })
		again := 0
		for _, c := range rec.snapshot() {
			if c.attempt.Number >= 2 {
				again++
			}
		}
		t.Logf("%d of %d messages came back as attempt 2 or later after the stop", again, restartMsgs-1)
		if again > restartCost {
			t.Errorf("%d of %d messages came back as attempt 2 or later after a graceful stop; the default Prefetch bounds it at %d",
				again, restartMsgs-1, restartCost)
		}
	})
}

// TestRestartDeadLettersOnlyThePrefetchBeyondTheWindow: a router with MaxAttempts 1 and a
// slow handler, stopped while its Window of handlers runs, finishes those; what the broker had
// sent beyond them comes back flagged redelivered, past MaxAttempts, and the restarted router
// dead-letters it without calling the handler. That is at most Prefetch - Window (16) with the
// defaults; with the old default Prefetch of 256, 224 were.
func TestRestartDeadLettersOnlyThePrefetchBeyondTheWindow(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("restart.dlq")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		policy := millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}
		fillQueue(ctx, t, a, topic, policy)
		dlq := watchDLQ(t, a, topic)

		var started, handled atomic.Int64
		stop := startRouter(t, a, topic, policy, func(context.Context, *message.Message, millrace.Attempt) error {
			started.Add(1)
			time.Sleep(time.Second)
			handled.Add(1)
			return nil
		})
		waitFor(t, 20*time.Second, "a Window of handlers running", func() bool { return started.Load() >= amqp.DefaultWindow })
		stop()
		if n := handled.Load(); n != started.Load() {
			t.Fatalf("%d handlers finished of %d started: the stop did not wait for them", n, started.Load())
		}

		b := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		startRouter(t, b, topic, policy, func(context.Context, *message.Message, millrace.Attempt) error {
			handled.Add(1)
			return nil
		})
		waitFor(t, 60*time.Second, "every message handled or dead-lettered", func() bool {
			return handled.Load()+int64(len(dlq())) >= restartMsgs
		})
		time.Sleep(300 * time.Millisecond)
		dead := len(dlq())
		t.Logf("%d handled, %d dead-lettered without a handler call after the restart", handled.Load(), dead)
		if bound := restartCost - amqp.DefaultWindow; dead > bound {
			t.Errorf("%d messages dead-lettered by a restart with MaxAttempts 1; the default Prefetch - Window bounds it at %d", dead, bound)
		}
	})
}
