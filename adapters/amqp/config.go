package amqp

import (
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
)

// DefaultURL is the broker Config.URL defaults to: a local RabbitMQ with the guest account.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// QueueType is the RabbitMQ queue type of every queue the adapter declares.
type QueueType string

const (
	// Classic queues: no delivery counter; a redelivery (the redelivered flag, after a consumer
	// crash or a requeue) counts as one attempt however often it happens, so crash loops are
	// not bounded. Dead-lettering into the first retry tier is at-most-once: a retry is lost
	// if that tier is missing (see the package documentation). Prefer Quorum.
	Classic QueueType = "classic"
	// Quorum queues: replicated, with their own x-delivery-count (counted as attempts) and a
	// delivery limit (Config.DeliveryLimit) that bounds crash loops.
	Quorum QueueType = "quorum"
)

// DefaultDeliveryLimit is the x-delivery-limit set on quorum work queues when
// Config.DeliveryLimit is 0. It is RabbitMQ 4.x's own default, written explicitly so that
// 3.x brokers (which have no default) behave the same.
const DefaultDeliveryLimit = 20

// Topic describes how one topic's work queue is bound. Topics not listed in Config.Topics use
// the zero Topic, i.e. an exchange named like the topic and the binding key "#".
type Topic struct {
	// Exchange is the durable topic exchange the work queue is bound to and that Publish
	// publishes to. Default: the topic name. Several topics may share one exchange.
	Exchange string
	// BindingKeys are the routing-key patterns binding the work queue to Exchange, e.g.
	// ["hub.#"]. Default: ["#"] (everything published to Exchange).
	BindingKeys []string
}

// Defaults and limits of Config.Window and Config.Prefetch.
const (
	// DefaultWindow is Config.Window's default: up to 32 deliveries of one subscription in
	// flight, as in the SQS adapter.
	DefaultWindow = 32
	// DefaultPrefetch is Config.Prefetch's default with the default Window: the Window plus
	// the acks it coalesces at most (Window/2, 1 to 64), 32+16. It is small on purpose:
	// every delivery prefetched and not yet handed to a handler goes back flagged redelivered
	// when the subscription stops or the process crashes, and costs an attempt (see
	// "Shutdown"), so a larger prefetch buys throughput with attempts at every restart.
	DefaultPrefetch = DefaultWindow + DefaultWindow/2
	// MaxWindow is the largest Config.Window.
	MaxWindow = 1024
	// MaxPrefetch is the largest Config.Prefetch: basic.qos's prefetch-count is 16 bits.
	MaxPrefetch = 65535
)

// DefaultPublishTimeout is Config.PublishTimeout's default.
const DefaultPublishTimeout = 30 * time.Second

