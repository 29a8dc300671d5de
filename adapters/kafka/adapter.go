package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// BrokerName is the adapter's name in Attempts and dead-letter records.
const BrokerName = "kafka"

// DeadLetterSuffix is appended to a source topic to name its dead-letter topic.
const DeadLetterSuffix = ".dlq"

// Adapter implements millrace.Adapter on Kafka with retry topics. It is safe for concurrent use.
type Adapter struct {
	cfg    Config
	sc     *sarama.Config
	logger *slog.Logger
	// pub sends what Publisher publishes, at once; retries sends retries and dead letters,
	// lingering up to Config.RetryLinger so that those of many failing records share produce
	// requests, for topics Provision has not sized (see size.go); retryConf is its
	// configuration.
	pub, retries *producer
	retryConf    *sarama.Config

	// pubMu is read-held across every send and write-held by Close before it closes the
	// producers: publishing to a closed sarama producer panics (send on closed channel).
	// It is apart from mu so a slow publish never holds up tierFor and Provision.
	pubMu     sync.RWMutex
	pubClosed bool

	mu    sync.Mutex
	tiers map[string][]tier // source topic -> its retry tiers, shortest delay first
	// sized maps a provisioned source topic to the producer of its retries and dead letters,
	// whose Producer.MaxMessageBytes fits them (see size.go); byLimit holds those producers by
	// that limit, retries among them.
	sized   map[string]*producer
	byLimit map[int]*producer
	admin   sarama.ClusterAdmin
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup

	sessions atomic.Int64 // group sessions started by this adapter's subscriptions
	// retryQueues is what the retry partitions' queues did (see retryQueue).
	retryQueues retryQueueStats

	// Backlog's client and admin (connected on first use, guarded by mu), its reads in
	// progress by topic, and the dead letters it counted per dead-letter partition.
	blClient     sarama.Client
	blAdmin      sarama.ClusterAdmin
	backlogReads map[string]*backlogRead
	dlqCounts    map[partitionKey]dlqCount
}

var _ millrace.Adapter = (*Adapter)(nil)

// New validates cfg and connects the adapter's producer to the brokers.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sc := cfg.saramaConfig()
	// Every send returns after the brokers acknowledged its records (acks=all), which is what
	// "retry safely written" means.
	m := marshaler{partitionKey: cfg.PartitionKey}
	pub, err := newProducer(cfg.Brokers, sc, m)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect producer to %v: %w", cfg.Brokers, err)
	}
	rc := *sc
	if cfg.RetryLinger > 0 {
		rc.Producer.Flush.Frequency = cfg.RetryLinger
	}
	retries, err := newProducer(cfg.Brokers, &rc, m)
	if err != nil {
		pub.close()
		return nil, fmt.Errorf("kafka: connect retry producer to %v: %w", cfg.Brokers, err)
	}
	retries.limit = rc.Producer.MaxMessageBytes
	return &Adapter{
		cfg:       cfg,
		sc:        sc,
		logger:    cfg.Logger,
		pub:       pub,
		retries:   retries,
		retryConf: &rc,
		tiers:     map[string][]tier{},
		sized:     map[string]*producer{},
		byLimit:   map[int]*producer{rc.Producer.MaxMessageBytes: retries},
		closing:   make(chan struct{}),
	}, nil
}

// Capabilities declares no native counter, delays through fixed tiers (one retry topic per
// distinct delay), the carried last error and the first attempt's time (the first delivery's
// in this subscription, carried in the millrace-first-attempt-at header of retry copies; a
// retry topic record without it, such as Spring Kafka's, reads its own delivery's time).
func (a *Adapter) Capabilities() millrace.Capabilities {
	return millrace.Capabilities{
		Broker:              BrokerName,
		PerMessageDelay:     false,
		MaxTiers:            a.cfg.MaxTiers,
		MaxDelay:            a.cfg.MaxDelay,
		CarriesLastError:    true,
		KnowsFirstAttempt:   true,
		CarriesAttemptTrace: true, // among millrace's retry headers on the copy (retry.go)
	}
}

