package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Kafka-specific headers millrace writes on a retry copy, besides the broker-neutral ones of
// millrace.SetRetryHeaders. They name the source record the retries descend from, and are
// written once (by the first retry) and carried unchanged by later copies.
const (
	// HeaderOriginalPartition is the source record's partition, decimal.
	HeaderOriginalPartition = "millrace-kafka-original-partition"
	// HeaderOriginalOffset is the source record's offset, decimal.
	HeaderOriginalOffset = "millrace-kafka-original-offset"
)

// Spring Kafka's retry-topic headers, read when millrace's are absent. Spring writes the
// integers as binary big-endian values.
const (
	springAttempts          = "retry_topic-attempts"
	springBackoffTimestamp  = "retry_topic-backoff-timestamp"
	springOriginalTopic     = "kafka_original-topic"
	springOriginalPartition = "kafka_original-partition"
	springOriginalOffset    = "kafka_original-offset"
	springExceptionMessage  = "kafka_exception-message"
)

// MaxAttemptNumber caps an attempt number read from a header. A larger (absurd) value reads as
// MaxAttemptNumber, which exceeds any sane policy, so the message is dead-lettered as exhausted
// instead of overflowing arithmetic.
const MaxAttemptNumber = 1 << 20

// ErrUntrustedHeader is wrapped by the decode error of a record whose attempt headers cannot be
// trusted: the record is dead-lettered as malformed without calling the handler.
var ErrUntrustedHeader = errors.New("kafka: untrusted attempt header")

// Origin is where a message was first consumed from: its source topic, partition and offset.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
}

// OriginFromMetadata returns the source record a retry copy descends from, from millrace's
// headers or else Spring Kafka's; ok is false when neither carries a complete, valid origin.
func OriginFromMetadata(md message.Metadata) (o Origin, ok bool) {
	if t := md.Get(millrace.HeaderOriginalTopic); t != "" {
		p, perr := strconv.ParseInt(md.Get(HeaderOriginalPartition), 10, 32)
		off, oerr := strconv.ParseInt(md.Get(HeaderOriginalOffset), 10, 64)
		if perr == nil && oerr == nil && p >= 0 && off >= 0 {
			return Origin{Topic: t, Partition: int32(p), Offset: off}, true
		}
	}
	if t := md.Get(springOriginalTopic); t != "" {
		p, pok := beInt([]byte(md.Get(springOriginalPartition)), 4)
		off, ook := beInt([]byte(md.Get(springOriginalOffset)), 8)
		if pok && ook && p >= 0 && off >= 0 {
			return Origin{Topic: t, Partition: int32(p), Offset: off}, true
		}
	}
	return Origin{}, false
}

// decodeAttempt reads the attempt history of a record from its retry state headers md (see
// splitHeaders). It never panics, and never yields a Number below 1 or above MaxAttemptNumber.
// A record read from the source topic is a first attempt whatever its headers say: only
// millrace writes its retry topics, while anyone may write the source topic, and a header
// there (millrace-attempt, Spring's retry_topic-attempts, an original topic or key, a last
// error) is the producer's content, never retry state. On a retry topic it returns an error
// wrapping ErrUntrustedHeader when an attempt header is present but unreadable, or when the
// record carries no attempt header at all: counting either as a first attempt would grant more
// attempts than the policy allows.
func decodeAttempt(md message.Metadata, fromRetryTopic bool) (millrace.Attempt, error) {
	if !fromRetryTopic {
		return millrace.Attempt{Number: 1, Source: millrace.SourceNone, Broker: BrokerName}, nil
	}
	return decodeHeaders(md, true)
}

// decodeHeaders reads the attempt history md carries; requireHeader refuses md without an
// attempt header (ErrUntrustedHeader).
func decodeHeaders(md message.Metadata, requireHeader bool) (millrace.Attempt, error) {
	// The broker-neutral headers (first-attempt time, original topic and key, last error) read
	// as the core reads them; the attempt number is re-read strictly below, since the core's
	// parse tolerates what this untrusted input must not (signs, zero, overflow).
	a := millrace.AttemptFromHeaders(md)
	a.Number, a.Source, a.Broker = 1, millrace.SourceNone, BrokerName
	n, found, err := attemptNumber(md)
	switch {
	case err != nil:
		return a, err
	case found:
		a.Number, a.Source = n, millrace.SourceHeader
	case requireHeader:
		return a, fmt.Errorf("%w: record on a retry topic carries no %s or %s header", ErrUntrustedHeader, millrace.HeaderAttempt, springAttempts)
	}
	// Spring Kafka's headers fill in what millrace's do not carry.
	if a.OriginalTopic == "" {
		a.OriginalTopic = md.Get(springOriginalTopic)
	}
	if a.LastError == "" {
		a.LastError = millrace.TruncateError(md.Get(springExceptionMessage))
	}
	return a, nil
}

// attemptNumber reads millrace's attempt header, or else Spring's. found is false when neither
// is present.
func attemptNumber(md message.Metadata) (n int, found bool, err error) {
	if v, ok := md[millrace.HeaderAttempt]; ok {
		n, err := parseDecimalAttempt(v)
		if err != nil {
			return 0, true, fmt.Errorf("%w: %s = %q: %w", ErrUntrustedHeader, millrace.HeaderAttempt, clip(v), err)
		}
		return n, true, nil
	}
	if v, ok := md[springAttempts]; ok {
		// Spring writes a 4-byte big-endian int (1 byte in old versions, BigInteger bytes in
		// some: 1 or 2 bytes for small counts).
		b := []byte(v)
		if len(b) != 1 && len(b) != 2 && len(b) != 4 {
			return 0, true, fmt.Errorf("%w: %s is %d bytes, want 1, 2 or 4", ErrUntrustedHeader, springAttempts, len(b))
		}
		x, _ := beInt(b, len(b))
		if x < 1 {
			return 0, true, fmt.Errorf("%w: %s = %d, want >= 1", ErrUntrustedHeader, springAttempts, x)
		}
		return int(min(x, MaxAttemptNumber)), true, nil
	}
	return 0, false, nil
}

// parseDecimalAttempt accepts a positive decimal integer; larger than MaxAttemptNumber reads as
// MaxAttemptNumber.
func parseDecimalAttempt(v string) (int, error) {
	if v == "" || len(v) > 64 {
		return 0, errors.New("want a positive decimal integer")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errors.New("want a positive decimal integer")
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil { // only overflow is left: absurdly large
		return MaxAttemptNumber, nil
	}
	if n == 0 {
		return 0, errors.New("want >= 1")
	}
	return int(min(n, MaxAttemptNumber)), nil
}

// beInt decodes a big-endian two's-complement integer of exactly size bytes (1, 2, 4 or 8).
func beInt(b []byte, size int) (int64, bool) {
	if len(b) != size {
		return 0, false
	}
	switch size {
	case 1:
		return int64(int8(b[0])), true
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b))), true
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), true
	case 8:
		return int64(binary.BigEndian.Uint64(b)), true
	}
	return 0, false
}

// notBefore returns when a retry copy may be handled: millrace's header, or else Spring's
// backoff timestamp (epoch milliseconds, 8-byte big-endian or decimal text). The zero time means
// at once.
func notBefore(md message.Metadata) time.Time {
	if t := millrace.NotBeforeFromHeaders(md); !t.IsZero() {
		return t
	}
	v, ok := md[springBackoffTimestamp]
	if !ok {
		return time.Time{}
	}
	ms, ok := beInt([]byte(v), 8)
	if !ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}
		}
		ms = n
	}
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// clip shortens untrusted header text quoted in errors.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
