package memory

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// BrokerName is the adapter's name in Attempts and dead-letter records.
const BrokerName = "memory"

// Config configures the memory adapter.
type Config struct {
	// DeadLetterSuffix is appended to a topic to name its dead-letter topic. Default ".dlq".
	DeadLetterSuffix string
	// MaxDelay is the longest retry delay accepted; longer policies are refused at start-up.
	// Default 24 h: an in-process retry timer longer than a day is almost surely a mistake, and is
	// lost with the process anyway.
	MaxDelay time.Duration
}

// Validate checks the configuration; the zero value is valid.
func (c Config) Validate() error {
	if c.MaxDelay < 0 {
		return &millrace.ConfigError{Field: "memory.Config.MaxDelay", Value: c.MaxDelay.String(), Rule: "must not be negative (0 means 24h)"}
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.DeadLetterSuffix == "" {
		c.DeadLetterSuffix = ".dlq"
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 24 * time.Hour
	}
}

// Adapter is an in-process broker that implements millrace.Adapter, message.Publisher and
// message.Subscriber.
type Adapter struct {
	cfg Config

	mu      sync.Mutex
	queues  map[string]*queue
	timers  map[*time.Timer]string // pending retry -> its topic
	closed  bool
	closing chan struct{}
	nextID  uint64
	subs    sync.WaitGroup
}

var _ millrace.Adapter = (*Adapter)(nil)

// New returns an empty in-process broker.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Adapter{
		cfg:     cfg,
		queues:  map[string]*queue{},
		timers:  map[*time.Timer]string{},
		closing: make(chan struct{}),
	}, nil
}

// Capabilities declares a native delivery counter, any per-message delay, the carried last
// error and the first attempt's time (the first delivery's, kept beside each retry copy).
func (a *Adapter) Capabilities() millrace.Capabilities {
	return millrace.Capabilities{
		Broker:              BrokerName,
		NativeAttemptCount:  true,
		PerMessageDelay:     true,
		MaxDelay:            a.cfg.MaxDelay,
		CarriesLastError:    true,
		KnowsFirstAttempt:   true,
		CarriesAttemptTrace: true, // a retry is a new copy of the message as the handler saw it
	}
}

// Publisher returns the adapter itself.
func (a *Adapter) Publisher() message.Publisher { return a }

// Subscriber returns a new subscriber on this broker. Closing it (the Watermill router does on
// shutdown) ends only its own subscriptions; the broker and its queues stay.
func (a *Adapter) Subscriber() message.Subscriber {
	return &subscriber{a: a, closing: make(chan struct{})}
}

// Provision does nothing: topics exist on first use.
func (a *Adapter) Provision(context.Context, string, millrace.RetryPolicy) error { return nil }

// DeadLetterTopic returns topic + Config.DeadLetterSuffix.
func (a *Adapter) DeadLetterTopic(topic string) string { return topic + a.cfg.DeadLetterSuffix }

// Publish enqueues copies of msgs on topic.
func (a *Adapter) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if err := a.enqueue(topic, m); err != nil {
			return err
		}
	}
	return nil
}

func (a *Adapter) enqueue(topic string, m *message.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.enqueueLocked(topic, m, nil)
}

// enqueueLocked enqueues a copy of m with a.mu held; retry, when set, is the attempt the copy
// is for. The push happens under a.mu too (a.mu is always taken before a queue's own lock), so
// a retry whose timer fires is never in neither place for Outstanding.
func (a *Adapter) enqueueLocked(topic string, m *message.Message, retry *millrace.Attempt) error {
	if a.closed {
		return millrace.ErrClosed
	}
	md := make(message.Metadata, len(m.Metadata))
	for k, v := range m.Metadata {
		md[k] = v
	}
	a.nextID++
	e := &envelope{
		id:       strconv.FormatUint(a.nextID, 10),
		uuid:     m.UUID,
		payload:  append([]byte(nil), m.Payload...),
		metadata: md,
		retry:    retry,
	}
	a.queueLocked(topic).push(e)
	return nil
}

func (a *Adapter) queueLocked(topic string) *queue {
	q, ok := a.queues[topic]
	if !ok {
		q = newQueue()
		a.queues[topic] = q
	}
	return q
}

