package kafka

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// encodedRecordBytes is the size of a v2 record in a batch, the way a broker measures it:
// zigzag varints, timestamp and offset deltas of 0 (the smallest a record can take).
func encodedRecordBytes(key, value []byte, hs []sarama.RecordHeader) int {
	vl := func(n int) int { var b [binary.MaxVarintLen64]byte; return binary.PutVarint(b[:], int64(n)) }
	lenOf := func(b []byte) int {
		if b == nil {
			return vl(-1)
		}
		return vl(len(b)) + len(b)
	}
	body := 1 + vl(0) + vl(0) + lenOf(key) + lenOf(value) + vl(len(hs))
	for _, h := range hs {
		body += lenOf(h.Key) + lenOf(h.Value)
	}
	return vl(body) + body
}

// fill returns the largest record build makes (build(n) grows with n) whose batch fits s.
func fill(s int, build func(n int) ([]byte, []byte, []sarama.RecordHeader)) ([]byte, []byte, []sarama.RecordHeader) {
	fits := func(n int) bool {
		k, v, h := build(n)
		return batchHeaderBytes+encodedRecordBytes(k, v, h) <= s
	}
	lo, hi := 0, s // fits(lo); each unit costs at least one byte, so not fits(s)
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return build(lo)
}

// The bound of size.go holds: for records that fill a source batch of s bytes in the shapes
// that cost millrace the most (only empty headers, only headers named millrace-dlq-*, a large
// key and a large UUID header, a large value), with every value millrace adds at its largest
// (last error, topic names, positions, times), neither the retry copy nor the dead letter,
// from the source topic or from that retry copy, has a ByteSize above maxRecordBytes(s).
func TestMaxRecordBytesBoundsWhatMillraceWrites(t *testing.T) {
	longTopic := strings.Repeat("t", 249-len(RetrySuffix)-len(".86400s"))
	lastErr := strings.Repeat("é", millrace.MaxErrorText) // truncated to MaxErrorText bytes
	headers := func(n int, name string) []sarama.RecordHeader {
		hs := make([]sarama.RecordHeader, n)
		for i := range hs {
			hs[i] = sarama.RecordHeader{Key: []byte(name), Value: []byte{}}
		}
		return hs
	}
	shapes := []struct {
		name  string
		build func(n int) (key, value []byte, hs []sarama.RecordHeader)
	}{
		{"empty headers", func(n int) ([]byte, []byte, []sarama.RecordHeader) { return nil, nil, headers(n, "") }},
		{"millrace-dlq- headers", func(n int) ([]byte, []byte, []sarama.RecordHeader) {
			return nil, nil, headers(n, deadletter.KeyPrefix)
		}},
		{"key and UUID header", func(n int) ([]byte, []byte, []sarama.RecordHeader) {
			return []byte(strings.Repeat("k", (n+1)/2)), nil, []sarama.RecordHeader{{Key: []byte(wmkafka.UUIDHeaderKey), Value: []byte(strings.Repeat("u", n/2))}}
		}},
		{"value", func(n int) ([]byte, []byte, []sarama.RecordHeader) { return nil, make([]byte, n), nil }},
	}
	for _, s := range []int{200, 65536} {
		bound := maxRecordBytes(int64(s))
		for _, shape := range shapes {
			key, value, hs := fill(s, shape.build)
			if value == nil {
				value = []byte{}
			}
			ptrs := make([]*sarama.RecordHeader, len(hs))
			for i := range hs {
				ptrs[i] = &hs[i]
			}
			uuid, ok := lastValue(ptrs, wmkafka.UUIDHeaderKey)
			if !ok || uuid == "" {
				uuid = positionID(longTopic, math.MaxInt32, math.MaxInt64)
			}
			at := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
			d := &delivery{RecordInfo: RecordInfo{Topic: longTopic, Partition: math.MaxInt32, Offset: math.MaxInt64, Key: key, Timestamp: at},
				source: longTopic, count: 1, value: value, orig: ptrs}
			rec := deadletter.Record{UUID: uuid, Reason: deadletter.Malformed, Attempts: MaxAttemptNumber, LastError: millrace.TruncateError(lastErr),
				OriginalTopic: longTopic, OriginalKey: string(key), Broker: BrokerName, NativeID: d.nativeID(), Handler: strings.Repeat("h", 4096),
				FirstFailureAt: at, LastFailureAt: at,
				// At their bounds, quotes and tabs doubling under JSON escapes.
				ErrorTypes: slices.Repeat([]string{strings.Repeat(`"`, deadletter.MaxErrorTypeText)}, deadletter.MaxErrorTypes),
				PanicStack: strings.Repeat("\t\"\n", deadletter.MaxPanicStackBytes)}
			if f := rec.Fields(); len(f[deadletter.KeyErrorTypes]) < deadletter.MaxErrorTypesBytes-600 || len(f[deadletter.KeyPanicStack]) < deadletter.MaxPanicStackBytes-100 {
				t.Fatalf("error types (%d bytes) and stack (%d bytes) not at their bounds", len(f[deadletter.KeyErrorTypes]), len(f[deadletter.KeyPanicStack]))
			}
			check := func(what string, hs []sarama.RecordHeader) {
				t.Helper()
				pm := &sarama.ProducerMessage{Value: sarama.ByteEncoder(value), Headers: hs}
				if key != nil {
					pm.Key = sarama.ByteEncoder(key)
				}
				if n := pm.ByteSize(2); int64(n) > bound {
					t.Errorf("s=%d %s: %s ByteSize %d > maxRecordBytes %d", s, shape.name, what, n, bound)
				}
			}
			check("dead letter from the source topic", deadLetterHeaders(d, rec))

			state := message.Metadata{}
			millrace.SetRetryHeaders(state, millrace.Attempt{Number: MaxAttemptNumber, FirstAttemptAt: at, OriginalTopic: longTopic, OriginalKey: string(key), LastError: lastErr}, at)
			setOrigin(state, Origin{Topic: longTopic, Partition: math.MaxInt32, Offset: math.MaxInt64})
			state[HeaderOriginalTimestamp] = "-9223372036854775808"
			retry := retryHeaders(d, uuid, state)
			check("retry copy", retry)

			rptrs := make([]*sarama.RecordHeader, len(retry))
			for i := range retry {
				rptrs[i] = &retry[i]
			}
			orig, st, err := splitHeaders(rptrs, true)
			if err != nil {
				t.Fatal(err)
			}
			d2 := *d
			d2.fromRetryTopic, d2.orig, d2.state, d2.stateMD = true, orig, st, headersMetadata(st)
			check("dead letter from the retry topic", deadLetterHeaders(&d2, rec))
		}
	}
}

// The sizes saturate instead of overflowing.
func TestSizingSaturates(t *testing.T) {
	if got := maxRecordBytes(math.MaxInt64); got != math.MaxInt64 {
		t.Fatalf("maxRecordBytes(MaxInt64) = %d", got)
	}
	if got := batchBytes(math.MaxInt64, sarama.CompressionSnappy); got != math.MaxInt64 {
		t.Fatalf("batchBytes(MaxInt64) = %d", got)
	}
	if got := maxRecordBytes(-5); got != recordOverhead+fixedOverhead {
		t.Fatalf("maxRecordBytes(-5) = %d", got)
	}
}
