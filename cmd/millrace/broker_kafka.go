package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
)

// kafkaBroker is Kafka through adapters/kafka: replays are acknowledged (acks=all) publishes
// keyed by the dead letter's original key (Native content re-published exactly, see
// PublishNative), and dead letters are read from the adapter's
// dead-letter topics with removed marks in "<dlq>.replayed" (package kafkastore).
type kafkaBroker struct {
	a      *kafka.Adapter
	client sarama.Client

	mu       sync.Mutex
	keys     map[string]string   // message UUID -> record key of the replay being published
	producer sarama.SyncProducer // for PublishNative, connected on first use
}

// openKafka connects to kafka://host:port[,host:port...], the URL form of
// examples/kafka-to-sqs.
func openKafka(_ context.Context, u *url.URL) (Broker, error) {
	brokers := strings.Split(u.Host, ",")
	client, err := sarama.NewClient(brokers, kafka.StoreSaramaConfig(nil))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	b := &kafkaBroker{client: client, keys: map[string]string{}}
	// The CLI never consumes: the group is required by the adapter but unused.
	b.a, err = kafka.New(kafka.Config{Brokers: brokers, ConsumerGroup: "millrace-cli", PartitionKey: b.partitionKey})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}

func (b *kafkaBroker) Publisher() message.Publisher { return b.a.Publisher() }

// partitionKey keys a replay by its dead letter's original key, so it lands in the partition
// of the key's other records (keyless dead letters get the empty key). The entry is taken out
// as it is read (the marshaler asks once per publish), so a long replay does not accumulate one
// map entry per record.
func (b *kafkaBroker) partitionKey(_ string, msg *message.Message) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[msg.UUID]
	delete(b.keys, msg.UUID)
	return k, nil
}

func (b *kafkaBroker) prepareReplay(rec deadletter.Record, msg *message.Message) {
	b.mu.Lock()
	b.keys[msg.UUID] = rec.OriginalKey
	b.mu.Unlock()
}

// PublishNative re-publishes a dead letter's Native content exactly (the original record's
// headers in order, repeated names and binary values kept, as deadletter/kafkastore gives them
// back): one record with rec.Payload as its value, rec.OriginalKey as its key (none when
// empty), and exactly those headers, acknowledged by the brokers (acks=all). Fields that are
// not Kafka headers (another broker's) are refused with deadletter.ErrNotReplayable. The
// record carries no UUID header unless the original did: it is the original, not a copy
// millrace made.
func (b *kafkaBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	headers := make([]sarama.RecordHeader, 0, len(rec.Native))
	for _, f := range rec.Native {
		if f.Type != kafka.NativeHeader {
			return fmt.Errorf("%w: field %q is of type %q, not a Kafka header", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		headers = append(headers, sarama.RecordHeader{Key: []byte(f.Name), Value: f.Value})
	}
	p, err := b.nativeProducer()
	if err != nil {
		return err
	}
	pm := &sarama.ProducerMessage{Topic: topic, Headers: headers}
	if rec.Payload != nil {
		pm.Value = sarama.ByteEncoder(rec.Payload)
	}
	if rec.OriginalKey != "" {
		pm.Key = sarama.StringEncoder(rec.OriginalKey)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_, _, err = p.SendMessage(pm)
	return err
}

// nativeProducer returns the producer of PublishNative, connecting it on first use.
func (b *kafkaBroker) nativeProducer() (sarama.SyncProducer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.producer == nil {
		p, err := sarama.NewSyncProducerFromClient(b.client)
		if err != nil {
			return nil, fmt.Errorf("connect a producer: %w", err)
		}
		b.producer = p
	}
	return b.producer, nil
}

// TopicExists reports whether topic is in the cluster metadata: the adapter never creates a
// topic on publish, and a publish to a missing topic would fail after Sarama's retries.
func (b *kafkaBroker) TopicExists(_ context.Context, topic string) (bool, error) {
	return kafka.TopicExists(b.client, topic)
}

func (b *kafkaBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

func (b *kafkaBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return kafka.NewDeadLetterStore(b.client, dlq, kafka.StoreConfig{})
}

func (b *kafkaBroker) Close() error {
	err := b.a.Close()
	b.mu.Lock()
	if b.producer != nil {
		_ = b.producer.Close()
	}
	b.mu.Unlock()
	_ = b.client.Close()
	return err
}
