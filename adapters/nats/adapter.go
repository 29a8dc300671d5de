package nats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
)

// Broker is the adapter's name in Capabilities, attempts and dead-letter records.
const Broker = "nats"

// UUIDHeader carries the Watermill message UUID (the header watermill-nats uses).
const UUIDHeader = "_watermill_message_uuid"

// Adapter is millrace's JetStream adapter. It is safe for concurrent use.
type Adapter struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	owned bool

	mu          sync.Mutex
	closed      bool
	streams     map[string]bool // subjects whose stream exists (created or checked)
	subscribers map[*subscriber]struct{}
}

var (
	_ millrace.Adapter       = (*Adapter)(nil)
	_ millrace.BudgetBounded = (*Adapter)(nil)
)

// New validates cfg, connects when cfg.Conn is nil, and returns the adapter.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	a := &Adapter{cfg: cfg, nc: cfg.Conn, streams: map[string]bool{}, subscribers: map[*subscriber]struct{}{}}
	if a.nc == nil {
		nc, err := nats.Connect(cfg.URL, nats.Name("millrace"), nats.MaxReconnects(-1),
			nats.ReconnectWait(ReconnectWait), nats.PingInterval(cfg.PingInterval), nats.MaxPingsOutstanding(2))
		if err != nil {
			return nil, fmt.Errorf("nats: connect: %w", err) // not the URL: it may hold a password
		}
		a.nc, a.owned = nc, true
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		if a.owned {
			a.nc.Close()
		}
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	a.js = js
	if v := a.nc.ConnectedServerVersion(); !countsEveryDelivery(v) {
		a.cfg.Logger.Warn("nats: this server can deliver a message again with NumDelivered 1 after a consumer dies or disconnects: "+
			"attempt numbers may start over and a handler may be called more than MaxAttempts times (nats-server#5305, fixed in 2.10.14); upgrade the server",
			"server_version", v)
	}
	return a, nil
}

// Conn returns the adapter's NATS connection.
func (a *Adapter) Conn() *nats.Conn { return a.nc }

// JetStream returns the adapter's JetStream context.
func (a *Adapter) JetStream() jetstream.JetStream { return a.js }

// Config returns the configuration with defaults applied.
func (a *Adapter) Config() Config { return a.cfg }

// Capabilities: a native delivery count, any delay per message (NakWithDelay), no tiers. The
// previous error is not carried. DeliveryLimit is MaxDeliver-1 when MaxDeliver is positive.
// The first attempt's time is known: the time the message was stored (server clock).
func (a *Adapter) Capabilities() millrace.Capabilities {
	c := millrace.Capabilities{Broker: Broker, NativeAttemptCount: true, PerMessageDelay: true, KnowsFirstAttempt: true}
	if a.cfg.MaxDeliver > 0 {
		c.DeliveryLimit = a.cfg.MaxDeliver - 1
	}
	return c
}

// MaxBudget is Config.ProcessingBudget, below AckWait: the router refuses a longer
// router.Config.Budget and uses this one when none is set.
func (a *Adapter) MaxBudget() time.Duration { return a.cfg.ProcessingBudget }

// DeadLetterTopic returns topic + ".dlq", a subject with a stream of its own.
func (a *Adapter) DeadLetterTopic(topic string) string { return topic + DeadLetterSuffix }

// Provision creates the stream of topic and of its dead-letter subject, and the durable
// consumer of topic, if they do not exist; it refuses a policy that MaxDeliver cannot carry.
// It is idempotent.
func (a *Adapter) Provision(ctx context.Context, topic string, policy millrace.RetryPolicy) error {
	if err := a.cfg.ValidatePolicy(policy); err != nil {
		return err
	}
	if err := a.ensureStream(ctx, topic); err != nil {
		return err
	}
	if err := a.ensureStream(ctx, a.DeadLetterTopic(topic)); err != nil {
		return err
	}
	_, err := a.ensureConsumer(ctx, topic)
	return err
}

// StreamConfig is the configuration Provision gives the stream of subject.
func (a *Adapter) StreamConfig(subject string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:      a.cfg.StreamName(subject),
		Subjects:  []string{subject},
		Retention: jetstream.LimitsPolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  1,
	}
}

// ConsumerConfig is the configuration of the durable consumer of subject.
func (a *Adapter) ConsumerConfig(subject string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       a.cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       a.cfg.AckWait,
		MaxDeliver:    a.cfg.MaxDeliver,
		MaxAckPending: a.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: subject,
	}
}

func (a *Adapter) checkTopic(topic string) error {
	if !validSubject(topic) {
		return fmt.Errorf("nats: topic %q: must be a literal subject (dot-separated non-empty tokens, no '*', '>' or whitespace)", topic)
	}
	if name := a.cfg.StreamName(topic); !validName(name) {
		return fmt.Errorf("nats: topic %q: stream name %q is not a valid JetStream name", topic, name)
	}
	return nil
}

