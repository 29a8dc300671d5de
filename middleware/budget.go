package middleware

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Budget gives the handler a context deadline of d (the field report's processing budget) and
// restores the message's own context afterwards, so the outer middleware can still publish
// retries and dead letters after a timed-out handler. A d <= 0 adds nothing.
func Budget(d time.Duration) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		if d <= 0 {
			return h
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			parent := msg.Context()
			ctx, cancel := context.WithTimeout(parent, d)
			msg.SetContext(ctx)
			defer func() {
				cancel()
				msg.SetContext(parent)
			}()
			return h(msg)
		}
	}
}
