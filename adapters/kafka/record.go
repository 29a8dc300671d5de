package kafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// RecordInfo is the Kafka position of a consumed message.
type RecordInfo struct {
	// Topic is the topic the record was read from: the source topic or one of its retry topics.
	Topic string
	// Partition and Offset locate the record.
	Partition int32
	Offset    int64
	// Key is the record key, nil when it had none.
	Key []byte
	// Timestamp is the record's timestamp.
	Timestamp time.Time
}

// delivery is the native state of one delivery of a record, stored in the message context for
// DecodeAttempt, ScheduleRetry and DeadLetter.
type delivery struct {
	RecordInfo
	// source is the topic the subscription was made for (a retry topic's source topic).
	source string
	// fromRetryTopic is true when Topic is one of source's retry topics.
	fromRetryTopic bool
	// count is the number of deliveries of this record in this subscription, 1 on the first.
	count int
	// firstAt is when this record was first delivered in this subscription.
	firstAt time.Time
	// attempt is the attempt history decoded from the headers (count not yet applied).
	attempt millrace.Attempt
	// value, orig and state are the record's value, its original content's headers and
	// millrace's retry state headers (see splitHeaders); stateMD is state as metadata.
	value   []byte
	orig    []*sarama.RecordHeader
	state   []*sarama.RecordHeader
	stateMD message.Metadata
	// pipe and flight are the pipeline and admission the record is delivered from.
	pipe   *pipeline
	flight *flight
}

// handled tells the record's pipeline that its handler is done and only the write of its retry
// or dead letter is awaited: the record leaves its in-flight slot to another while it stays
// unacknowledged (its offset is marked only once that write is acknowledged).
func (d *delivery) handled() {
	if d.pipe != nil {
		d.pipe.releaseSlot(d.flight)
	}
}

type deliveryKey struct{}

func withDelivery(ctx context.Context, d *delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

func deliveryFrom(ctx context.Context) (*delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(*delivery)
	return d, ok && d != nil
}

// Record returns the Kafka position of a message consumed through this adapter's subscriber;
// ok is false for any other message.
func Record(msg *message.Message) (info RecordInfo, ok bool) {
	d, ok := deliveryFrom(msg.Context())
	if !ok {
		return RecordInfo{}, false
	}
	return d.RecordInfo, true
}

// nativeID names a record for logs and dead-letter records: topic-partition@offset, as Kafka
// tools print it.
func (r RecordInfo) nativeID() string {
	return positionID(r.Topic, r.Partition, r.Offset)
}

// positionID formats topic-partition@offset without fmt: it runs for every delivery.
func positionID(topic string, partition int32, offset int64) string {
	b := make([]byte, 0, len(topic)+24)
	b = append(b, topic...)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '@')
	b = strconv.AppendInt(b, offset, 10)
	return string(b)
}

// recordKey carries the key a retry or dead-letter publish must keep.
type recordKey struct{}

// recordHeaders carries the exact headers ([]sarama.RecordHeader) of a retry or dead-letter
// record built from a consumed record; the message's metadata is then not marshalled.
type recordHeaders struct{}

// marshaler writes a message as a record: watermill-kafka's default layout (payload as value,
// metadata as headers, UUID in the _watermill_message_uuid header) plus the record key: the
// original record's for retries and dead letters, otherwise PartitionKey's.
type marshaler struct {
	partitionKey func(topic string, msg *message.Message) (string, error)
}

// Marshal implements watermill-kafka's Marshaler.
func (m marshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	var pm *sarama.ProducerMessage
	if hs, ok := msg.Context().Value(recordHeaders{}).([]sarama.RecordHeader); ok {
		pm = &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(msg.Payload), Headers: hs}
	} else {
		var err error
		if pm, err = marshalDefault(topic, msg); err != nil {
			return nil, err
		}
	}
	if key, ok := msg.Context().Value(recordKey{}).([]byte); ok {
		if key != nil {
			pm.Key = sarama.ByteEncoder(key)
		}
		return pm, nil
	}
	if m.partitionKey != nil {
		key, err := m.partitionKey(topic, msg)
		if err != nil {
			return nil, fmt.Errorf("kafka: partition key for topic %q: %w", topic, err)
		}
		pm.Key = sarama.StringEncoder(key)
	}
	return pm, nil
}

// marshalDefault writes msg the way watermill-kafka's DefaultMarshaler does (the UUID header
// first, then one header per metadata entry, the payload as value) with two allocations for
// all the headers instead of two per header plus the slice's regrowth: a retry record carries
// a dozen headers, and its marshalling was most of the garbage a failing record made.
func marshalDefault(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	if _, ok := msg.Metadata[wmkafka.UUIDHeaderKey]; ok {
		return nil, fmt.Errorf("kafka: metadata %s is reserved by watermill for message UUID", wmkafka.UUIDHeaderKey)
	}
	size := len(wmkafka.UUIDHeaderKey) + len(msg.UUID)
	for k, v := range msg.Metadata {
		size += len(k) + len(v)
	}
	buf := make([]byte, 0, size)
	bytesOf := func(s string) []byte {
		start := len(buf)
		buf = append(buf, s...)
		return buf[start:len(buf):len(buf)]
	}
	headers := make([]sarama.RecordHeader, 0, len(msg.Metadata)+1)
	headers = append(headers, sarama.RecordHeader{Key: bytesOf(wmkafka.UUIDHeaderKey), Value: bytesOf(msg.UUID)})
	for k, v := range msg.Metadata {
		headers = append(headers, sarama.RecordHeader{Key: bytesOf(k), Value: bytesOf(v)})
	}
	return &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(msg.Payload), Headers: headers}, nil
}

// toMessage turns a consumed record into a message the way watermill-kafka's DefaultMarshaler
// does (payload unchanged, headers as metadata byte for byte, UUID from the
// _watermill_message_uuid header), without its failure modes: a record without that header gets
// its position as UUID, so every redelivery and retry of a foreign record keeps one UUID.
func toMessage(rec *sarama.ConsumerMessage) *message.Message {
	md := toMetadata(rec)
	uuid := md[wmkafka.UUIDHeaderKey]
	delete(md, wmkafka.UUIDHeaderKey)
	if uuid == "" {
		uuid = positionID(rec.Topic, rec.Partition, rec.Offset)
	}
	msg := message.NewMessage(uuid, rec.Value)
	msg.Metadata = md
	return msg
}

// toMetadata reads a record's headers as metadata, byte for byte; of repeated keys the last
// wins.
func toMetadata(rec *sarama.ConsumerMessage) message.Metadata {
	md := make(message.Metadata, len(rec.Headers))
	for _, h := range rec.Headers {
		if h != nil {
			md[string(h.Key)] = string(h.Value)
		}
	}
	return md
}
