package deadletter

import (
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// History says what a replayed message keeps of its failure history.
type History uint8

const (
	// KeepHistory re-publishes the message with its millrace attempt headers (millrace-attempt,
	// millrace-first-attempt-at, ...) as they were when it was dead-lettered, plus the record
	// keys (millrace-dlq-*), so the handler can see it failed before. An adapter that reads
	// attempts from headers then continues counting: a message that exhausted its attempts gets
	// one more try as its last attempt.
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
// original metadata, and the history h asks for. The payload is not copied.
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