// Config configures an Adapter. The zero Config connects to DefaultURL with classic queues.
type Config struct {
	// URL is the AMQP URI of the broker. Default: DefaultURL.
	URL string
	// QueueType is the type of every queue declared (work, retry tiers, DLQ). Default Classic.
	QueueType QueueType
	// DeliveryLimit is x-delivery-limit of quorum work queues; policies with more attempts are
	// refused. Default DefaultDeliveryLimit (20). Ignored for classic queues.
	DeliveryLimit int
	// Topics maps a topic (the work queue name) to its exchange and binding keys.
	// Default: every topic has an exchange of its own name bound with "#".
	Topics map[string]Topic
	// Window is how many deliveries one subscription has in flight at most: handed to the
	// router and not yet acked or nacked by it (or nacked and waiting for RequeueDelay).
	// Watermill's router runs a handler per message it takes, so up to Window handlers of a
	// subscription run in parallel, in no particular order. Default DefaultWindow (32), or
	// Prefetch when Prefetch is set and smaller; 1 to MaxWindow (1024), and at most Prefetch
	// (the broker never sends more than Prefetch unsettled deliveries). Window 1 with
	// Prefetch 1 hands out one message at a time, in queue order.
	Window int
	// Prefetch is the consumer prefetch (basic.qos) per subscription: how many deliveries the
	// broker sends without an ack, the Window in flight, those buffered for it and those whose
	// acks wait to be coalesced (see "Concurrency and acknowledgements" in the package documentation).
	// Default Window plus the ack coalescing batch (Window/2, 1 to 64): DefaultPrefetch (48)
	// with the default Window; 1 to MaxPrefetch (65535, AMQP's limit). It bounds what a stop,
	// a crash or a cut costs: every delivery the broker sent and no handler finished goes
	// back flagged redelivered and costs an attempt (classic: the redelivered flag; quorum:
	// x-delivery-count), so a graceful restart costs up to Prefetch minus the Window's
	// handled deliveries an attempt each, and with MaxAttempts 1 dead-letters them without a
	// handler call (see "Shutdown" and "Crashes"). A larger Prefetch (RabbitMQ suggests the
	// hundreds) buys some throughput at that price.
	Prefetch int
	// RequeueDelay is how long a subscription waits before requeueing a nacked message that
	// was not sent to a retry tier (failed dead-letter write, failed retry publish, shutdown),
	// so a broken dependency does not spin. Default 500 ms; the wait ends early on shutdown.
	RequeueDelay time.Duration
	// PublishTimeout bounds every confirmed publish (Publish, a retry copy, a dead letter):
	// opening its channel if need be and waiting for the broker's confirms, whatever the
	// caller's context (the router's middleware passes the delivery's, which has no
	// deadline); a publish past it fails with an error wrapping ErrNotConfirmed and
	// context.DeadlineExceeded. It also bounds each write to the publishing connection's
	// socket (amqp091 ignores the context while writing): a write the broker does not read
	// within it fails with an i/o timeout and closes that connection, failing every publish on
	// it, and the next publish dials again; a publish whose writes keep progressing is not
	// bounded as a whole (see "Blocked connections" in the package doc). For a retry or a dead
	// letter that fails the original is not acked but requeued after RequeueDelay, as after
	// any failed write. While the broker
	// blocks the publishing connection (connection.blocked: a memory or disk alarm) a publish
	// does not wait at all but fails with ErrBlocked. Default 30 s.
	PublishTimeout time.Duration
	// DrainTimeout bounds how long a subscription that is closing (Subscriber.Close, or the
	// Subscribe context ending) waits for the router to ack or nack the message in flight
	// before requeueing it. Watermill closes the subscriber as soon as the router starts
	// closing, so this should be at least the router's CloseTimeout. Default 30 s. Closing the
	// Adapter ends the wait at once.
	DrainTimeout time.Duration
	// ReconnectDelay is the pause before a subscription reopens its channel after the
	// connection or channel failed. Default 1 s.
	ReconnectDelay time.Duration
	// DeadLetterSuffix names the DLQ of a topic: topic + suffix. Default ".dlq". Topic names
	// ending with it are reserved for dead-letter queues.
	DeadLetterSuffix string
	// CheckDelivery, when set, inspects every delivery before it reaches the router; an error
	// makes the delivery Malformed: it is dead-lettered with its bytes intact and the handler
	// is not called. Use it for a body schema the handler cannot cope with. Default: none.
	CheckDelivery func(amqp091.Delivery) error
	// ManagementURL is RabbitMQ's management API (the rabbitmq_management plugin), such as
	// http://127.0.0.1:15672, from which Backlog reads the work queue's unacknowledged
	// messages (Backlog.InFlight), which AMQP 0-9-1 does not report. The credentials are the
	// URL's own (http://user:password@host:15672), else Config.URL's; the user needs the
	// management, monitoring or administrator tag. The API's counts lag by up to its
	// statistics interval (collect_statistics_interval, 5 s by default). Default "": no
	// management API, InFlight is millrace.Unknown.
	ManagementURL string
	// Logger receives connection and subscription events. Default: slog.Default().
	Logger *slog.Logger
}

