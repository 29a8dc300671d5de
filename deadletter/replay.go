package deadletter

import (
	"context"
	"errors"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// History says what a replayed message keeps of its failure history.
type History uint8

const (
	// KeepHistory re-publishes the message with its millrace attempt headers (millrace-attempt,
	// millrace-first-attempt-at, ...) as they were when it was dead-lettered, plus the record
	// keys (millrace-dlq-*), so the handler can see it failed before. Adapters take retry state
	// only from their own retry path (a Kafka retry topic, a RabbitMQ retry tier, the memory
	// adapter's own copies), never from a published message's headers, so a replayed message
	// starts again at attempt 1 on every adapter; the headers are information for the handler.
	// A record with Native content is re-published exactly as it arrived whatever History says.
	KeepHistory History = iota + 1
	// ResetHistory re-publishes the message without any millrace-* key: it starts again at
	// attempt 1 with the full retry budget, as if it were published for the first time.
	ResetHistory
)

// String returns "keep" or "reset".
func (h History) String() string {
	switch h {
	case KeepHistory:
		return "keep"
	case ResetHistory:
		return "reset"
	}
	return "unset"
}

// HistoryPrefix starts every metadata key ResetHistory removes: the attempt headers of the root
// package (millrace-attempt, ...) and the record keys (KeyPrefix).
const HistoryPrefix = "millrace-"

// ReplayMessage returns the message that re-publishes rec: the same UUID and payload bytes, the
// original metadata, and the history h asks for. The payload is not copied. A record with
// Native content is not whole in that message: replay it through a NativePublisher.
func ReplayMessage(rec Record, h History) *message.Message {
	if h == KeepHistory {
		return rec.Message()
	}
	msg := message.NewMessage(rec.UUID, rec.Payload)
	for k, v := range rec.Metadata {
		if !strings.HasPrefix(k, HistoryPrefix) {
			msg.Metadata[k] = v
		}
	}
	return msg
}

// ErrNotReplayable is wrapped when a record cannot be re-published exactly: its Native content
// needs a NativePublisher of its own broker, and the target has none; or the target broker
// would never take it as it is (an SQS FIFO queue's message without a valid message group).
// A replay keeps such a record in its store and goes on with the others.
var ErrNotReplayable = errors.New("deadletter: record cannot be re-published exactly")

// NativePublisher is implemented by a broker client that can re-publish a record's original
// content exactly as the broker first held it: rec.Native with rec.Payload where the broker
// keeps a body apart from the native fields (a Redis entry's fields in order; a Kafka record's
// value and repeated headers; an AMQP body with typed headers; an SQS body with typed
// attributes). A replay of a record with Native content must use it, or refuse the record and
// keep it.
type NativePublisher interface {
	// PublishNative publishes rec's original content, exactly, to topic.
	PublishNative(ctx context.Context, topic string, rec Record) error
}