// ensureStream creates the stream of subject unless this adapter already did or saw it.
func (a *Adapter) ensureStream(ctx context.Context, subject string) error {
	if err := a.checkTopic(subject); err != nil {
		return err
	}
	a.mu.Lock()
	done := a.streams[subject]
	a.mu.Unlock()
	if done {
		return nil
	}
	cfg := a.StreamConfig(subject)
	if _, err := a.js.Stream(ctx, cfg.Name); err != nil {
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("nats: stream %s: %w", cfg.Name, err)
		}
		if _, err := a.js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("nats: create stream %s for subject %q: %w", cfg.Name, subject, err)
		}
	}
	a.mu.Lock()
	a.streams[subject] = true
	a.mu.Unlock()
	return nil
}

// ensureConsumer creates or updates the durable consumer of subject with ConsumerConfig,
// keeping the max_request_batch an operator set on an existing consumer (the adapter's
// configuration has none, and an update without it would clear it) and its deliver policy.
func (a *Adapter) ensureConsumer(ctx context.Context, subject string) (jetstream.Consumer, error) {
	c, _, err := a.ensureConsumerCreated(ctx, subject)
	return c, err
}

// ensureConsumerCreated is ensureConsumer, and reports whether the consumer did not exist
// before. An existing consumer keeps its deliver policy (JetStream refuses to change it): a
// subscription joins as it is a consumer another one created again first, or one an operator
// or an earlier version created with another policy.
func (a *Adapter) ensureConsumerCreated(ctx context.Context, subject string) (c jetstream.Consumer, created bool, err error) {
	if err := a.ensureStream(ctx, subject); err != nil {
		return nil, false, err
	}
	name := a.cfg.StreamName(subject)
	cfg := a.ConsumerConfig(subject)
	existing, err := a.js.Consumer(ctx, name, cfg.Durable)
	switch {
	case err == nil:
		cur := existing.CachedInfo().Config
		cfg.MaxRequestBatch = cur.MaxRequestBatch
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = cur.DeliverPolicy, cur.OptStartSeq, cur.OptStartTime
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		created = true
	default:
		return nil, false, fmt.Errorf("nats: consumer %s on stream %s: %w", a.cfg.Durable, name, err)
	}
	c, err = a.js.CreateOrUpdateConsumer(ctx, name, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("nats: consumer %s on stream %s: %w", a.cfg.Durable, name, err)
	}
	return c, created, nil
}

// DecodeAttempt reads the attempt from JetStream's delivery metadata: Number and NativeCount
// are NumDelivered (saturating at math.MaxInt), NativeID the stream sequence, FirstAttemptAt
// the time the message was stored. No header is read: a producer cannot forge the count. A
// message that did not come from this adapter's Subscriber reads as attempt 1 (SourceNone).
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	d := deliveryFrom(msg)
	if d == nil {
		return millrace.Attempt{Number: 1, Broker: Broker}
	}
	n := math.MaxInt
	if d.meta.NumDelivered <= math.MaxInt {
		n = int(d.meta.NumDelivered)
	}
	n = max(n, 1)
	return millrace.Attempt{
		Number:         n,
		NativeCount:    n,
		FirstAttemptAt: d.meta.Timestamp,
		OriginalTopic:  d.msg.Subject(),
		Broker:         Broker,
		NativeID:       strconv.FormatUint(d.meta.Sequence.Stream, 10),
		Source:         millrace.SourceNative,
	}
}

// ScheduleRetry asks JetStream to redeliver the original after req.Delay (NakWithDelay) and
// returns millrace.NackOriginal: the original is never acknowledged; the redelivery counts
// one more delivery.
func (a *Adapter) ScheduleRetry(_ context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	d := deliveryFrom(msg)
	if d == nil {
		return 0, errors.New("nats: ScheduleRetry: the message was not received through this adapter's Subscriber")
	}
	if !d.settle() {
		return 0, errors.New("nats: ScheduleRetry: the delivery was already settled")
	}
	if err := d.msg.NakWithDelay(max(req.Delay, 0)); err != nil {
		d.unsettle()
		return 0, fmt.Errorf("nats: nak with delay %s: %w", req.Delay, err)
	}
	return millrace.NackOriginal, nil
}

// Close ends every subscription and closes the connection the adapter opened.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*subscriber, 0, len(a.subscribers))
	for s := range a.subscribers {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
	if a.owned {
		_ = a.nc.FlushTimeout(5 * time.Second) // acks and naks already sent
		a.nc.Close()
	}
	return nil
}
