package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
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
//	amqp://user:password@host:port/vhost[?queue_type=quorum&delivery_limit=20&window=32&prefetch=48
//	       &dlq_suffix=.dlq&management=http://host:15672][&amqp091's options: heartbeat,
//	       connection_timeout, channel_max, certfile, keyfile, cacertfile,
//	       server_name_indication, auth_mechanism]
//
// Every topic gets the default topology (an exchange named like the topic, bound with "#" to a
// work queue of the same name); programs with other topologies build a Config. management is
// the RabbitMQ management API, which lists the dead-letter queues (AMQP 0-9-1 cannot); default
// http://<host>:15672 (https://<host>:15671 for amqps://), with the AMQP URL's credentials.
// Given explicitly it also sets Config.ManagementURL, so the adapter's Backlog reports InFlight.
type urlDriver struct{}

var (
	_ brokerurl.Driver            = urlDriver{}
	_ brokerurl.ClientLogSilencer = urlDriver{}
)

// clientParams are amqp091's own URI query parameters (https://www.rabbitmq.com/uri-query-parameters.html).
var clientParams = []string{"heartbeat", "connection_timeout", "channel_max", "certfile", "keyfile", "cacertfile", "server_name_indication", "auth_mechanism"}

// Schemes returns the schemes the driver opens.
func (urlDriver) Schemes() []string { return []string{"amqp", "amqps"} }

// SilenceClientLogs discards amqp091's process-wide log output.
func (urlDriver) SilenceClientLogs() { amqp091.SetLogger(discardAMQPLogger{}) }

type discardAMQPLogger struct{}

// Printf discards the message.
func (discardAMQPLogger) Printf(string, ...any) {}

// urlSettings is what an amqp:// URL says: the adapter's Config and what the broker's
// operations need besides.
type urlSettings struct {
	cfg Config
	// management is the management API's base URL, with the credentials to use.
	management *url.URL
	// dialTimeout bounds the operations connection's dial (connection_timeout, else 10 s).
	dialTimeout time.Duration
}

// configFromURL builds the adapter's Config from u without connecting.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	s, err := settingsFromURL(u, opts)
	return s.cfg, err
}

// settingsFromURL reads u strictly: millrace's parameters, the management API, and amqp091's
// own parameters, whose values it checks since amqp091's messages name the wrong one.
func settingsFromURL(u *url.URL, opts brokerurl.Options) (urlSettings, error) {
	scheme := strings.ToLower(u.Scheme)
	// auth_mechanism may be given more than once (amqp091 tries each): Params would refuse
	// the repeat, so it is read here and handed on whole.
	mechs := u.Query()["auth_mechanism"]
	stripped := *u
	q := u.Query()
	q.Del("auth_mechanism")
	stripped.RawQuery = q.Encode()
	p := brokerurl.NewParams(&stripped)
	s := urlSettings{
		cfg: Config{
			QueueType:        QueueType(p.OneOf("queue_type", "", string(Classic), string(Quorum))),
			DeliveryLimit:    p.Int("delivery_limit", 0),
			Window:           p.Int("window", 0),
			Prefetch:         p.Int("prefetch", 0),
			DeadLetterSuffix: p.String("dlq_suffix", ""),
			Logger:           opts.LoggerOrDiscard(),
		},
		dialTimeout: 10 * time.Second,
	}
	mgmt := p.String("management", "")
	rest := p.Pass("amqp091", clientParams...)
	if err := p.Done(); err != nil {
		return urlSettings{}, err
	}
	bad := func(name, rule string) error {
		return &brokerurl.ParameterError{Scheme: scheme, Name: name, Value: rest.Get(name), Rule: rule}
	}
	for _, name := range []string{"heartbeat", "connection_timeout"} {
		if v := rest.Get(name); rest.Has(name) {
			if n, err := strconv.Atoi(v); err != nil || n < 0 {
				return urlSettings{}, bad(name, "must be a non-negative integer (heartbeat in seconds, connection_timeout in milliseconds)")
			} else if name == "connection_timeout" && n > 0 {
				s.dialTimeout = time.Duration(n) * time.Millisecond
			}
		}
	}
	if rest.Has("channel_max") {
		if _, err := strconv.ParseUint(rest.Get("channel_max"), 10, 16); err != nil {
			return urlSettings{}, bad("channel_max", "must be an integer from 0 to 65535")
		}
	}
	for _, m := range mechs {
		switch strings.ToLower(m) {
		case "plain", "amqplain", "external":
		default:
			return urlSettings{}, &brokerurl.ParameterError{Scheme: scheme, Name: "auth_mechanism", Value: m, Rule: "must be plain, amqplain or external"}
		}
	}
	if len(mechs) > 0 {
		rest["auth_mechanism"] = mechs
	}
	clean := *u
	clean.RawQuery = rest.Encode()
	s.cfg.URL = clean.String()
	if err := s.cfg.Validate(); err != nil {
		return urlSettings{}, err
	}
	m, err := managementURL(&clean, mgmt)
	if err != nil {
		return urlSettings{}, err
	}
	s.management = m
	s.cfg.ManagementURL = mgmt // given explicitly, Backlog reads InFlight from it too
	return s, nil
}

