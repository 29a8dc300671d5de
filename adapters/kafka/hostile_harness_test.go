package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/adapters/kafka/internal/kafkarecords"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

// The harness is a foreign producer for the hostile-input battery (conformance.Foreign): it
// writes records with a raw sarama producer, headers exactly as given (order, repeated names,
// binary bytes), onto the source topic or forged onto the retry topic, and reads the
// dead-letter topic back with a raw consumer.

var _ conformance.Foreign = harness{}

// hdr is one record header; h builds a header list from name/value pairs.
func h(kv ...string) []sarama.RecordHeader {
	out := make([]sarama.RecordHeader, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, sarama.RecordHeader{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	return out
}

// foreignSaramaConfig is the configuration of the foreign producer and consumers: nothing of
// millrace's, the broker's own limits.
func foreignSaramaConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_1_0_0
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.MaxMessageBytes = 4 * kafkaMaxMessageBytes // the broker, not the client, decides
	sc.Producer.Retry.Max = 0
	return sc
}

// kafkaMaxMessageBytes is Kafka's default max.message.bytes (1 MiB + 12), kfake's too: the
// largest record batch a topic accepts.
const kafkaMaxMessageBytes = 1048588

// produceRaw writes one record to topic with a raw sarama producer.
func produceRaw(t testing.TB, topic string, value []byte, headers []sarama.RecordHeader) error {
	p, err := sarama.NewSyncProducer(brokers(t), foreignSaramaConfig())
	if err != nil {
		return fmt.Errorf("foreign producer: %w", err)
	}
	defer func() { _ = p.Close() }()
	pm := &sarama.ProducerMessage{Topic: topic, Headers: headers}
	if value != nil {
		pm.Value = sarama.ByteEncoder(value)
	}
	if _, _, err := p.SendMessage(pm); err != nil {
		return fmt.Errorf("foreign produce to %s: %w", topic, err)
	}
	return nil
}

// headerContent is a record's Content: the value, the headers in order, untyped.
func headerContent(value []byte, hs []*sarama.RecordHeader) conformance.Content {
	c := conformance.Content{Body: bytes.Clone(value), Fields: make([]deadletter.Field, 0, len(hs))}
	for _, hd := range hs {
		c.Fields = append(c.Fields, deadletter.Field{Name: string(hd.Key), Value: bytes.Clone(hd.Value)})
	}
	return c
}

// onRetryTopic says where a case's record goes: the source topic, where every header is
// content, or forged onto the retry topic (one delay tier: T.retry), where attempt headers are
// read as state.
type onRetryTopic bool

const (
	source    onRetryTopic = false
	retryTier onRetryTopic = true
)

func record(name string, where onRetryTopic, kinds []conformance.Kind, value []byte, headers []sarama.RecordHeader) conformance.ForeignCase {
	if where == retryTier {
		name = "retry topic: " + name
	} else {
		name = "source topic: " + name
	}
	return conformance.ForeignCase{Name: name, Kinds: kinds,
		Publish: func(_ context.Context, t testing.TB, _ millrace.Adapter, topic string) (conformance.Content, error) {
			to := topic
			if where == retryTier {
				to = topic + kafka.RetrySuffix
			}
			ptrs := make([]*sarama.RecordHeader, len(headers))
			for i := range headers {
				ptrs[i] = &headers[i]
			}
			return headerContent(value, ptrs), produceRaw(t, to, value, headers)
		}}
}

// ForeignCases: forged millrace and Spring attempt headers (2^63-1, negative, zero, 10^23,
// text, empty, the wrong width) on the source topic, where they are content, and forged onto
// the retry topic, where they are state; repeated headers; a retry record without headers;
// forged millrace-dlq-* and origin headers; binary, empty and maximal values.
func (harness) ForeignCases() []conformance.ForeignCase {
	k := func(ks ...conformance.Kind) []conformance.Kind { return ks }
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	const maxInt64 = "9223372036854775807"
	return []conformance.ForeignCase{
		record("millrace-attempt 2^63-1, retry_topic-attempts 2^31-1", source, k(conformance.KindOverflow, conformance.KindForgedKeys), []byte("o"),
			h(millrace.HeaderAttempt, maxInt64, "retry_topic-attempts", "\x7f\xff\xff\xff", "x-app", "kept")),
		record("millrace-attempt 2^63-1", retryTier, k(conformance.KindOverflow), []byte("o"),
			h(millrace.HeaderAttempt, maxInt64, "x-app", "kept")),
		record("retry_topic-attempts 2^31-1", retryTier, k(conformance.KindOverflow), []byte("o"),
			h("retry_topic-attempts", "\x7f\xff\xff\xff")),
		record("millrace-attempt -5, retry_topic-attempts -1", source, k(conformance.KindNegative), []byte("n"),
			h(millrace.HeaderAttempt, "-5", "retry_topic-attempts", "\xff\xff\xff\xff")),
		record("millrace-attempt -5", retryTier, k(conformance.KindNegative), []byte("n"),
			h(millrace.HeaderAttempt, "-5")),
		record("retry_topic-attempts -1", retryTier, k(conformance.KindNegative), []byte("n"),
			h("retry_topic-attempts", "\xff\xff\xff\xff")),
		record("millrace-attempt 0", source, k(conformance.KindZero), []byte("z"),
			h(millrace.HeaderAttempt, "0", "retry_topic-attempts", "\x00\x00\x00\x00")),
		record("millrace-attempt 0", retryTier, k(conformance.KindZero), []byte("z"),
			h(millrace.HeaderAttempt, "0")),
		record("retry_topic-attempts 0", retryTier, k(conformance.KindZero), []byte("z"),
			h("retry_topic-attempts", "\x00\x00\x00\x00")),
		record("millrace-attempt 10^23", source, k(conformance.KindHuge), []byte("h"),
			h(millrace.HeaderAttempt, "99999999999999999999999")),
		record("millrace-attempt 10^23", retryTier, k(conformance.KindHuge), []byte("h"),
			h(millrace.HeaderAttempt, "99999999999999999999999")),
		record("millrace-kafka-original-headers 10^23", retryTier, k(conformance.KindHuge), []byte("h"),
			h("x-app", "kept", millrace.HeaderAttempt, "2", kafka.HeaderOriginalHeaders, "99999999999999999999999")),
		record("millrace-attempt text", source, k(conformance.KindNonNumeric), []byte("t"),
			h(millrace.HeaderAttempt, "two")),
		record("millrace-attempt text", retryTier, k(conformance.KindNonNumeric), []byte("t"),
			h(millrace.HeaderAttempt, "two")),
		record("retry_topic-attempts of 3 and 8 bytes", source, k(conformance.KindWrongType), []byte("w"),
			h("retry_topic-attempts", "\x00\x00\x02", "kafka_original-partition", "\x00\x00\x00\x00\x00\x00\x00\x01")),
		record("retry_topic-attempts of 8 bytes", retryTier, k(conformance.KindWrongType), []byte("w"),
			h("retry_topic-attempts", "\x00\x00\x00\x00\x00\x00\x00\x02")),
		record("retry_topic-attempts of 3 bytes", retryTier, k(conformance.KindWrongType), []byte("w"),
			h("retry_topic-attempts", "\x00\x00\x02")),
		record("millrace-attempt as 4 binary bytes", retryTier, k(conformance.KindWrongType), []byte("w"),
			h(millrace.HeaderAttempt, "\x00\x00\x00\x02")),
		record("empty header values and an empty header name", source, k(conformance.KindEmpty), []byte("e"),
			h(millrace.HeaderAttempt, "", "retry_topic-attempts", "", "", "empty name", "x-empty", "")),
		record("millrace-attempt empty", retryTier, k(conformance.KindEmpty), []byte("e"),
			h(millrace.HeaderAttempt, "")),
		record("repeated headers, millrace-attempt twice", source, k(conformance.KindDuplicated), []byte("d"),
			h("trace", "a", millrace.HeaderAttempt, "1", "trace", "\x00\xff", millrace.HeaderAttempt, "3", "trace", "c")),
		record("millrace-attempt twice (2, then 1)", retryTier, k(conformance.KindDuplicated), []byte("d"),
			h(millrace.HeaderAttempt, "2", "trace", "a", millrace.HeaderAttempt, "1", "trace", "b")),
		record("no headers at all", retryTier, k(conformance.KindMissing), []byte("m"), nil),
		record("no headers, no value", source, k(conformance.KindMissing, conformance.KindEmptyPayload), nil, nil),
		record("record keys forged", source, k(conformance.KindForgedKeys), []byte("f"),
			h(deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "-3", deadletter.EscapePrefix+"x", "y",
				kafka.KeyOriginalHeaders, "0", deadletter.KeyMessageUUID, "forged", millrace.HeaderLastError, "forged error")),
		record("origin headers forged", source, k(conformance.KindForgedKeys), []byte("f"),
			h(millrace.HeaderOriginalTopic, "payments", kafka.HeaderOriginalPartition, "7", kafka.HeaderOriginalOffset, "42",
				kafka.HeaderOriginalTimestamp, "0", kafka.HeaderOriginalHeaders, "1")),
		record("record keys forged, attempt 2", retryTier, k(conformance.KindForgedKeys), []byte("f"),
			h(millrace.HeaderAttempt, "2", deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "99", kafka.KeyOriginalHeaders, "1")),
		record("binary value, binary header names and values", source, k(conformance.KindBinaryPayload), binary,
			h("bin", "\x00\xff", "\xff\xfe", "\x00", "bin", string(binary))),
		record("empty value, empty header values", source, k(conformance.KindEmptyPayload), []byte{},
			h("x", "")),
		sizeLimitCase(),
	}
}

// sizeLimitCase is a record whose batch is exactly the source topic's max.message.bytes, with
// headers: the largest record any producer can write there.
func sizeLimitCase() conformance.ForeignCase {
	headers := h("x-app", "kept", millrace.HeaderAttempt, "1")
	return conformance.ForeignCase{Name: "source topic: record at max.message.bytes", Kinds: []conformance.Kind{conformance.KindSizeLimit},
		Publish: func(_ context.Context, t testing.TB, _ millrace.Adapter, topic string) (conformance.Content, error) {
			value := bytes.Repeat([]byte{0xfe, 0x00, 'x'}, kafkaMaxMessageBytes/3)
			// Shrink the value until the broker takes it: the batch framing is a few dozen bytes.
			var err error
			for range 64 {
				if err = produceRaw(t, topic, value, headers); !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
					break
				}
				value = value[:len(value)-16]
			}
			ptrs := make([]*sarama.RecordHeader, len(headers))
			for i := range headers {
				ptrs[i] = &headers[i]
			}
			return headerContent(value, ptrs), err
		}}
}

