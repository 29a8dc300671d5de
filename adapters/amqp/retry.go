package amqp

import (
	"context"
	"fmt"
	"log/slog"
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
//
// A delivery whose dead-letter history is not trusted (see trustedHistory: a foreign producer
// or another topology wrote it) takes the copy path for the first tier too, and never goes
// through the broker's dead-letter machinery, which RabbitMQ 3.10 runs on a client-set x-death:
// a forged count that is negative, not an integer or near 2^63, or an entry with another
// reason for the work queue, would buy extra attempts, crash the queue process, or make
// RabbitMQ see a dead-letter cycle and drop the message. The copy leaves the foreign x-death
// behind and keeps the typed headers and properties (see copyOf).
//
// With tracing on (telemetry wrote the attempt's span context into the metadata, under
// millrace.HeaderAttemptTracePrefix), the first tier takes the copy path too: a rejected
// delivery comes back with the headers it arrived with, so the next attempt's span could not
// link to this one. That is the cost of tracing: one confirmed publish per retry instead of a
// reject (the copy is at-least-once on classic queues, too, where the reject is not). Without
// a tracer nothing is written and retries reject as above. While the broker blocks the
// publishing connection (connection.blocked, a memory or disk alarm), such a traced retry
// rejects after all (logged at Warn once per blocked period): the copy could not be confirmed
// until the alarm clears. That loses the span link and, on classic queues, the copy's
// at-least-once: the reject goes through classic dead-lettering, which is at-most-once (a
// missing topic.retry queue, or one that refuses the message, drops it; see "Classic queues
// lose retries" in the package doc). On quorum queues (x-dead-letter-strategy at-least-once)
// only the link is lost. Copies the reject cannot replace (other
// tiers, untrusted histories) fail at once with ErrBlocked meanwhile, and their originals are
// requeued after Config.RequeueDelay.
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
	reject := tier == ts.reject
	if reject && d.trusted {
		if !traced(msg) {
			d.reject.Store(true)
			return millrace.NackOriginal, nil
		}
		if b := a.pubConn.blocked(); b != nil {
			if b.warned.CompareAndSwap(false, true) {
				a.cfg.Logger.WarnContext(ctx, "millrace amqp: the broker blocked the publishing connection; first-tier retries are rejected without their copy, so the next attempt's span does not link to the failed one until it is unblocked",
					slog.String("reason", b.reason), slog.String("queue", topic))
			}
			d.reject.Store(true)
			return millrace.NackOriginal, nil
		}
	}
	cp := message.NewMessage(msg.UUID, msg.Payload)
	cp.Metadata = maps.Clone(msg.Metadata)
	next := req.Attempt
	next.Number = req.Attempt.NextDelivery() // the millrace-attempt header counts deliveries, as x-death does
	next.OriginalTopic = topic
	next.OriginalKey = d.attempt.OriginalKey
	if next.FirstAttemptAt.IsZero() {
		next.FirstAttemptAt = req.FailedAt
	}
	if req.Err != nil {
		next.LastError = req.Err.Error()
	}
	millrace.SetRetryHeaders(cp.Metadata, next, req.FailedAt.Add(tier))
	pub, err := a.marshaler.copyOf(d.raw, topic, cp, false)
	if err != nil {
		return 0, err
	}
	if err := a.pubs.publishConfirmed(ctx, a.names(topic).dlx, tierKey(tier, reject), pub); err != nil {
		return 0, fmt.Errorf("amqp: publish retry of %s to the %s tier: %w", msg.UUID, tier, err)
	}
	return millrace.AckOriginal, nil
}

// traced reports whether msg carries the span context of its attempt (written by telemetry),
// which only a retry copy can carry on to the next attempt.
func traced(msg *message.Message) bool {
	return msg.Metadata.Get(millrace.HeaderAttemptTracePrefix+"traceparent") != ""
}