// Validate checks every field and returns a *millrace.ConfigError naming the first bad one.
func (c Config) Validate() error {
	if c.URL != "" {
		if _, err := amqp091.ParseURI(c.URL); err != nil {
			return &millrace.ConfigError{Field: "Config.URL", Value: redact(c.URL), Rule: "must be an amqp:// or amqps:// URI (" + err.Error() + ")"}
		}
	}
	if c.ManagementURL != "" {
		u, err := url.Parse(c.ManagementURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" {
			return &millrace.ConfigError{Field: "Config.ManagementURL", Value: brokerurl.Redact(c.ManagementURL),
				Rule: `must be the management API's http:// or https:// URL with a host and no query, such as http://127.0.0.1:15672 ("" for none)`}
		}
	}
	switch c.QueueType {
	case "", Classic, Quorum:
	default:
		return &millrace.ConfigError{Field: "Config.QueueType", Value: string(c.QueueType), Rule: `must be "classic" or "quorum"`}
	}
	checks := []struct {
		field string
		bad   bool
		value string
		rule  string
	}{
		{"Config.DeliveryLimit", c.DeliveryLimit < 0, strconv.Itoa(c.DeliveryLimit), "must not be negative (0 means 20)"},
		{"Config.Window", c.Window < 0 || c.Window > MaxWindow, strconv.Itoa(c.Window),
			"must be between 1 and " + strconv.Itoa(MaxWindow) + " (MaxWindow); 0 means " + strconv.Itoa(DefaultWindow) + ", or Prefetch if smaller"},
		{"Config.Prefetch", c.Prefetch < 0 || c.Prefetch > MaxPrefetch, strconv.Itoa(c.Prefetch),
			"must be between 1 and " + strconv.Itoa(MaxPrefetch) + " (MaxPrefetch); 0 means Window + min(64, Window/2) (" + strconv.Itoa(DefaultPrefetch) + " with the default Window)"},
		{"Config.Window", c.Window > 0 && c.Prefetch > 0 && c.Window > c.Prefetch, strconv.Itoa(c.Window),
			"must be at most Config.Prefetch (" + strconv.Itoa(c.Prefetch) + "): the broker never sends more than Prefetch unsettled deliveries"},
		{"Config.RequeueDelay", c.RequeueDelay < 0, c.RequeueDelay.String(), "must not be negative (0 means 500ms)"},
		{"Config.PublishTimeout", c.PublishTimeout < 0, c.PublishTimeout.String(), "must not be negative (0 means 30s)"},
		{"Config.DrainTimeout", c.DrainTimeout < 0, c.DrainTimeout.String(), "must not be negative (0 means 30s)"},
		{"Config.ReconnectDelay", c.ReconnectDelay < 0, c.ReconnectDelay.String(), "must not be negative (0 means 1s)"},
	}
	for _, ch := range checks {
		if ch.bad {
			return &millrace.ConfigError{Field: ch.field, Value: ch.value, Rule: ch.rule}
		}
	}
	suffix := c.DeadLetterSuffix
	if suffix == "" {
		suffix = ".dlq"
	}
	for name, t := range c.Topics {
		field := "Config.Topics[" + strconv.Quote(name) + "]"
		switch {
		case name == "":
			return &millrace.ConfigError{Field: "Config.Topics", Value: `""`, Rule: "topic names must not be empty"}
		case strings.HasSuffix(name, suffix):
			return &millrace.ConfigError{Field: field, Value: name, Rule: "must not end with the dead-letter suffix " + strconv.Quote(suffix)}
		case strings.HasPrefix(t.Exchange, "amq."):
			return &millrace.ConfigError{Field: field + ".Exchange", Value: t.Exchange, Rule: `must not start with "amq." (reserved by RabbitMQ)`}
		}
		for i, k := range t.BindingKeys {
			if k == "" {
				return &millrace.ConfigError{Field: field + ".BindingKeys[" + strconv.Itoa(i) + "]", Value: `""`, Rule: "must not be empty (use \"#\" for every key)"}
			}
		}
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.QueueType == "" {
		c.QueueType = Classic
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = DefaultDeliveryLimit
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
		if c.Prefetch > 0 {
			c.Window = min(DefaultWindow, c.Prefetch)
		}
	}
	if c.Prefetch == 0 {
		c.Prefetch = min(c.Window+ackBatch(c.Window), MaxPrefetch)
	}
	if c.RequeueDelay == 0 {
		c.RequeueDelay = 500 * time.Millisecond
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.ReconnectDelay == 0 {
		c.ReconnectDelay = time.Second
	}
	if c.DeadLetterSuffix == "" {
		c.DeadLetterSuffix = ".dlq"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ackBatch is how many acks of a subscription with window wait at most to be coalesced into one
// multiple ack: Window/2, 1 to 64.
func ackBatch(window int) int { return max(1, min(64, window/2)) }

// topic returns the binding of name with defaults applied.
func (c *Config) topic(name string) Topic {
	t := c.Topics[name]
	if t.Exchange == "" {
		t.Exchange = name
	}
	if len(t.BindingKeys) == 0 {
		t.BindingKeys = []string{"#"}
	}
	return t
}

// redact hides the password of an AMQP URI for error messages.
func redact(uri string) string {
	u, err := amqp091.ParseURI(uri)
	if err != nil {
		return "<unparseable URI>"
	}
	u.Password = "xxxxx"
	return u.String()
}
