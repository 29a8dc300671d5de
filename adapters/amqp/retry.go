package amqp

import (
	"context"
	"fmt"
	"maps"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// ScheduleRetry sends msg to the retry tier for req.Delay (the shortest tier not shorter than
// it, or the longest).
//
// For the policy's first delay (with a Fixed backoff: every retry) it returns NackOriginal: the
// subscriber rejects the delivery without requeue, RabbitMQ dead-letters it into topic.retry,
// counts it in x-death, and the TTL brings it back to the work queue. On classic queues that
// dead-lettering is at-most-once (a missing topic.retry drops the message); quorum queues use
// the at-least-once strategy. See the package documentation.
//
// For any other tier, RabbitMQ's x-dead-letter-routing-key (one per queue) cannot choose it, so
// a copy is published to the tier with publisher confirms and AckOriginal is returned. The copy
// carries the next attempt number and the original routing key in millrace headers, because
// x-death starts again on a new copy (and RabbitMQ 4.x ignores a client-set x-death).
func (a *Adapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	d := deliveryFrom(msg.Context())
	if d == nil {
		return 0, ErrForeignMessage
	}
	topic := d.attempt.OriginalTopic
	a.mu.Lock()
	ts, ok := a.tiers[topic]
	a.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrNotProvisioned, topic)
	}
	tier := ts.pick(req.Delay)
	if tier == ts.reject {
		d.reject.Store(true)
		return millrace.NackOriginal, nil
	}
	cp := message.NewMessage(msg.UUID, msg.Payload)
	cp.Metadata = maps.Clone(msg.Metadata)
	next := req.Attempt
	next.Number = req.Attempt.Number + 1
	next.OriginalTopic = topic
	next.OriginalKey = d.attempt.OriginalKey
	if next.FirstAttemptAt.IsZero() {
		next.FirstAttemptAt = req.FailedAt
	}
	if req.Err != nil {
		next.LastError = req.Err.Error()
	}
	millrace.SetRetryHeaders(cp.Metadata, next, req.FailedAt.Add(tier))
	pub, err := a.marshaler.Marshal(cp)
	if err != nil {
		return 0, err
	}
	if err := a.pubs.publishConfirmed(ctx, a.names(topic).dlx, tierKey(tier, false), pub); err != nil {
		return 0, fmt.Errorf("amqp: publish retry of %s to the %s tier: %w", msg.UUID, tier, err)
	}
	return millrace.AckOriginal, nil
}