// managementURL returns the management API's base URL: raw, or derived from the AMQP URL's
// host; with raw's credentials, else the AMQP URL's (amqp091's defaults: guest, guest).
func managementURL(amqpURL *url.URL, raw string) (*url.URL, error) {
	uri, err := amqp091.ParseURI(amqpURL.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", brokerurl.ErrInvalidURL, amqpURL.Redacted(), err)
	}
	var m *url.URL
	if raw == "" {
		m = &url.URL{Scheme: "http", Host: net.JoinHostPort(uri.Host, "15672")}
		if uri.Scheme == "amqps" {
			m = &url.URL{Scheme: "https", Host: net.JoinHostPort(uri.Host, "15671")}
		}
	} else {
		m, err = url.Parse(raw)
		if err != nil || (m.Scheme != "http" && m.Scheme != "https") || m.Host == "" || m.RawQuery != "" {
			return nil, &brokerurl.ParameterError{Scheme: amqpURL.Scheme, Name: "management", Value: brokerurl.Redact(raw),
				Rule: "must be the management API's http:// or https:// URL, such as http://127.0.0.1:15672"}
		}
		m.Path = strings.TrimSuffix(m.Path, "/")
	}
	if m.User == nil {
		m.User = url.UserPassword(uri.Username, uri.Password)
	}
	return m, nil
}

// OpenAdapter opens the adapter u names; closing it releases everything it opened.
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}

// Open opens the broker u names, for publishing and operating its dead letters.
func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	s, err := settingsFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	a, err := New(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	timeout := s.dialTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	conn, err := amqp091.DialConfig(s.cfg.URL, amqp091.Config{Dial: amqp091.DefaultDial(timeout), Properties: amqp091.Table{"connection_name": "millrace-operations"}})
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	return &urlBroker{a: a, conn: conn, management: s.management, vhost: vhostOf(s.cfg.URL)}, nil
}

// vhostOf returns the virtual host of an AMQP URL that parses (amqp091's default "/").
func vhostOf(raw string) string {
	uri, err := amqp091.ParseURI(raw)
	if err != nil {
		return "/"
	}
	return uri.Vhost
}

// urlBroker is RabbitMQ opened by URL, with the default topology: a topic's exchange and work
// queue are both named like the topic. Replays are confirmed publishes to that exchange with the
// dead letter's original routing key.
type urlBroker struct {
	a          *Adapter
	conn       *amqp091.Connection // for passive queue checks, which close their channel on a miss
	management *url.URL            // the management API, which lists queues
	vhost      string
}

var _ brokerurl.Broker = (*urlBroker)(nil)

// Adapter returns the adapter on this connection.
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

// PrepareReplay restores the original routing key: the dead letter may have come back through
// a retry queue with another key (field report 2, trap 1).
func (b *urlBroker) PrepareReplay(rec deadletter.Record, msg *message.Message) {
	if rec.OriginalKey != "" {
		msg.Metadata.Set(MetadataRoutingKey, rec.OriginalKey)
	}
}

// Close closes the connection and the adapter.
func (b *urlBroker) Close() error {
	_ = b.conn.Close()
	return b.a.Close()
}
