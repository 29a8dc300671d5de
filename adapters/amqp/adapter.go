package amqp

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// BrokerName is the adapter's name in Capabilities, Attempt.Broker and dead-letter records.
const BrokerName = "amqp"

// MaxDelay is the longest retry delay: x-message-ttl is at most 2^32-1 milliseconds (~49 days).
const MaxDelay = time.Duration(math.MaxUint32) * time.Millisecond

// Adapter is the millrace adapter for RabbitMQ. A topic is a work queue; see the package
// documentation for the topology, the attempt count and the metadata it provides.
type Adapter struct {
	cfg       Config
	marshaler Marshaler
	subConn   *connection
	pubConn   *connection
	pubs      *publishers

	mu       sync.Mutex
	tiers    map[string]tierSet
	declared map[declaredName]bool // queues and exchanges declared, for test clean-up
	closed   bool
	closing  chan struct{}
	subs     sync.WaitGroup
}

var _ millrace.Adapter = (*Adapter)(nil)

// New validates cfg, connects to the broker (one connection for consuming, one for
// publishing) and returns the adapter. ctx bounds the first connection attempt.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	a := &Adapter{
		cfg:      cfg,
		subConn:  newConnection(cfg.URL, "millrace-consumer", 0),
		pubConn:  newConnection(cfg.URL, "millrace-publisher", cfg.PublishTimeout),
		tiers:    map[string]tierSet{},
		declared: map[declaredName]bool{},
		closing:  make(chan struct{}),
	}
	a.pubs = newPublishers(a.pubConn, cfg.PublishTimeout)
	for _, c := range []*connection{a.subConn, a.pubConn} {
		if err := ctx.Err(); err != nil {
			_ = a.Close()
			return nil, err
		}
		if _, err := c.get(ctx); err != nil {
			_ = a.Close()
			return nil, err
		}
	}
	return a, nil
}

// Capabilities: delays come from fixed TTL tiers (one retry queue per distinct delay, whole
// milliseconds, at most MaxDelay); RabbitMQ counts attempts itself (x-death, x-delivery-count);
// quorum queues have a delivery limit; the previous error is not carried, since a rejected
// message cannot be given new headers. The first attempt's time is known: the oldest x-death
// time of the work queue (the first failure, whole seconds), or the millrace-first-attempt-at
// header of a republished copy.
func (a *Adapter) Capabilities() millrace.Capabilities {
	c := millrace.Capabilities{
		Broker:             BrokerName,
		NativeAttemptCount: true,
		PerMessageDelay:    false,
		MaxDelay:           MaxDelay,
		DelayGranularity:   time.Millisecond,
		KnowsFirstAttempt:  true,
		// With tracing on, every retry is a confirmed copy carrying the attempt's span context
		// (ScheduleRetry); without it there is no span context to carry.
		CarriesAttemptTrace: true,
	}
	if a.cfg.QueueType == Quorum {
		c.DeliveryLimit = a.cfg.DeliveryLimit
	}
	return c
}

// Publisher returns a publisher whose Publish waits for publisher confirms.
func (a *Adapter) Publisher() message.Publisher { return publisher{a} }

// Subscriber returns a subscriber whose Close ends only the subscriptions made through it.
func (a *Adapter) Subscriber() message.Subscriber {
	return &subscriber{a: a, closing: make(chan struct{})}
}

// Marshaler returns the marshaler the adapter uses, for watermill-amqp publishers that feed it.
func (a *Adapter) Marshaler() Marshaler { return a.marshaler }

// DeadLetterTopic returns topic + Config.DeadLetterSuffix, the DLQ's queue name.
func (a *Adapter) DeadLetterTopic(topic string) string { return topic + a.cfg.DeadLetterSuffix }

// RetryQueues returns the retry queue names of topic as declared by Provision, shortest delay
// first, for monitoring; nil if the topic was not provisioned by this adapter.
func (a *Adapter) RetryQueues(topic string) []string {
	a.mu.Lock()
	ts, ok := a.tiers[topic]
	a.mu.Unlock()
	if !ok {
		return nil
	}
	out := make([]string, 0, len(ts.delays))
	for _, d := range ts.delays {
		out = append(out, tierQueue(topic, d, d == ts.reject))
	}
	return out
}

// Close ends every subscription (in-flight messages go back to their queues) and closes both
// connections. It waits at most 5 s for each consumer channel's close-ok (the subscriptions
// close theirs at once) and then at most 5 s for the two connections' close-oks (closed at
// once too): a connection the broker blocked or that went silent never sends them. It is
// idempotent.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closing)
	a.mu.Unlock()
	a.subs.Wait()
	a.pubs.close()
	var err1 error
	subClosed := make(chan struct{})
	go func() {
		err1 = a.subConn.close()
		close(subClosed)
	}()
	err2 := a.pubConn.close()
	<-subClosed
	if err1 != nil {
		return err1
	}
	return err2
}

// declaredName is a queue or an exchange; a topic's queue and exchange often share a name.
type declaredName struct{ kind, name string }

// track records a declared queue or exchange, so tests can remove what they created.
func (a *Adapter) track(kind, name string) {
	a.mu.Lock()
	a.declared[declaredName{kind, name}] = true
	a.mu.Unlock()
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}