// Len returns the number of messages waiting (not in flight) on topic.
func (a *Adapter) Len(topic string) int {
	a.mu.Lock()
	q := a.queueLocked(topic)
	a.mu.Unlock()
	return q.len()
}

// Peek returns copies of the messages waiting (not in flight) on topic, oldest first, without
// taking them: for tests and tools that inspect a topic, such as a dead-letter topic.
func (a *Adapter) Peek(topic string) []*message.Message {
	a.mu.Lock()
	q, ok := a.queues[topic]
	a.mu.Unlock()
	if !ok {
		return nil
	}
	es := q.peek()
	out := make([]*message.Message, 0, len(es))
	for _, e := range es {
		m := message.NewMessage(e.uuid, append([]byte(nil), e.payload...))
		for k, v := range e.metadata {
			m.Metadata[k] = v
		}
		out = append(out, m)
	}
	return out
}

// Outstanding returns the number of messages of topic that are waiting, in flight or scheduled
// for a retry: zero when the topic is settled.
func (a *Adapter) Outstanding(topic string) int {
	a.mu.Lock()
	defer a.mu.Unlock() // held while the queue is counted: see enqueueLocked
	n := 0
	for _, tt := range a.timers {
		if tt == topic {
			n++
		}
	}
	if q, ok := a.queues[topic]; ok {
		n += q.outstanding()
	}
	return n
}

// DecodeAttempt combines the attempt a retry copy is for (kept by the adapter beside the
// message) with the native delivery count of this copy: every redelivery after a nack counts as
// one more attempt, with saturating arithmetic. A published message starts at attempt 1 whatever
// its metadata says: millrace-* metadata from a producer is content, not retry state. For a
// message that did not come through this adapter it reads millrace's headers.
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	d, ok := msg.Context().Value(deliveryKey{}).(*delivery)
	if !ok {
		at := millrace.AttemptFromHeaders(msg.Metadata)
		at.Broker = BrokerName
		return at
	}
	at := millrace.Attempt{Number: 1}
	if d.retry != nil {
		at = *d.retry
		at.Source = millrace.SourceHeader
	}
	at.Broker = BrokerName
	at.NativeCount = d.count
	at.NativeID = d.id
	if d.count > 1 {
		at.Number = millrace.SaturatingAdd(at.Number, d.count-1)
		if at.Source == millrace.SourceNone {
			at.Source = millrace.SourceNative
		}
	}
	if at.OriginalTopic == "" {
		at.OriginalTopic = d.topic
	}
	if at.FirstAttemptAt.IsZero() {
		at.FirstAttemptAt = d.firstAt
	}
	return at
}

// ScheduleRetry enqueues a copy of msg, with its payload and metadata unchanged, once req.Delay
// has passed; the copy's attempt is kept by the adapter beside it, counting deliveries
// (req.Attempt.NextDelivery()), with the first attempt's time.
func (a *Adapter) ScheduleRetry(_ context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	next := req.Attempt
	next.Number = req.Attempt.NextDelivery() // the copy's count: deliveries (see millrace.RetryPolicy)
	next.Delivery = 0
	next.LastError = millrace.TruncateError(req.Err.Error())
	if next.FirstAttemptAt.IsZero() {
		next.FirstAttemptAt = req.FailedAt
	}
	topic := next.OriginalTopic
	cp := msg.Copy()

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, millrace.ErrClosed
	}
	var t *time.Timer
	t = time.AfterFunc(req.Delay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.timers, t)
		_ = a.enqueueLocked(topic, cp, &next) // fails only after Close, which drops pending retries by design
	})
	a.timers[t] = topic
	return millrace.AckOriginal, nil
}

// DeadLetter publishes rec's message to the dead-letter topic of rec.OriginalTopic.
func (a *Adapter) DeadLetter(_ context.Context, _ *message.Message, rec deadletter.Record) error {
	if err := a.enqueue(a.DeadLetterTopic(rec.OriginalTopic), rec.Message()); err != nil {
		return fmt.Errorf("memory: dead letter: %w", err)
	}
	return nil
}

// Close stops every subscription, drops pending retries and waits for delivery loops to end.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closing)
	for t := range a.timers {
		t.Stop()
	}
	a.mu.Unlock()
	a.subs.Wait()
	return nil
}
