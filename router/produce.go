package router

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// ProducingHandlerFunc handles one message and returns the messages to publish as its result.
// Its error carries the outcome as HandlerFunc's does; the messages are published only on
// Success.
type ProducingHandlerFunc func(ctx context.Context, msg *message.Message, attempt millrace.Attempt) ([]*message.Message, error)

// HandleProducing registers h under name for messages on topic; the messages h returns on
// Success are published to publishTopic through pub before the message is acknowledged.
//
// The publish is part of the attempt, inside the stack: a failed publish is a Retry outcome
// (with the publisher's error), retried and dead-lettered under the handler's policy like any
// other, and the message is never acknowledged when its output was not published. A Retry,
// Discard or Malformed outcome publishes nothing. With an idempotency guard the publish runs
// inside the lease, so a message whose lease is done never publishes again; a crash after the
// publish and before the lease completes publishes again on the next delivery (at least once:
// give consumers of publishTopic an idempotency key, e.g. keep the message UUIDs stable).
// Watermill's own publishing after the handler is not used: it would nack the message on a
// publish failure, outside millrace's retry policy. The published messages carry the handler's
// context (its Budget deadline and trace); a publisher that ignores message contexts is not
// bounded by the Budget.
func (r *Router) HandleProducing(name, topic, publishTopic string, pub message.Publisher, h ProducingHandlerFunc, opts ...HandlerOption) {
	r.HandleMessage(name, topic, func(msg *message.Message) error {
		out, err := h(msg.Context(), msg, millrace.AttemptFrom(msg))
		if err != nil || len(out) == 0 {
			return err
		}
		// The publish is part of the attempt: it runs under the handler's context (its Budget
		// deadline, its trace), which a publisher that honours message contexts keeps to.
		for _, m := range out {
			m.SetContext(msg.Context())
		}
		if perr := pub.Publish(publishTopic, out...); perr != nil {
			return millrace.Retry(fmt.Errorf("millrace router: publish %d message(s) to %q: %w", len(out), publishTopic, perr))
		}
		return nil
	}, opts...)
}
