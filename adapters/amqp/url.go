package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers amqp:// and amqps:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens amqp:// and amqps:// URLs:
//
//	amqp://user:password@host:port/vhost[?queue_type=quorum&delivery_limit=20&prefetch=10
//	       &dlq_suffix=.dlq][&amqp091 options: heartbeat, connection_timeout, channel_max,
//	       certfile, keyfile, cacertfile, server_name_indication, auth_mechanism]
//
// Every topic gets the default topology (an exchange named like the topic, bound with "#" to a
// work queue of the same name); programs with other topologies build a Config.
type urlDriver struct{}

var (
	_ brokerurl.Driver            = urlDriver{}
	_ brokerurl.ClientLogSilencer = urlDriver{}
)

// clientParams are amqp091's own URI query parameters (https://www.rabbitmq.com/uri-query-parameters.html).
var clientParams = []string{"heartbeat", "connection_timeout", "channel_max", "certfile", "keyfile", "cacertfile", "server_name_indication", "auth_mechanism"}

func (urlDriver) Schemes() []string { return []string{"amqp", "amqps"} }

// SilenceClientLogs discards amqp091's process-wide log output.
func (urlDriver) SilenceClientLogs() { amqp091.SetLogger(discardAMQPLogger{}) }

type discardAMQPLogger struct{}

func (discardAMQPLogger) Printf(string, ...any) {}

// configFromURL builds the adapter's Config from u without connecting.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	p := brokerurl.NewParams(u)
	cfg := Config{
		QueueType:        QueueType(p.OneOf("queue_type", "", string(Classic), string(Quorum))),
		DeliveryLimit:    p.Int("delivery_limit", 0),
		Prefetch:         p.Int("prefetch", 0),
		DeadLetterSuffix: p.String("dlq_suffix", ""),
		Logger:           opts.LoggerOrDiscard(),
	}
	rest := url.Values{}
	for k, v := range u.Query() {
		if slices.Contains(clientParams, k) {
			p.Has(k)
			rest[k] = v
		}
	}
	if err := p.Done(); err != nil {
		return Config{}, fmt.Errorf("%w (and amqp091's %s)", err, strings.Join(clientParams, ", "))
	}
	clean := *u
	clean.RawQuery = rest.Encode()
	cfg.URL = clean.String()
	return cfg, cfg.Validate()
}

func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}

func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	a, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn, err := amqp091.DialConfig(cfg.URL, amqp091.Config{Dial: amqp091.DefaultDial(10 * time.Second)})
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	return &urlBroker{a: a, conn: conn}, nil
}

// urlBroker is RabbitMQ opened by URL, with the default topology: a topic's exchange and work
// queue are both named like the topic. Replays are confirmed publishes to that exchange with the
// dead letter's original routing key.
type urlBroker struct {
	a    *Adapter
	conn *amqp091.Connection // for passive queue checks, which close their channel on a miss
}

var _ brokerurl.Broker = (*urlBroker)(nil)

func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// queueDepth passively declares queue: ok is false when it does not exist.
func (b *urlBroker) queueDepth(queue string) (depth int, ok bool, err error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return 0, false, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return 0, false, nil // the broker closed the channel
	}
	_ = ch.Close()
	if err != nil {
		return 0, false, err
	}
	return q.Messages, true, nil
}

// TopicExists reports whether the topic's work queue exists (a passive declare): a publish to a
// topic without its queue would be unroutable.
func (b *urlBroker) TopicExists(_ context.Context, topic string) (bool, error) {
	_, ok, err := b.queueDepth(topic)
	return ok, err
}

// DeadLetters reads the DLQ through the dead-letter store: the command takes the whole queue
// unacknowledged, acks what it deletes and requeues the rest when it ends.
func (b *urlBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return NewDeadLetterStore(b.conn, dlq, StoreConfig{Marshaler: b.a.Marshaler()})
}

// DeadLetterDestinations lists the queues whose names end with the dead-letter suffix, with
// their depths. RabbitMQ's AMQP protocol cannot list queues, so the list comes from the
// management API when it is enabled; see listQueues.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	return nil, errors.New("amqp: listing dead-letter queues is not implemented yet")
}

// PrepareReplay restores the original routing key: the dead letter may have come back through
// a retry queue with another key (field report 2, trap 1).
func (b *urlBroker) PrepareReplay(rec deadletter.Record, msg *message.Message) {
	if rec.OriginalKey != "" {
		msg.Metadata.Set(MetadataRoutingKey, rec.OriginalKey)
	}
}

func (b *urlBroker) Close() error {
	_ = b.conn.Close()
	return b.a.Close()
}