// NotApplicable: every kind has a case on Kafka.
func (harness) NotApplicable() map[conformance.Kind]string { return nil }

// DeadLetterContents reads every record of the dead-letter topic, from the oldest offset up to
// the end offset each partition has when the call starts, with a fresh consumer and no group
// (so repeated calls each see the whole topic and change nothing), and returns each record's
// value and headers in order, the dead-letter record's own headers (unescaped millrace-dlq-*
// names, and the UUID header millrace appends after the original headers) removed and escaped
// original names given back.
func (harness) DeadLetterContents(ctx context.Context, t testing.TB, _ millrace.Adapter, topic string) ([]conformance.Content, error) {
	dlq := topic + kafka.DeadLetterSuffix
	sc := foreignSaramaConfig()
	sc.Consumer.IsolationLevel = sarama.ReadCommitted // what an aborted transaction wrote is no dead letter
	client, err := sarama.NewClient(brokers(t), sc)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Close() }()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer func() { _ = consumer.Close() }()
	parts, err := client.Partitions(dlq)
	if err != nil {
		return nil, err
	}
	var out []conformance.Content
	for _, p := range parts {
		end, err := client.GetOffset(dlq, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		if end <= 0 {
			continue
		}
		oldest, err := client.GetOffset(dlq, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		// Dead letters are written in transactions: the partition's last offsets are commit
		// markers no consumer receives, so the read ends after as many records as the broker
		// says a read_committed reader gets.
		want, err := kafkarecords.Count(client, dlq, p, oldest, end)
		if err != nil {
			return nil, err
		}
		pc, err := consumer.ConsumePartition(dlq, p, oldest)
		if err != nil {
			return nil, err
		}
		for got := 0; got < want; got++ {
			select {
			case m := <-pc.Messages():
				out = append(out, deadLetterContent(m.Value, m.Headers))
			case err := <-pc.Errors():
				_ = pc.Close()
				return nil, err
			case <-ctx.Done():
				_ = pc.Close()
				return nil, ctx.Err()
			}
		}
		_ = pc.Close()
	}
	return out, nil
}

// deadLetterContent strips a dead-letter record's own headers and unescapes the rest.
func deadLetterContent(value []byte, hs []*sarama.RecordHeader) conformance.Content {
	n := len(hs)
	if _, ok := kafka.OriginalHeaders(hs); ok {
		n = countOf(hs)
	}
	kept := make([]*sarama.RecordHeader, 0, len(hs))
	for i, hd := range hs {
		name, ok := deadletter.OriginalKey(string(hd.Key))
		if !ok {
			continue // a record key
		}
		if i >= n && name == "_watermill_message_uuid" {
			continue // the record's UUID, appended after the original headers
		}
		kept = append(kept, &sarama.RecordHeader{Key: []byte(name), Value: hd.Value})
	}
	return headerContent(value, kept)
}

// countOf returns the value of the last KeyOriginalHeaders header (valid: OriginalHeaders
// accepted it).
func countOf(hs []*sarama.RecordHeader) int {
	for i := len(hs) - 1; i >= 0; i-- {
		if string(hs[i].Key) == kafka.KeyOriginalHeaders {
			n := 0
			fmt.Sscan(string(hs[i].Value), &n)
			return n
		}
	}
	return len(hs)
}

// Settled reports whether the adapter's consumer group has committed every record of the
// source topic and of its retry topics.
func (harness) Settled(_ context.Context, t testing.TB, am millrace.Adapter, topic string) error {
	a := am.(*kafka.Adapter)
	client, err := sarama.NewClient(brokers(t), foreignSaramaConfig())
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return err
	}
	names, err := client.Topics()
	if err != nil {
		return err
	}
	want := map[string][]int32{}
	for _, name := range names {
		if name != topic && !strings.HasPrefix(name, topic+kafka.RetrySuffix) {
			continue
		}
		parts, err := client.Partitions(name)
		if err != nil {
			return err
		}
		want[name] = parts
	}
	if len(want) == 0 {
		return fmt.Errorf("no topic %s", topic)
	}
	resp, err := ca.ListConsumerGroupOffsets(a.Group(), want)
	if err != nil {
		return err
	}
	var behind []string
	for name, parts := range want {
		for _, p := range parts {
			end, err := client.GetOffset(name, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			committed := int64(-1)
			if b := resp.GetBlock(name, p); b != nil {
				committed = b.Offset
			}
			if end > 0 && committed != end {
				if k, err := committedRecords(brokers(t), name, p, committed, end); err != nil {
					return err
				} else if committed >= 0 && k == 0 {
					continue // only transaction markers past the commit
				}
				behind = append(behind, fmt.Sprintf("%s/%d committed %d of %d", name, p, committed, end))
			}
		}
	}
	if len(behind) > 0 {
		return errors.New(strings.Join(behind, ", "))
	}
	return nil
}
