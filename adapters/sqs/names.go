package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxQueueName is SQS's limit on queue name length.
const maxQueueName = 80

// QueueName maps a Watermill topic to the SQS queue name the adapter uses for it (for a
// dead-letter topic, see Adapter.QueueName, which keeps the suffix). SQS names hold
// only letters, digits, '-' and '_' (at most 80): every other character becomes '-' (so the
// Kafka-style topic "push.requested" is the queue "push-requested"), and a name longer than 80
// characters is cut and ends with 8 hex digits of the topic's SHA-256, so that long topics stay
// distinct. The mapping is not one-to-one: "a.b" and "a-b" share a queue; name topics
// accordingly. A topic ending in ".fifo" names a FIFO queue, whose name SQS requires to end in
// ".fifo": the suffix is kept and the rest mapped as above ("orders.v2.fifo" ->
// "orders-v2.fifo"); see "FIFO queues" in the package documentation.
func QueueName(topic string) string {
	if base, ok := strings.CutSuffix(topic, fifoSuffix); ok {
		return queueName(base, maxQueueName-len(fifoSuffix)) + fifoSuffix
	}
	return queueName(topic, maxQueueName)
}

// queueName maps topic to a queue name of at most limit characters.
func queueName(topic string, limit int) string {
	var b strings.Builder
	for _, r := range topic {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := b.String()
	if name == "" {
		name = "-"
	}
	if len(name) > limit {
		sum := sha256.Sum256([]byte(topic))
		name = name[:limit-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return name
}

// validQueueChars reports whether s holds only characters SQS allows in queue names.
func validQueueChars(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
