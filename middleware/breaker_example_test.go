package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/middleware"
	"github.com/millrace/millrace/router"
)

// The outage breaker on the memory adapter: two failures in a row open it, the third message
// waits in it without using an attempt, and once the dependency is back the probe succeeds,
// the breaker closes and the first two messages succeed on their retries.
func ExampleBreaker() {
	a, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	var down atomic.Bool
	down.Store(true)
	var retried sync.Map
	r, err := router.New(router.Config{
		Adapter: a,
		Policy:  millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(20 * time.Millisecond)},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), // the example prints its own lines
		Breaker: &middleware.BreakerConfig{
			Threshold:     2,
			ProbeInterval: 50 * time.Millisecond,
			OnStateChange: func(_ context.Context, ev middleware.BreakerEvent) {
				fmt.Printf("breaker of %s: %s -> %s (%d consecutive failures)\n", ev.Handler, ev.From, ev.To, ev.Failures)
				if ev.To == middleware.BreakerOpen {
					down.Store(false) // the dependency comes back while the breaker is open
				}
			},
		},
	})
	if err != nil {
		panic(err)
	}
	r.Handle("push", "pushes", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if down.Load() {
			err := errors.New("push provider: 503")
			fmt.Printf("%s: attempt %d: %v\n", msg.Payload, at.Number, err)
			return err
		}
		if at.Number == 1 {
			fmt.Printf("%s: attempt %d: ok\n", msg.Payload, at.Number)
		} else {
			retried.Store(string(msg.Payload), at.Number) // the retries' order varies: printed below
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	for _, p := range []string{"m1", "m2", "m3"} {
		if err := a.Publish("pushes", message.NewMessage(p, []byte(p))); err != nil {
			panic(err)
		}
	}
	for a.Outstanding("pushes") > 0 {
		time.Sleep(time.Millisecond)
	}
	_ = r.Close()
	for _, p := range []string{"m1", "m2"} {
		n, _ := retried.Load(p)
		fmt.Printf("%s: attempt %d: ok\n", p, n)
	}
	// Output:
	// m1: attempt 1: push provider: 503
	// m2: attempt 1: push provider: 503
	// breaker of push: closed -> open (2 consecutive failures)
	// breaker of push: open -> half-open (2 consecutive failures)
	// m3: attempt 1: ok
	// breaker of push: half-open -> closed (0 consecutive failures)
	// m1: attempt 2: ok
	// m2: attempt 2: ok
}
