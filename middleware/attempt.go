package middleware

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// AttemptDecoder reads the Attempt of a received message; every millrace.Adapter is one.
type AttemptDecoder interface {
	DecodeAttempt(msg *message.Message) millrace.Attempt
}

// Attempt decodes each delivery's Attempt, stamps it with the policy's MaxAttempts and stores
// it in the message context for millrace.AttemptFrom. The adapter's number counts deliveries;
// Attempt keeps it as Attempt.Delivery and sets Number to the delivery's first attempt
// (policy.FirstAttemptOf: the same number when policy.Immediate is 0). A FirstAttemptAt in the
// future (a skewed broker clock, a forged header) is taken as now, and a first delivery that
// carries none gets now. A delivery the adapter marked undecodable becomes Malformed, and one
// that arrives past MaxAttempts becomes exhausted; in both cases the handler is not called.
// Install it inside Poison, which dead-letters those two cases; the Attempt stays in the
// message context for Poison to read.
func Attempt(dec AttemptDecoder, policy millrace.RetryPolicy) message.HandlerMiddleware {
	maxAttempts := policy.MaxAttempts
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			a := dec.DecodeAttempt(msg)
			a.Delivery = max(a.Number, 1)
			a.Number = policy.FirstAttemptOf(a.Delivery)
			a.MaxAttempts = maxAttempts
			if a.OriginalTopic == "" {
				a.OriginalTopic = message.SubscribeTopicFromCtx(ctx)
			}
			if now := time.Now(); a.FirstAttemptAt.After(now) || (a.FirstAttemptAt.IsZero() && a.Delivery == 1) {
				a.FirstAttemptAt = now
			}
			msg.SetContext(millrace.WithAttempt(ctx, &a))
			if err := millrace.DecodeErrorFrom(ctx); err != nil {
				return nil, millrace.Malformed(err)
			}
			if maxAttempts > 0 && a.Number > maxAttempts {
				return nil, pastLimit(a.Number, maxAttempts, policy.Immediate, a.LastError)
			}
			return h(msg)
		}
	}
}

// pastLimit is the failure of a delivery that arrived as attempt number, past maxAttempts: its
// dead-letter write failed after the last attempt, or its retry state claims more attempts than
// the policy allows (a forged or foreign history). The handler is not called. The record states
// the attempts the retry state records before this delivery (number-1, not the policy's count,
// which would claim handler calls that may never have happened), except that the previous
// delivery, when it was the last one the policy allows (its immediate attempts reach
// MaxAttempts), ended at MaxAttempts, not at the end of its range; and, where the broker
// carried none, an error text that says the handler did not run on this delivery.
func pastLimit(number, maxAttempts, immediate int, lastError string) error {
	last := errors.New(lastError)
	if lastError == "" {
		last = fmt.Errorf("millrace: delivered as attempt %d, past MaxAttempts %d: the handler was not called on this delivery", number, maxAttempts)
	}
	before := number - 1
	if before > maxAttempts && before-immediate <= maxAttempts {
		before = maxAttempts
	}
	return &millrace.ExhaustedError{Attempts: before, Err: last}
}
