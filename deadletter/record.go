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
//	millrace-dlq-error-types    | Go types (%T) of the error and its causes, a JSON array of
//	                            | strings: at most 16, each at most 256 bytes, at most 1 KiB
//	millrace-dlq-panic-stack    | for a recovered panic, its goroutine stack from the panic
//	                            | on, a JSON string of at most 8 KiB, cut at a line boundary
//	millrace-dlq-trace          | W3C traceparent of the span of the attempt that gave up
//	                            | ("00-<trace id>-<span id>-<flags>", 55 bytes), tracing on
//
// The last three are absent when there is nothing to say (no error types, no panic, no traced
// span). The trace is written only when it is a valid traceparent (ValidTrace); as a record key
// it survives on every broker, also where the dead letter is written from the broker's original
// content (Redis Streams, NATS), which drops what an attempt added to the metadata. The error
// types and stack are JSON, one line, so that every broker carries them unchanged (a NATS header
// cannot hold a line break); the bounds (MaxErrorTypes, MaxErrorTypeText, MaxErrorTypesBytes,
// MaxPanicStackBytes) hold for the value as written and keep a record within every broker's
// limits: with the error text a record adds at most about 12 KiB of fields to the message.
// Where a dead letter would exceed a broker's limit with them (an SQS queue's maximum message
// size, a RabbitMQ frame, NATS's max_payload), the adapter leaves out the stack, then the
// error types, whole, before anything else.
//
// The original metadata is untrusted: a foreign producer may send keys of its own that start
// with millrace-dlq-. Such a key is written as EscapePrefix + key (see EscapeKey), so it never
// overwrites a record key and never forges one, and FromMessage gives it back under its own
// name. Every other millrace-dlq-* key that is not a record key is ignored on reading.
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
	KeyErrorTypes    = "millrace-dlq-error-types"
	KeyPanicStack    = "millrace-dlq-panic-stack"
	KeyTrace         = "millrace-dlq-trace"
)

// KeyPrefix starts every key a Record adds.
const KeyPrefix = "millrace-dlq-"

// EscapePrefix starts the dead-letter key of an original metadata key that itself starts with
// KeyPrefix: "millrace-dlq-reason" sent by a foreign producer is kept as
// "millrace-dlq-esc.millrace-dlq-reason".
const EscapePrefix = KeyPrefix + "esc."

// EscapeKey returns the key under which an original metadata key k is written in a dead letter:
// k itself, or EscapePrefix + k when k starts with KeyPrefix (and so could collide with, or
// forge, a record key). Adapters and stores that write the original metadata next to
// Record.Fields use it for every original key.
func EscapeKey(k string) string {
	if strings.HasPrefix(k, KeyPrefix) {
		return EscapePrefix + k
	}
	return k
}

// OriginalKey is EscapeKey's inverse for a key read from a dead letter: it returns the original
// metadata key and true, or false for a record key (or any other millrace-dlq-* key that is not
// an escaped original).
func OriginalKey(k string) (string, bool) {
	switch {
	case strings.HasPrefix(k, EscapePrefix):
		return k[len(EscapePrefix):], true
	case strings.HasPrefix(k, KeyPrefix):
		return "", false
	}
	return k, true
}

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
	// Attempts is the number of attempts made, at least 1: the handler calls the message's retry
	// state records. For a delivery that arrived past MaxAttempts (its dead-letter write had
	// failed, or its retry state claims more attempts than the policy allows) the handler was not
	// called on that delivery: Attempts is then the count the retry state records before it,
	// and LastError says so when the broker carried no error of its own.
	Attempts int
	// LastError is the error text of the last attempt.
	LastError string
	// OriginalTopic is the topic, stream or queue the message was consumed from.
	OriginalTopic string
	// OriginalKey is the original routing or partition key (an SQS FIFO queue's message group
	// ID), where any.
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
	// ErrorTypes are the Go types (fmt %T) of the last attempt's error and of the errors in its
	// cause chain, outermost first, each once (see ErrorTypes); nil where unknown (a record
	// written before they were recorded, or by a store or broker that does not keep them).
	// Fields writes at most BoundErrorTypes of them.
	ErrorTypes []string
	// PanicStack is, when the last attempt's error holds a recovered panic
	// (*millrace.PanicError), the goroutine stack from the panic on; "" otherwise. Fields
	// writes at most BoundPanicStack of it (8 KiB, cut at a line boundary).
	PanicStack string
	// Trace is the W3C traceparent ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>") of
	// the span of the attempt that gave up, where telemetry traced it; "" otherwise (tracing
	// off, a dead letter the broker wrote itself, a record written before it was recorded).
	// Fields writes it only when ValidTrace holds; telemetry.RecordTrace reads it as a span
	// context.
	Trace string
	// Native is the original message's content as the broker held it, where Payload and
	// Metadata cannot hold it exactly: the fields of a Redis stream entry that was not a
	// Watermill message, in stream order with repeated names kept. It is nil for a message
	// whose content Payload and Metadata hold whole. A store fills it when it reads such a dead
	// letter; Message and Fields ignore it, and a replay must re-publish it exactly (see
	// NativePublisher) or refuse.
	Native []Field
}

