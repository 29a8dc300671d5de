package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/middleware"
)

// broker is an adapter stand-in that decodes the delivery number it is set to, as every
// adapter counts deliveries, and prints retries and dead letters.
type broker struct{ delivery int }

func (b *broker) DecodeAttempt(*message.Message) millrace.Attempt {
	return millrace.Attempt{Number: b.delivery, OriginalTopic: "orders"}
}

func (b *broker) ScheduleRetry(_ context.Context, _ *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	fmt.Printf("  retry after attempt %d: delivery %d in %s\n", req.Attempt.Number, req.Attempt.NextDelivery(), req.Delay)
	return millrace.AckOriginal, nil
}

func (b *broker) DeadLetter(_ context.Context, _ *message.Message, rec deadletter.Record) error {
	fmt.Printf("  dead letter: %s after %d attempts\n", rec.Reason, rec.Attempts)
	return nil
}

// With Immediate 1 each delivery makes two attempts before a delayed retry: the attempt
// number comes from the broker's delivery count, and the Backoff counts delayed retries.
func ExampleRetry_immediate() {
	policy := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 1, Backoff: millrace.Delays{time.Second, time.Minute}}
	b := &broker{}
	stack := []message.HandlerMiddleware{
		middleware.Poison(b, middleware.PoisonConfig{Logger: quiet}),
		middleware.Attempt(b, policy),
		middleware.Retry(b, middleware.RetryConfig{Policy: policy, Budget: 10 * time.Second, Logger: quiet}),
		middleware.Classify(nil),
		middleware.Budget(10 * time.Second),
	}
	h := func(msg *message.Message) ([]*message.Message, error) {
		a := millrace.AttemptFrom(msg)
		fmt.Printf("  attempt %d of delivery %d\n", a.Number, a.Delivery)
		return nil, errors.New("connection reset")
	}
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i](h)
	}
	for b.delivery = 1; b.delivery <= 3; b.delivery++ {
		fmt.Printf("delivery %d:\n", b.delivery)
		if _, err := h(message.NewMessage("m-1", nil)); err != nil {
			fmt.Println("  error:", err)
		}
	}
	// Output:
	// delivery 1:
	//   attempt 1 of delivery 1
	//   attempt 2 of delivery 1
	//   retry after attempt 2: delivery 2 in 1s
	// delivery 2:
	//   attempt 3 of delivery 2
	//   attempt 4 of delivery 2
	//   retry after attempt 4: delivery 3 in 1m0s
	// delivery 3:
	//   attempt 5 of delivery 3
	//   dead letter: exhausted after 5 attempts
}
