package amqp

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// delivery is the native state of one received message, kept in its context.
type delivery struct {
	// attempt is decoded once, from the headers as they arrived (the handler may change
	// metadata, not this).
	attempt millrace.Attempt
	// trusted reports that the delivery may be rejected into the broker's dead-letter path: it
	// came back from one of millrace's retry tiers (ownHistory), or it carries no dead-letter
	// history and no retry header at all (a first delivery). Any other delivery, whose history
	// or millrace-* headers a producer wrote, is retried through a confirmed fresh copy, which
	// RabbitMQ's dead-letter arithmetic never sees and which keeps those headers aside for the
	// dead letter (see copyOf).
	trusted bool
	// raw is the delivery as it arrived: retry copies and dead letters keep its typed headers
	// and properties.
	raw amqp091.Delivery
	// reject is set by ScheduleRetry: the subscriber then answers the router's nack with
	// basic.reject(requeue=false), so RabbitMQ dead-letters the message into the first-delay
	// tier and counts it in x-death. Any other nack requeues the message.
	reject atomic.Bool
}

type deliveryKey struct{}

func deliveryFrom(ctx context.Context) *delivery {
	d, _ := ctx.Value(deliveryKey{}).(*delivery)
	return d
}

// retryHeaders are the millrace headers decodeDelivery reads.
var retryHeaders = []string{millrace.HeaderAttempt, millrace.HeaderFirstAttemptAt, millrace.HeaderLastError}

// decodeDelivery computes the Attempt of a delivery from queue.
//
// Number = base + rejections + returns, summed with saturation (never below 1, never wrapping),
// where
//   - base is the millrace-attempt header of a copy millrace republished to a retry tier of
//     another delay (x-death restarts with a new copy), else 1. It is read only from a delivery
//     that came back from one of the topic's retry tiers (ownHistory): on any other delivery a
//     millrace-* header is the producer's content, not retry state;
//   - rejections is the sum of the positive integer x-death counts for this work queue with
//     reason "rejected" or "delivery_limit": the trips through the first-delay tier (other
//     counts, which no broker writes, add nothing);
//   - returns is x-delivery-count on quorum queues: redeliveries after a crash or requeue. On
//     classic queues, which keep no delivery count, it is 1 for a delivery flagged redelivered
//     and 0 otherwise: a redelivery after a failed dead-letter or retry write then arrives past
//     the attempt it failed on, so the router writes it again without calling the handler
//     (rather than calling it again every RequeueDelay while the target is unavailable). The
//     price: a crash redelivery also costs an attempt, as on quorum queues and SQS, and
//     however often a classic queue redelivers a message it counts once.
//
// NativeCount is 1 + rejections + returns: what the broker counted for this copy.
//
// It also reports whether the delivery may be rejected into the broker's dead-letter path (see
// delivery.trusted).
func decodeDelivery(queue string, qt QueueType, d amqp091.Delivery) (millrace.Attempt, bool) {
	var md message.Metadata // only a millrace republish carries these headers
	n := readNative(d.Headers, queue)
	own := n.own
	for _, k := range retryHeaders {
		if !own {
			// Not back from one of millrace's retry tiers: a millrace-* header is the
			// producer's content, never retry state.
			break
		}
		if v, ok := d.Headers[k].(string); ok {
			if md == nil {
				md = make(message.Metadata, len(retryHeaders))
			}
			md[k] = v
		}
	}
	a := millrace.AttemptFromHeaders(md)
	if qt != Quorum {
		// Classic queues set no x-delivery-count (one in the headers came from a publisher). The
		// redelivered flag is per queue entry: a trip through a retry tier starts a new entry
		// without it, so this counts only returns since the last rejection.
		n.returns = 0
		if d.Redelivered {
			n.returns = 1
		}
	}
	counted := millrace.SaturatingAdd(n.rejections, n.returns)
	a.Number = millrace.SaturatingAdd(max(a.Number, 1), counted)
	a.NativeCount = millrace.SaturatingAdd(1, counted)
	if a.Source != millrace.SourceHeader {
		a.Source = millrace.SourceNative
	}
	if counted > 0 {
		// The header's error text belongs to the republish; later failures are not in it.
		a.LastError = ""
	}
	if a.FirstAttemptAt.IsZero() {
		a.FirstAttemptAt = n.firstFailure
	}
	a.OriginalTopic = queue
	a.OriginalKey = originalKeyFor(d, n, own)
	a.Broker = BrokerName
	a.NativeID = d.MessageId
	if a.NativeID == "" {
		a.NativeID = queue + "#" + strconv.FormatUint(d.DeliveryTag, 10)
	}
	return a, n.trusted && (own || !carriesState(d.Headers))
}

// carriesState reports whether headers hold any dead-letter history (x-death, ...) or any
// header named like one of millrace's retry headers.
func carriesState(headers amqp091.Table) bool {
	for k := range headers {
		if saved(k) {
			return true
		}
	}
	return false
}

// DecodeAttempt returns the Attempt the subscriber decoded when msg arrived. For a message
// that did not come through this adapter it reads millrace's headers from the metadata.
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	if d := deliveryFrom(msg.Context()); d != nil {
		return d.attempt
	}
	at := millrace.AttemptFromHeaders(msg.Metadata)
	at.Broker = BrokerName
	if at.OriginalKey == "" {
		at.OriginalKey = msg.Metadata.Get(MetadataRoutingKey)
	}
	return at
}