// Publisher returns the adapter's synchronous publisher: each Publish hands all its records to
// the producer at once and returns once the brokers acknowledged every one, or with the first
// failure (records after it in the call may have been written). Records keep the call's order
// per key. Their key comes from Config.PartitionKey.
func (a *Adapter) Publisher() message.Publisher { return publisher{a} }

// publisher refuses to publish after the adapter closed, and keeps the adapter's producer open
// when a Watermill component closes its publisher.
type publisher struct{ a *Adapter }

func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.a.publish(topic, msgs...)
}
func (p publisher) Close() error { return nil }

// publish writes msgs to topic at once; publishRetry writes a retry or dead letter through
// the lingering producer.
func (a *Adapter) publish(topic string, msgs ...*message.Message) error {
	return a.send(a.pub, topic, msgs)
}

// publishRetry writes a retry or dead letter of source through the producer sized for it.
func (a *Adapter) publishRetry(source, topic string, msg *message.Message) error {
	a.mu.Lock()
	p := a.sized[source]
	a.mu.Unlock()
	if p == nil {
		p = a.retries
	}
	return a.send(p, topic, []*message.Message{msg})
}

// txnConfigFor returns the configuration of the transactional producers of source's
// partitions: the retry producer's, with the Producer.MaxMessageBytes Provision sized for
// source's retries and dead letters (see size.go).
func (a *Adapter) txnConfigFor(source string) *sarama.Config {
	a.mu.Lock()
	p := a.sized[source]
	a.mu.Unlock()
	c := *a.retryConf
	if p != nil {
		c.Producer.MaxMessageBytes = p.limit
	}
	return &c
}

func (a *Adapter) send(p *producer, topic string, msgs []*message.Message) error {
	a.pubMu.RLock()
	defer a.pubMu.RUnlock()
	if a.pubClosed {
		return millrace.ErrClosed
	}
	return p.send(topic, msgs)
}

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions; the adapter and its producer stay open.
func (a *Adapter) Subscriber() message.Subscriber {
	return &subscriber{a: a, closing: make(chan struct{})}
}

// DeadLetterTopic returns topic + ".dlq".
func (a *Adapter) DeadLetterTopic(topic string) string { return topic + DeadLetterSuffix }

// DecodeAttempt reads the attempt of a consumed message: the number its headers carry (see the
// package documentation), plus one for each redelivery after a nack in this subscription.
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	d, ok := deliveryFrom(msg.Context())
	if !ok {
		// Not from this adapter's subscriber: the caller vouches for its headers.
		at, _ := decodeHeaders(msg.Metadata, false)
		return at
	}
	at := d.attempt
	at.Broker = BrokerName
	at.NativeCount = d.count
	at.NativeID = d.nativeID()
	if d.count > 1 {
		at.Number = min(at.Number+d.count-1, MaxAttemptNumber)
		if at.Source == millrace.SourceNone {
			at.Source = millrace.SourceNative
		}
	}
	if at.OriginalTopic == "" {
		at.OriginalTopic = d.source
	}
	if at.OriginalKey == "" && d.Key != nil {
		at.OriginalKey = string(d.Key)
	}
	if at.FirstAttemptAt.IsZero() {
		at.FirstAttemptAt = d.firstAt
	}
	return at
}

// Close stops every subscription, waits for them to end and closes the producer. Publishes
// (including retries and dead letters) still in progress finish first; later ones fail with
// millrace.ErrClosed.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closing)
	admin, blAdmin := a.admin, a.blAdmin
	producers := make([]*producer, 0, len(a.byLimit))
	for _, p := range a.byLimit {
		producers = append(producers, p)
	}
	a.mu.Unlock()
	// From here on publishes fail with ErrClosed; the lock waits for those in progress.
	a.pubMu.Lock()
	a.pubClosed = true
	a.pubMu.Unlock()
	a.subs.Wait()
	var errs []error
	if admin != nil {
		errs = append(errs, admin.Close())
	}
	if blAdmin != nil {
		errs = append(errs, blAdmin.Close()) // and its client
	}
	a.pub.close()
	for _, p := range producers { // retries among them
		p.close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka: close: %w", err)
	}
	return nil
}
