package kafka

import (
	"fmt"
	"math"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// Sizing of the retry and dead-letter topics and of the producer that writes them.
//
// A record that reached the handler must always be dead-letterable intact, and a failed
// dead-letter write never acknowledges the original: a dead letter that does not fit its topic
// would be redelivered forever. So Provision learns the source topic's max.message.bytes S and
// sizes everything millrace writes from S, by a bound that holds for any record of a source
// batch of at most S bytes, however hostile its headers.
//
// The bound, in sarama's accounting. Sarama refuses a record whose ProducerMessage.ByteSize
// exceeds Producer.MaxMessageBytes, where for the v2 record format ByteSize is
//
//	36 + len(key) + len(value) + sum over headers (len(name) + len(value) + 10)
//
// (36 and 10 are the largest varint framing of a record and of a header, so ByteSize is never
// below the record's encoded size). A source record sits in a batch of at most S bytes that
// has a 61-byte batch header and, per record, at least 7 bytes of framing (length, attributes,
// timestamp and offset deltas, key and value lengths, header count: one varint byte each) and
// 2 per header (name and value lengths). With c its content bytes (key, value, header names
// and values) and n its headers:
//
//	c + 2n <= B = S - 61 - 7
//
// The largest record millrace writes from it is its dead letter (a retry copy carries less).
// Counting what each byte of B can become in it:
//   - a byte of the value or of a header name or value: itself, 1;
//   - a byte of the key: the key, and its copies in millrace-original-key and
//     millrace-dlq-original-key, 3; a byte of the UUID header's value: itself and its copy in
//     millrace-dlq-message-uuid, 2 (key and UUID are disjoint parts of the record);
//   - the 2 bytes of a header's framing: sarama's 10, 5 a byte;
//   - a header whose name starts with deadletter.KeyPrefix is escaped, gaining
//     len(EscapePrefix) bytes; it takes at least len(KeyPrefix) + 2 = 15 bytes of B, which
//     become at most len(KeyPrefix) + 10 + len(EscapePrefix) = 40: under 3 a byte
//     (escapeFactor, computed from the constants, rounded up);
//   - millrace's own headers and record keys otherwise (names, numbers, times, topic names,
//     two copies of the last error, each at most millrace.MaxErrorText, the error types and
//     panic stack, at most deadletter.MaxErrorTypesBytes and deadletter.MaxPanicStackBytes,
//     the handler name): at most fixedOverhead, whatever the record.
//
// No byte of B becomes more than perByte = max(5, 3, escapeFactor) = 5 bytes, so
//
//	maxRecordBytes(S) = 36 + perByte*B + fixedOverhead
//
// is a ByteSize no record millrace writes for that source exceeds: about 5 S, nearly reached
// by a source record of nothing but empty headers (2 bytes each on the broker, 10 in sarama's
// accounting). A retry or dead-letter topic then takes any batch the producer forms (a
// partition's batch holds records whose ByteSize sums to at most Producer.MaxMessageBytes)
// with the 61-byte batch header, plus the worst expansion of the configured compression codec
// (see batchBytes).
//
// The bound covers source records written uncompressed. A producer that compressed its batch
// may have sent a record larger, uncompressed, than max.message.bytes; millrace writes it
// with Config.Sarama's compression (none by default), so its copies fit only as far as that
// compresses it as well. And it covers retry records millrace wrote: a record someone else
// wrote to T.retry* is trusted like millrace's (see the package documentation) and may exceed
// it.

// Kafka's record-batch framing the bound relies on.
const (
	batchHeaderBytes = 61 // baseOffset .. record count of a v2 batch
	minRecordFraming = 7  // one varint byte each: length, attributes, deltas, key and value lengths, header count
	minHeaderFraming = 2  // one varint byte each: name and value lengths
	recordOverhead   = 36 // sarama's maximumRecordOverhead
	headerOverhead   = 10 // sarama's 2*binary.MaxVarintLen32 per header
)

// fixedOverhead bounds what millrace adds to a record besides copies of its content: about
// 25 header and record-key names (under 40 bytes each, plus sarama's 10 a header), numbers
// and times (under 40 bytes each), five topic names or positions (Kafka topic names are at
// most 249 bytes), two copies of the last error (millrace.MaxErrorText each) and the Watermill
// handler name, for which 16 KiB leaves more than 8 KiB; and the error types and panic stack
// of a dead letter, each at most its bound (deadletter.MaxErrorTypesBytes,
// deadletter.MaxPanicStackBytes) with its header's name (under 40 bytes) and sarama's 10.
const fixedOverhead = 16<<10 + deadletter.MaxErrorTypesBytes + deadletter.MaxPanicStackBytes + 2*(40+headerOverhead)

// DefaultMaxMessageBytes is Kafka's default max.message.bytes and message.max.bytes (1 MiB +
// 12), assumed when the brokers report neither.
const DefaultMaxMessageBytes = 1048588

// maxRecordBytes returns the largest ByteSize of a record millrace writes (retry copy or dead
// letter) from a record of a topic whose max.message.bytes is s, saturating at math.MaxInt64.
func maxRecordBytes(s int64) int64 {
	b := max(s-batchHeaderBytes-minRecordFraming, 0)
	return satAdd(satAdd(recordOverhead, satMul(perByte, b)), fixedOverhead)
}

// escapeFactor is, rounded up, what one byte of an escaped header can become in a dead
// letter; perByte what any byte of a source record can (see above).
const (
	escapeHeaderMin = len(deadletter.KeyPrefix) + minHeaderFraming
	escapeFactor    = (len(deadletter.KeyPrefix) + headerOverhead + len(deadletter.EscapePrefix) + escapeHeaderMin - 1) / escapeHeaderMin
	perByte         = int64(max(headerOverhead/minHeaderFraming, 3, escapeFactor))
)

// batchBytes returns the largest record batch a producer with Producer.MaxMessageBytes p
// sends to one partition: the batch header and records whose ByteSize sums to at most p,
// expanded by the codec's worst case when it compresses (snappy's 32 + n + n/6 is the largest
// of the four; the margin covers frame headers).
func batchBytes(p int64, codec sarama.CompressionCodec) int64 {
	n := p
	if codec != sarama.CompressionNone {
		n = satAdd(satAdd(n, n/6), 1024)
	}
	return satAdd(n, batchHeaderBytes)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(k, b int64) int64 {
	if b != 0 && k > math.MaxInt64/b {
		return math.MaxInt64
	}
	return k * b
}

// maxProducerBytes is the largest Producer.MaxMessageBytes sarama honours: a produce request
// is at most sarama.MaxRequestSize, less the 10 KiB its produce set keeps for framing.
func maxProducerBytes() int64 { return int64(sarama.MaxRequestSize) - 10*1024 - 1 }

// saramaDefaultMaxMessageBytes is sarama's default Producer.MaxMessageBytes. A Config.Sarama
// with another value chose its own.
var saramaDefaultMaxMessageBytes = sarama.NewConfig().Producer.MaxMessageBytes

// sizing is how a source topic's retries and dead letters are written: the producer limit and
// the max.message.bytes its retry and dead-letter topics need.
type sizing struct {
	producer   int64 // Producer.MaxMessageBytes of the retry producer
	topicLimit int64 // max.message.bytes the retry and dead-letter topics need
}

// sizeFor returns the sizing for a source topic of max.message.bytes s, or an error when it
// cannot be met: a *millrace.ConfigError when Config.Sarama sets a smaller
// Producer.MaxMessageBytes, an error naming the topic when no producer can write it.
func (a *Adapter) sizeFor(topic string, s int64) (sizing, error) {
	need := maxRecordBytes(s)
	z := sizing{producer: need}
	if user := a.userMaxMessageBytes(); user > 0 {
		if user < need {
			return sizing{}, &millrace.ConfigError{Field: "kafka.Config.Sarama.Producer.MaxMessageBytes", Value: strconv.FormatInt(user, 10),
				Rule: fmt.Sprintf("must be at least %d to write the retries and dead letters of topic %q (max.message.bytes %d) intact, or left at sarama's default (%d) for the adapter to size it",
					need, topic, s, saramaDefaultMaxMessageBytes)}
		}
		z.producer = user // respected: it is larger
	}
	if z.producer > maxProducerBytes() {
		return sizing{}, fmt.Errorf("kafka: topic %q has max.message.bytes %d: its retries and dead letters may need %d bytes, more than a sarama produce request holds (sarama.MaxRequestSize %d); lower the topic's max.message.bytes or raise sarama.MaxRequestSize",
			topic, s, z.producer, sarama.MaxRequestSize)
	}
	z.topicLimit = batchBytes(z.producer, a.sc.Producer.Compression)
	if z.topicLimit > math.MaxInt32 {
		return sizing{}, fmt.Errorf("kafka: topic %q: its retry and dead-letter topics would need max.message.bytes %d, more than Kafka allows", topic, z.topicLimit)
	}
	return z, nil
}

// userMaxMessageBytes returns the Producer.MaxMessageBytes Config.Sarama chose, 0 when it
// kept sarama's default.
func (a *Adapter) userMaxMessageBytes() int64 {
	if a.cfg.Sarama == nil || a.cfg.Sarama.Producer.MaxMessageBytes == saramaDefaultMaxMessageBytes {
		return 0
	}
	return int64(a.cfg.Sarama.Producer.MaxMessageBytes)
}

// maxMessageBytesKey is the topic config the sizing reads and writes; brokerMaxMessageBytesKey
// is the broker default it falls back to.
const (
	maxMessageBytesKey       = "max.message.bytes"
	brokerMaxMessageBytesKey = "message.max.bytes"
)

// topicMaxMessageBytes returns the effective max.message.bytes of each topic (which must
// exist): the topic's own value, else the broker's message.max.bytes, else Kafka's default.
func (a *Adapter) topicMaxMessageBytes(admin sarama.ClusterAdmin, topics []string) (map[string]int64, error) {
	res := make([]*sarama.ConfigResource, len(topics))
	for i, t := range topics {
		res[i] = &sarama.ConfigResource{Type: sarama.TopicResource, Name: t, ConfigNames: []string{maxMessageBytesKey}}
	}
	results, err := admin.DescribeConfigs(res, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, fmt.Errorf("kafka: describe the configs of topics %v: %w", topics, err)
	}
	out := make(map[string]int64, len(topics))
	for _, r := range results {
		if r.ErrorCode != sarama.ErrNoError {
			return nil, fmt.Errorf("kafka: describe the config of topic %q: %w %s", r.Name, r.ErrorCode, r.ErrorMsg)
		}
		for _, c := range r.Configs {
			if c.Name != maxMessageBytesKey {
				continue
			}
			n, err := strconv.ParseInt(c.Value, 10, 64)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("kafka: topic %q reports %s = %q", r.Name, maxMessageBytesKey, c.Value)
			}
			out[r.Name] = n
		}
	}
	var brokerDefault int64
	for _, t := range topics {
		if _, ok := out[t]; ok {
			continue
		}
		if brokerDefault == 0 {
			if brokerDefault, err = a.brokerMaxMessageBytes(admin); err != nil {
				return nil, err
			}
		}
		out[t] = brokerDefault
	}
	return out, nil
}

// brokerMaxMessageBytes returns the controller's message.max.bytes, or Kafka's default when
// it reports none.
func (a *Adapter) brokerMaxMessageBytes(admin sarama.ClusterAdmin) (int64, error) {
	_, controller, err := admin.DescribeCluster()
	if err != nil {
		return 0, fmt.Errorf("kafka: describe the cluster: %w", err)
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: strconv.Itoa(int(controller)), ConfigNames: []string{brokerMaxMessageBytesKey}})
	if err != nil {
		return 0, fmt.Errorf("kafka: describe the config of broker %d: %w", controller, err)
	}
	for _, c := range entries {
		if c.Name == brokerMaxMessageBytesKey {
			if n, err := strconv.ParseInt(c.Value, 10, 64); err == nil && n > 0 {
				return n, nil
			}
		}
	}
	return DefaultMaxMessageBytes, nil
}

// ensureMaxMessageBytes raises the max.message.bytes of every topic below limit to limit
// (IncrementalAlterConfigs: the topics' other settings stay). It fails, naming the topic and
// the size, when the brokers refuse: a retry or dead letter that does not fit would keep its
// original unacknowledged and redelivered forever.
func (a *Adapter) ensureMaxMessageBytes(admin sarama.ClusterAdmin, source string, topics []string, limit int64) error {
	have, err := a.topicMaxMessageBytes(admin, topics)
	if err != nil {
		return err
	}
	value := strconv.FormatInt(limit, 10)
	for _, t := range topics {
		if have[t] >= limit {
			continue
		}
		err := admin.IncrementalAlterConfig(sarama.TopicResource, t, map[string]sarama.IncrementalAlterConfigsEntry{
			maxMessageBytesKey: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value},
		}, false)
		if err != nil {
			return fmt.Errorf("kafka: topic %q has max.message.bytes %d, but the retries and dead letters of %q need %d: raising it failed (grant AlterConfigs on the topic, or set it yourself): %w",
				t, have[t], source, limit, err)
		}
	}
	return nil
}
