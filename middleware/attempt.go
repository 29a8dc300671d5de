package middleware

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// AttemptDecoder reads the Attempt of a received message; every millrace.Adapter is one.
type AttemptDecoder interface {
	DecodeAttempt(msg *message.Message) millrace.Attempt
}

// Attempt decodes each delivery's Attempt, stamps it with the policy's MaxAttempts and stores
// it in the message context for millrace.AttemptFrom. A delivery the adapter marked undecodable
// becomes Malformed, and one that arrives past MaxAttempts becomes exhausted; in both cases the
// handler is not called. Install it inside Poison, which dead-letters those two cases; the
// Attempt stays in the message context for Poison to read.
func Attempt(dec AttemptDecoder, policy millrace.RetryPolicy) message.HandlerMiddleware {
	maxAttempts := policy.MaxAttempts
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			a := dec.DecodeAttempt(msg)
			a.Number = max(a.Number, 1)
			a.MaxAttempts = maxAttempts
			if a.OriginalTopic == "" {
				a.OriginalTopic = message.SubscribeTopicFromCtx(ctx)
			}
			msg.SetContext(millrace.WithAttempt(ctx, &a))
			if err := millrace.DecodeErrorFrom(ctx); err != nil {
				return nil, millrace.Malformed(err)
			}
			if maxAttempts > 0 && a.Number > maxAttempts {
				// Delivered again after its last attempt (its dead-letter write failed, or a
				// header claims more): the handler has had its MaxAttempts calls. Record the
				// policy's count and, where the broker carried it, the last real error.
				var last error
				if a.LastError != "" {
					last = errors.New(a.LastError)
				}
				return nil, &millrace.ExhaustedError{Attempts: maxAttempts, Err: last}
			}
			return h(msg)
		}
	}
}
