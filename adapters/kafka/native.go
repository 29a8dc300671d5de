package kafka

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// HeaderOriginalHeaders is the last header of a retry record millrace writes: the number of
// headers at the start of the record that are the source record's own, carried unchanged (in
// order, repeated names kept). The headers after them are millrace's retry state, the only
// headers the adapter reads attempt state from.
const HeaderOriginalHeaders = "millrace-kafka-original-headers"

// HeaderOriginalTimestamp is the source record's timestamp, Unix milliseconds, decimal; written
// with HeaderOriginalPartition and HeaderOriginalOffset.
const HeaderOriginalTimestamp = "millrace-kafka-original-timestamp"

// KeyOriginalHeaders is the dead-letter record header that counts the headers at the start of
// a dead-letter record that are the original record's own, in order, repeated names kept, each
// name escaped with deadletter.EscapeKey. It is not a record key: deadletter.FromMessage
// ignores it; DeadLetterStore reads it to give back the original headers exactly.
const KeyOriginalHeaders = deadletter.KeyPrefix + "kafka-original-headers"

// Record keys of a dead letter that name the source record its retries descend from (topic,
// partition, offset, decimal), next to the record keys of deadletter.Record. Unlike the
// HeaderOriginal* state headers, which a foreign record may carry as content, they are in the
// record's own namespace: no original header can forge them (see deadletter.EscapeKey).
// DeadLetterOrigin reads them.
const (
	KeyOriginTopic     = deadletter.KeyPrefix + "kafka-origin-topic"
	KeyOriginPartition = deadletter.KeyPrefix + "kafka-origin-partition"
	KeyOriginOffset    = deadletter.KeyPrefix + "kafka-origin-offset"
)

// DeadLetterOrigin returns the source record a dead letter descends from, from its record keys
// KeyOriginTopic, KeyOriginPartition and KeyOriginOffset (md is the dead-letter message's
// metadata as received, before deadletter.FromMessage), and false when they are absent or
// unreadable.
func DeadLetterOrigin(md message.Metadata) (Origin, bool) {
	t := md.Get(KeyOriginTopic)
	p, perr := strconv.ParseInt(md.Get(KeyOriginPartition), 10, 32)
	off, oerr := strconv.ParseInt(md.Get(KeyOriginOffset), 10, 64)
	if t == "" || perr != nil || oerr != nil || p < 0 || off < 0 {
		return Origin{}, false
	}
	return Origin{Topic: t, Partition: int32(p), Offset: off}, true
}

// NativeHeader is the deadletter.Field Type of an original Kafka record header in
// Record.Native.
const NativeHeader = "kafka.header"

// maxHeaderCount bounds a header count read from a record: it can never exceed the headers
// present, and this keeps its digits few.
const maxHeaderCount = 1 << 30

// splitHeaders separates a consumed record's headers into its original content and millrace's
// retry state. On the source topic every header is original content and none is state: a
// producer that is not millrace may send anything. On a retry topic the last
// HeaderOriginalHeaders header says how many leading headers are the source record's; the
// rest is state. A retry record without it (written by an older millrace, or by a tool that
// writes retry topics) is state and content alike. A count that does not fit the record is an
// error wrapping ErrUntrustedHeader; everything is then content.
func splitHeaders(hs []*sarama.RecordHeader, fromRetryTopic bool) (orig, state []*sarama.RecordHeader, err error) {
	if !fromRetryTopic {
		return hs, nil, nil
	}
	at := -1
	for i := len(hs) - 1; i >= 0; i-- {
		if string(hs[i].Key) == HeaderOriginalHeaders {
			at = i
			break
		}
	}
	if at < 0 {
		return hs, hs, nil
	}
	v := string(hs[at].Value)
	n, perr := parseDecimalAttempt(v)
	if v == "0" {
		n, perr = 0, nil
	}
	if perr != nil || n > at || n >= maxHeaderCount {
		return hs, nil, fmt.Errorf("%w: %s = %q on a record whose header %d it is", ErrUntrustedHeader, HeaderOriginalHeaders, clip(v), at)
	}
	return hs[:n], hs[n:], nil
}

// headersMetadata reads headers as metadata, byte for byte; of repeated keys the last wins.
func headersMetadata(hs []*sarama.RecordHeader) message.Metadata {
	md := make(message.Metadata, len(hs))
	for _, h := range hs {
		md[string(h.Key)] = string(h.Value)
	}
	return md
}

// nonNil returns hs without nil entries (sarama never hands any, but the input is untrusted).
func nonNil(hs []*sarama.RecordHeader) []*sarama.RecordHeader {
	if !slices.Contains(hs, nil) {
		return hs
	}
	return slices.DeleteFunc(slices.Clone(hs), func(h *sarama.RecordHeader) bool { return h == nil })
}

// headerBuilder appends headers whose bytes share one buffer.
type headerBuilder struct {
	buf []byte
	hs  []sarama.RecordHeader
}

func (b *headerBuilder) add(k, v string) {
	start := len(b.buf)
	b.buf = append(b.buf, k...)
	key := b.buf[start:len(b.buf):len(b.buf)]
	start = len(b.buf)
	b.buf = append(b.buf, v...)
	b.hs = append(b.hs, sarama.RecordHeader{Key: key, Value: b.buf[start:len(b.buf):len(b.buf)]})
}

// addRaw appends h, its name escaped when escape is set.
func (b *headerBuilder) addRaw(h *sarama.RecordHeader, escape bool) {
	k := string(h.Key)
	if escape {
		k = deadletter.EscapeKey(k)
	}
	b.add(k, string(h.Value))
}

func headerBytes(hs []*sarama.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value) + len(deadletter.EscapePrefix)
	}
	return n
}