// Field is one named item of a message's native content.
type Field struct {
	// Name is the field, header or attribute name.
	Name string
	// Type is the broker's type of the value where the broker types values, "" where it does
	// not (Redis fields).
	Type string
	// Value is the value's exact bytes.
	Value []byte
}

// Message returns the dead-letter message for r: the original payload, the original metadata
// (keys escaped with EscapeKey) and the record keys.
func (r Record) Message() *message.Message {
	msg := message.NewMessage(r.UUID, r.Payload)
	for k, v := range r.Metadata {
		msg.Metadata[EscapeKey(k)] = v
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
	if v := encodeErrorTypes(BoundErrorTypes(r.ErrorTypes)); v != "" {
		f[KeyErrorTypes] = v
	}
	if r.PanicStack != "" {
		f[KeyPanicStack] = quote(BoundPanicStack(r.PanicStack))
	}
	if ValidTrace(r.Trace) {
		f[KeyTrace] = r.Trace
	}
	return f
}

// ErrNotDeadLetter is returned by FromMessage for a message without a valid reason key.
var ErrNotDeadLetter = errors.New("deadletter: message carries no dead-letter record")

// FromMessage decodes the Record a dead-letter message carries. The payload is not copied.
// It refuses a message without a valid reason, with an attempt count that is not a positive
// decimal, with a failure time that is present but not RFC 3339, with error types or a
// panic stack that are present but not the JSON a Record writes, or with a trace that is
// present but not a valid traceparent (ValidTrace); the error names the key.
// An absent failure time leaves the field zero. Error types and stack are bounded again as
// Fields bounds them, whatever the message holds. Original keys escaped by EscapeKey come back
// under their own names; other millrace-dlq-* keys are not part of the original metadata.
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
	if r.Attempts, err = parseAttempts(md.Get(KeyAttempts)); err != nil {
		return Record{}, err
	}
	if r.FirstFailureAt, err = parseTime(md, KeyFirstFailure); err != nil {
		return Record{}, err
	}
	if r.LastFailureAt, err = parseTime(md, KeyLastFailure); err != nil {
		return Record{}, err
	}
	if v, ok := md[KeyErrorTypes]; ok {
		if r.ErrorTypes, err = decodeErrorTypes(v); err != nil {
			return Record{}, err
		}
	}
	if v, ok := md[KeyPanicStack]; ok {
		if r.PanicStack, err = decodePanicStack(v); err != nil {
			return Record{}, err
		}
	}
	if v, ok := md[KeyTrace]; ok {
		if r.Trace, err = decodeTrace(v); err != nil {
			return Record{}, err
		}
	}
	for k, v := range md {
		if orig, ok := OriginalKey(k); ok {
			r.Metadata[orig] = v
		}
	}
	return r, nil
}

// ErrInvalidRecord is wrapped by FromMessage when a record key holds a value no millrace
// adapter writes.
var ErrInvalidRecord = errors.New("deadletter: invalid dead-letter record")

// parseAttempts reads KeyAttempts: a positive decimal (a dead letter records at least one
// attempt).
func parseAttempts(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s = %q: want a positive decimal", ErrInvalidRecord, KeyAttempts, v)
	}
	return n, nil
}

// parseTime reads an RFC 3339 time key; absent means zero, unreadable is an error.
func parseTime(md message.Metadata, key string) (time.Time, error) {
	v, ok := md[key]
	if !ok {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s = %q: want an RFC 3339 time", ErrInvalidRecord, key, v)
	}
	return t, nil
}
