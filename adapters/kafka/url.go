package kafka

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers kafka:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens kafka:// URLs:
//
//	kafka://host:port[,host:port...]?group=G[&at_least_once=true&transactional_id_prefix=P]
//
// group is required unless the broker is opened with Options.NoConsume.
type urlDriver struct{}

var _ brokerurl.Driver = urlDriver{}

func (urlDriver) Schemes() []string { return []string{"kafka"} }

// configFromURL builds the adapter's Config from u without connecting.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	p := brokerurl.NewParams(u)
	cfg := Config{
		Brokers:               strings.Split(u.Host, ","),
		ConsumerGroup:         p.String("group", ""),
		AtLeastOnce:           p.Bool("at_least_once", false),
		TransactionalIDPrefix: p.String("transactional_id_prefix", ""),
		Logger:                opts.LoggerOrDiscard(),
	}
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: kafka:// needs at least one broker, as kafka://host:port[,host:port...]", brokerurl.ErrInvalidURL)
	}
	if cfg.ConsumerGroup == "" {
		if !opts.NoConsume {
			return Config{}, fmt.Errorf("%w: kafka:// needs parameter group, the consumer group every subscription joins (e.g. ?group=billing)", brokerurl.ErrInvalidURL)
		}
		// Never consumes: the adapter requires a group but never joins it.
		cfg.ConsumerGroup = "millrace-cli"
	}
	return cfg, cfg.Validate()
}

func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	// New makes no call: check a broker answers, so an unreachable cluster fails here.
	client, err := sarama.NewClient(cfg.Brokers, StoreSaramaConfig(cfg.Sarama))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	_ = client.Close()
	return New(cfg)
}

func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(cfg.Brokers, StoreSaramaConfig(cfg.Sarama))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	b := &urlBroker{client: client, keys: map[string]string{}}
	cfg.PartitionKey = b.partitionKey
	b.a, err = New(cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}

// urlBroker is Kafka opened by URL: replays are acknowledged (acks=all) publishes keyed by the
// dead letter's original key (Native content re-published exactly, see PublishNative), and dead
// letters are read from the adapter's dead-letter topics with removed marks in
// "<dlq>.replayed" (DeadLetterStore).
type urlBroker struct {
	a      *Adapter
	client sarama.Client

	mu       sync.Mutex
	keys     map[string]string   // message UUID -> record key of the replay being published
	producer sarama.SyncProducer // for PublishNative, connected on first use
}

var (
	_ brokerurl.Broker           = (*urlBroker)(nil)
	_ deadletter.NativePublisher = (*urlBroker)(nil)
)

func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// DeadLetterDestinations is not implemented yet.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	return nil, fmt.Errorf("kafka: listing dead-letter topics is not implemented yet")
}

func (b *urlBroker) partitionKey(_ string, msg *message.Message) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[msg.UUID]
	delete(b.keys, msg.UUID)
	return k, nil
}

func (b *urlBroker) PrepareReplay(rec deadletter.Record, msg *message.Message) {
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
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	headers := make([]sarama.RecordHeader, 0, len(rec.Native))
	for _, f := range rec.Native {
		if f.Type != NativeHeader {
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
func (b *urlBroker) nativeProducer() (sarama.SyncProducer, error) {
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
func (b *urlBroker) TopicExists(_ context.Context, topic string) (bool, error) {
	return TopicExists(b.client, topic)
}

func (b *urlBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

func (b *urlBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return NewDeadLetterStore(b.client, dlq, StoreConfig{})
}

func (b *urlBroker) Close() error {
	err := b.a.Close()
	b.mu.Lock()
	if b.producer != nil {
		_ = b.producer.Close()
	}
	b.mu.Unlock()
	_ = b.client.Close()
	return err
}
