package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// settle waits until topic has nothing waiting, in flight or scheduled for a retry.
func settle(a *memory.Adapter, topic string) {
	for a.Outstanding(topic) > 0 {
		time.Sleep(time.Millisecond)
	}
}

// A router on the in-process memory adapter, with 3 attempts 10 ms apart: one message
// succeeds, one fails once and succeeds on its retry, one fails every attempt and is
// dead-lettered with its payload and the failure context.
func Example() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(10 * time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), // the example prints its own lines
	})
	if err != nil {
		panic(err)
	}
	r.Handle("send-email", "emails", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		var err error
		switch payload := string(msg.Payload); {
		case payload == "flaky" && at.Number == 1:
			err = errors.New("smtp: timeout")
		case payload == "bounce":
			err = errors.New("smtp: 550 mailbox unavailable")
		}
		fmt.Printf("%s: attempt %d of %d (previous error %q): %v\n", msg.Payload, at.Number, at.MaxAttempts, at.LastError, err)
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()

	for _, payload := range []string{"ok", "flaky", "bounce"} {
		if err := a.Publish("emails", message.NewMessage(payload+"-id", []byte(payload))); err != nil {
			panic(err)
		}
		settle(a, "emails") // one message at a time, for a stable output
	}
	for _, m := range a.Peek(a.DeadLetterTopic("emails")) {
		rec, err := deadletter.FromMessage(m)
		if err != nil {
			panic(err)
		}
		fmt.Printf("dead letter %s: %s after %d attempts by %s: %s\n", rec.Payload, rec.Reason, rec.Attempts, rec.Handler, rec.LastError)
	}
	_ = r.Close()
	// Output:
	// ok: attempt 1 of 3 (previous error ""): <nil>
	// flaky: attempt 1 of 3 (previous error ""): smtp: timeout
	// flaky: attempt 2 of 3 (previous error "smtp: timeout"): <nil>
	// bounce: attempt 1 of 3 (previous error ""): smtp: 550 mailbox unavailable
	// bounce: attempt 2 of 3 (previous error "smtp: 550 mailbox unavailable"): smtp: 550 mailbox unavailable
	// bounce: attempt 3 of 3 (previous error "smtp: 550 mailbox unavailable"): smtp: 550 mailbox unavailable
	// dead letter bounce: exhausted after 3 attempts by send-email: smtp: 550 mailbox unavailable
}

// New validates the whole configuration before anything runs: here a policy whose delay the
// adapter cannot wait.
func ExampleNew() {
	a, err := memory.New(memory.Config{MaxDelay: time.Hour})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	_, err = router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(2 * time.Hour)}})
	fmt.Println(errors.Is(err, millrace.ErrPolicyExceedsAdapter))
	fmt.Println(err)
	// Output:
	// true
	// millrace: invalid configuration: RetryPolicy.Backoff = 2h0m0s: delay exceeds the memory adapter's maximum delay 1h0m0s
}

// Stack returns the millrace middleware in order, for a Watermill router built by hand: here a
// handler that panics on its first attempt is retried (Recover, then Retry) and succeeds.
func ExampleStack() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	stack, err := router.Stack(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(10 * time.Millisecond)}, Logger: quiet})
	if err != nil {
		panic(err)
	}
	wm, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	wm.AddMiddleware(stack...)
	wm.AddConsumerHandler("import", "rows", a.Subscriber(), func(msg *message.Message) error {
		at := millrace.AttemptFrom(msg)
		fmt.Printf("attempt %d, previous error %q\n", at.Number, at.LastError)
		if at.Number == 1 {
			panic("nil map")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = wm.Run(ctx) }()
	<-wm.Running()
	if err := a.Publish("rows", message.NewMessage("row-1", []byte("{}"))); err != nil {
		panic(err)
	}
	settle(a, "rows")
	_ = wm.Close()
	// Output:
	// attempt 1, previous error ""
	// attempt 2, previous error "panic: nil map"
}

// Config.OnRetry and Config.OnDeadLetter report every retry and every dead letter, for alerting
// and audit, once the adapter has written it: here one message fails once and succeeds, one
// fails every attempt and is dead-lettered.
func ExampleConfig_hooks() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(10 * time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRetry: func(_ context.Context, msg *message.Message, ev router.RetryEvent) {
			fmt.Printf("retry %s: attempt %d of %d failed (%v), next in %s\n",
				msg.UUID, ev.Attempt.Number, ev.Attempt.MaxAttempts, ev.Err, ev.Delay)
		},
		OnDeadLetter: func(_ context.Context, msg *message.Message, ev router.DeadLetterEvent) {
			fmt.Printf("dead letter %s: %s after %d attempts (%v)\n", msg.UUID, ev.Record.Reason, ev.Record.Attempts, ev.Err)
		},
	})
	if err != nil {
		panic(err)
	}
	r.Handle("charge", "payments", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		switch {
		case string(msg.Payload) == "flaky" && at.Number == 1:
			return errors.New("gateway timeout")
		case string(msg.Payload) == "declined":
			return errors.New("card declined")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for _, payload := range []string{"ok", "flaky", "declined"} {
		if err := a.Publish("payments", message.NewMessage(payload+"-id", []byte(payload))); err != nil {
			panic(err)
		}
		settle(a, "payments")
	}
	_ = r.Close()
	// Output:
	// retry flaky-id: attempt 1 of 3 failed (gateway timeout), next in 10ms
	// retry declined-id: attempt 1 of 3 failed (card declined), next in 10ms
	// retry declined-id: attempt 2 of 3 failed (card declined), next in 10ms
	// dead letter declined-id: exhausted after 3 attempts (card declined)
}

// Per-handler settings: the router's policy (3 attempts) is the default; the "audit" handler
// has its own (1 attempt, never retried), and "enrich" publishes what it returns, only on
// Success.
func ExampleRouter_Handle_perHandler() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	down := func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		fmt.Printf("%s: attempt %d of %d\n", msg.Payload, at.Number, at.MaxAttempts)
		return errors.New("down")
	}
	r.Handle("push", "push", down)
	r.Handle("audit", "audit", down, router.WithPolicy(millrace.RetryPolicy{MaxAttempts: 1}))
	r.HandleProducing("enrich", "orders", "orders.enriched", a,
		func(_ context.Context, msg *message.Message, _ millrace.Attempt) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage(msg.UUID, append(msg.Payload, " (enriched)"...))}, nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for _, topic := range []string{"push", "audit", "orders"} {
		if err := a.Publish(topic, message.NewMessage(topic+"-1", []byte(topic))); err != nil {
			panic(err)
		}
		settle(a, topic)
	}
	for _, m := range a.Peek("orders.enriched") {
		fmt.Printf("published: %s\n", m.Payload)
	}
	_ = r.Close()
	// Output:
	// push: attempt 1 of 3
	// push: attempt 2 of 3
	// push: attempt 3 of 3
	// audit: attempt 1 of 1
	// published: orders (enriched)
}
