// Package deadletter defines the one dead-letter Record every millrace adapter writes, and its
// encoding into broker headers or fields.
//
// A dead-letter message keeps the original payload byte for byte and the original metadata,
// and adds these keys (all values are text):
//
//	key                         | value
//	----------------------------+----------------------------------------------------------
//	millrace-dlq-reason         | discarded, exhausted or malformed
//	millrace-dlq-attempts       | attempts made, decimal (1 = failed on the first delivery)
//	millrace-dlq-last-error     | error text of the last attempt (at most 2048 bytes)
//	millrace-dlq-original-topic | topic, stream or queue the message was consumed from
//	millrace-dlq-original-key   | original routing key (RabbitMQ) or partition key (Kafka)
//	millrace-dlq-broker         | adapter name: memory, redisstream, amqp, kafka, sqs
//	millrace-dlq-native-id      | broker id of the failed delivery (entry id, offset, message id)
//	millrace-dlq-handler        | name of the handler that gave up
//	millrace-dlq-first-failure  | time of the first failure (or first delivery), RFC 3339 nano
//	millrace-dlq-last-failure   | time of the last failure, RFC 3339 nano
//	millrace-dlq-message-uuid   | the Watermill message UUID
package deadletter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Reason says why a message was dead-lettered.
type Reason string

const (
	// Discarded: the handler returned Discard and dead-lettering of discards is on.
	Discarded Reason = "discarded"
	// Exhausted: the message failed on its last allowed attempt.
	Exhausted Reason = "exhausted"
	// Malformed: the payload or headers could not be decoded.
	Malformed Reason = "malformed"
)

// Valid reports whether r is one of the three reasons.
func (r Reason) Valid() bool { return r == Discarded || r == Exhausted || r == Malformed }

// Metadata keys of a dead-letter message; see the package documentation.
const (
	KeyReason        = "millrace-dlq-reason"
	KeyAttempts      = "millrace-dlq-attempts"
	KeyLastError     = "millrace-dlq-last-error"
	KeyOriginalTopic = "millrace-dlq-original-topic"
	KeyOriginalKey   = "millrace-dlq-original-key"
	KeyBroker        = "millrace-dlq-broker"
	KeyNativeID      = "millrace-dlq-native-id"
	KeyHandler       = "millrace-dlq-handler"
	KeyFirstFailure  = "millrace-dlq-first-failure"
	KeyLastFailure   = "millrace-dlq-last-failure"
	KeyMessageUUID   = "millrace-dlq-message-uuid"
)

// KeyPrefix starts every key a Record adds; stripping it restores the original metadata.
const KeyPrefix = "millrace-dlq-"

// Record is one dead letter: the message exactly as it failed, and the context of its failure.
type Record struct {
	// UUID is the Watermill message UUID.
	UUID string
	// Payload is the original payload, unchanged.
	Payload []byte
	// Metadata is the original metadata, unchanged (without the keys above).
	Metadata map[string]string
	// Reason says why the message was given up.
	Reason Reason
	// Attempts is the number of attempts made.
	Attempts int
	// LastError is the error text of the last attempt.
	LastError string
	// OriginalTopic is the topic, stream or queue the message was consumed from.
	OriginalTopic string
	// OriginalKey is the original routing or partition key, where any.
	OriginalKey string
	// Broker names the adapter that handled the message.
	Broker string
	// NativeID is the broker id of the failed delivery.
	NativeID string
	// Handler names the handler that gave up.
	Handler string
	// FirstFailureAt is when the message first failed (its first delivery where the broker
	// cannot tell the failure time).
	FirstFailureAt time.Time
	// LastFailureAt is when the message failed for the last time.
	LastFailureAt time.Time
}

// Message returns the dead-letter message for r: the original payload, the original metadata
// and the record keys.
func (r Record) Message() *message.Message {
	msg := message.NewMessage(r.UUID, r.Payload)
	for k, v := range r.Metadata {
		msg.Metadata[k] = v
	}
	for k, v := range r.Fields() {
		msg.Metadata[k] = v
	}
	return msg
}

// Fields returns only the record keys (no original metadata), for stores with their own columns.
func (r Record) Fields() map[string]string {
	f := map[string]string{
		KeyReason:        string(r.Reason),
		KeyAttempts:      strconv.Itoa(r.Attempts),
		KeyLastError:     r.LastError,
		KeyOriginalTopic: r.OriginalTopic,
		KeyBroker:        r.Broker,
		KeyHandler:       r.Handler,
		KeyMessageUUID:   r.UUID,
	}
	if r.OriginalKey != "" {
		f[KeyOriginalKey] = r.OriginalKey
	}
	if r.NativeID != "" {
		f[KeyNativeID] = r.NativeID
	}
	if !r.FirstFailureAt.IsZero() {
		f[KeyFirstFailure] = r.FirstFailureAt.UTC().Format(time.RFC3339Nano)
	}
	if !r.LastFailureAt.IsZero() {
		f[KeyLastFailure] = r.LastFailureAt.UTC().Format(time.RFC3339Nano)
	}
	return f
}

// ErrNotDeadLetter is returned by FromMessage for a message without a valid reason key.
var ErrNotDeadLetter = errors.New("deadletter: message carries no dead-letter record")

// FromMessage decodes the Record a dead-letter message carries. The payload is not copied.
func FromMessage(msg *message.Message) (Record, error) {
	md := msg.Metadata
	r := Record{
		UUID:          md.Get(KeyMessageUUID),
		Payload:       msg.Payload,
		Metadata:      map[string]string{},
		Reason:        Reason(md.Get(KeyReason)),
		LastError:     md.Get(KeyLastError),
		OriginalTopic: md.Get(KeyOriginalTopic),
		OriginalKey:   md.Get(KeyOriginalKey),
		Broker:        md.Get(KeyBroker),
		NativeID:      md.Get(KeyNativeID),
		Handler:       md.Get(KeyHandler),
	}
	if !r.Reason.Valid() {
		return Record{}, fmt.Errorf("%w: %s = %q", ErrNotDeadLetter, KeyReason, md.Get(KeyReason))
	}
	if r.UUID == "" {
		r.UUID = msg.UUID
	}
	var err error
	if r.Attempts, err = strconv.Atoi(md.Get(KeyAttempts)); err != nil {
		return Record{}, fmt.Errorf("deadletter: %s = %q: %w", KeyAttempts, md.Get(KeyAttempts), err)
	}
	r.FirstFailureAt, _ = time.Parse(time.RFC3339Nano, md.Get(KeyFirstFailure))
	r.LastFailureAt, _ = time.Parse(time.RFC3339Nano, md.Get(KeyLastFailure))
	for k, v := range md {
		if !strings.HasPrefix(k, KeyPrefix) {
			r.Metadata[k] = v
		}
	}
	return r, nil
}