// lastValue returns the value of the last header named k in hs.
func lastValue(hs []*sarama.RecordHeader, k string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if string(hs[i].Key) == k {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

// retryHeaders returns the headers of the retry copy of d's record: the source record's own
// headers unchanged, then state (millrace's retry state, sorted by name), the UUID where the
// original headers do not carry it, and HeaderOriginalHeaders.
func retryHeaders(d *delivery, uuid string, state message.Metadata) []sarama.RecordHeader {
	// The names sorted in an array on the stack (a retry copy carries about ten), and one
	// buffer sized for every name and value: this runs for every failing record.
	var arr [2 * retryHeaderRoom]string
	names := arr[:0]
	size := headerBytes(d.orig) + len(wmkafka.UUIDHeaderKey) + len(uuid) + len(HeaderOriginalHeaders) + 20
	for k, v := range state {
		if k != wmkafka.UUIDHeaderKey && k != HeaderOriginalHeaders {
			names = append(names, k)
			size += len(k) + len(v)
		}
	}
	slices.Sort(names)
	b := headerBuilder{buf: make([]byte, 0, size), hs: make([]sarama.RecordHeader, 0, len(d.orig)+len(names)+2)}
	for _, h := range d.orig {
		b.addRaw(h, false)
	}
	for _, k := range names {
		b.add(k, state[k])
	}
	if v, ok := lastValue(d.orig, wmkafka.UUIDHeaderKey); !ok || v != uuid {
		b.add(wmkafka.UUIDHeaderKey, uuid)
	}
	b.add(HeaderOriginalHeaders, strconv.Itoa(len(d.orig)))
	return b.hs
}

// deadLetterHeaders returns the headers of the dead letter of d's record: the source record's
// own headers in order (names escaped with deadletter.EscapeKey, values unchanged), then the
// record's millrace retry state and origin under the names the original headers do not carry
// (a foreign header of the same name is content and keeps it alone), the record keys of rec
// and the origin as record keys (KeyOriginTopic, KeyOriginPartition, KeyOriginOffset, which no
// original header can forge), the UUID where the original headers do not carry it, and
// KeyOriginalHeaders.
func deadLetterHeaders(d *delivery, rec deadletter.Record) []sarama.RecordHeader {
	state := maps.Clone(d.stateMD) // the state headers as decode read them; nil on the source topic
	if state == nil {
		state = message.Metadata{}
	}
	if !d.fromRetryTopic {
		setOrigin(state, Origin{Topic: d.source, Partition: d.Partition, Offset: d.Offset})
		if !d.Timestamp.IsZero() {
			state[HeaderOriginalTimestamp] = strconv.FormatInt(d.Timestamp.UnixMilli(), 10)
		}
	}
	fields := rec.Fields()
	if o, ok := OriginFromMetadata(state); ok {
		fields[KeyOriginTopic] = o.Topic
		fields[KeyOriginPartition] = strconv.FormatInt(int64(o.Partition), 10)
		fields[KeyOriginOffset] = strconv.FormatInt(o.Offset, 10)
	}
	original := make(map[string]struct{}, len(d.orig))
	b := headerBuilder{buf: make([]byte, 0, headerBytes(d.orig)+512+len(rec.LastError)), hs: make([]sarama.RecordHeader, 0, len(d.orig)+len(state)+len(fields)+2)}
	for _, h := range d.orig {
		b.addRaw(h, true)
		original[string(h.Key)] = struct{}{}
	}
	for _, k := range slices.Sorted(maps.Keys(state)) {
		if _, taken := original[k]; taken {
			continue // the original's header keeps its name: state never doubles or overrides it
		}
		if k != wmkafka.UUIDHeaderKey && k != HeaderOriginalHeaders {
			b.add(deadletter.EscapeKey(k), state[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		b.add(k, fields[k])
	}
	if v, ok := lastValue(d.orig, wmkafka.UUIDHeaderKey); !ok || v != rec.UUID {
		b.add(wmkafka.UUIDHeaderKey, rec.UUID)
	}
	b.add(KeyOriginalHeaders, strconv.Itoa(len(d.orig)))
	return b.hs
}

// OriginalHeaders returns the original record's headers a dead-letter record holds, names
// unescaped, in order with repeated names kept, and true; or false when hs (a dead-letter
// record's headers) carries no valid KeyOriginalHeaders count.
func OriginalHeaders(hs []*sarama.RecordHeader) ([]deadletter.Field, bool) {
	hs = nonNil(hs)
	at := -1
	for i := len(hs) - 1; i >= 0; i-- {
		if string(hs[i].Key) == KeyOriginalHeaders {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, false
	}
	v := string(hs[at].Value)
	n, err := parseDecimalAttempt(v)
	if v == "0" {
		n, err = 0, nil
	}
	if err != nil || n > at || n >= maxHeaderCount {
		return nil, false
	}
	out := make([]deadletter.Field, 0, n)
	for _, h := range hs[:n] {
		k, ok := deadletter.OriginalKey(string(h.Key))
		if !ok { // an unescaped record key cannot be an original header
			return nil, false
		}
		out = append(out, deadletter.Field{Name: k, Type: NativeHeader, Value: h.Value})
	}
	return out, true
}

// attemptState reads the retry state of a record: the attempt history from its state headers
// (none on the source topic) and whether they were trusted.
func attemptState(state []*sarama.RecordHeader, fromRetryTopic bool) (millrace.Attempt, message.Metadata, error) {
	if !fromRetryTopic { // no state on the source topic: no map to build for every healthy record
		a, err := decodeAttempt(nil, false)
		return a, nil, err
	}
	md := headersMetadata(state)
	a, err := decodeAttempt(md, true)
	return a, md, err
}
