package nats

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/millrace/millrace"
)

// DefaultURL is the NATS server the adapter connects to when Config has neither Conn nor URL.
const DefaultURL = "nats://127.0.0.1:4222"

// Defaults of Config, applied to zero fields.
const (
	DefaultAckWait          = 30 * time.Second
	DefaultProcessingBudget = 12 * time.Second
	DefaultWindow           = 64
	// MaxWindow is the largest Config.Window: a subscription allocates buffers in proportion
	// to it (its slots, its queue, the inbox's pending limit of 2 × Window + 64 messages), and
	// a pull request asks for up to Window messages at once.
	MaxWindow        = 4096
	DefaultNackDelay = time.Second
	// DefaultPingInterval is how often a connection the adapter dials pings the server; two
	// unanswered pings mark it dead and nats.go reconnects (a silent connection is found
	// within about three intervals).
	DefaultPingInterval = 2 * time.Second
	// ReconnectWait is the pause between reconnection attempts of a connection the adapter dials.
	ReconnectWait = 500 * time.Millisecond
	// DefaultMaxDeliver is -1: JetStream never stops redelivering a message on its own, so it
	// never drops one that millrace still means to retry or dead-letter.
	DefaultMaxDeliver = -1
	// DefaultMaxAckPending is -1: no server-side bound on unacknowledged messages, so messages
	// waiting for a delayed retry (they stay pending) never stop the delivery of new ones.
	DefaultMaxAckPending = -1
	// DeadLetterSuffix is appended to a subject to name its dead-letter subject and stream.
	DeadLetterSuffix = ".dlq"
)

// Config configures the NATS JetStream adapter. Zero fields take the defaults shown.
//
// How AckWait, the budget and the policy relate: JetStream hands a message it has not heard
// back about within AckWait to another consumer of the durable. ProcessingBudget is the longest
// a handler may hold a message (router.Config.Budget plus headroom for the retry or dead-letter
// write). A message may also wait in the client's pull buffer (up to Window of them) until a
// handler is free, which takes at most one budget, and its AckWait runs from its delivery to
// the client: so Validate refuses a ProcessingBudget that is not below half of AckWait, and
// the adapter is a millrace.BudgetBounded, so the router refuses a longer
// router.Config.Budget. A retry's delay is a NakWithDelay and is independent of AckWait.
type Config struct {
	// Conn is the NATS connection. Optional: when nil the adapter connects to URL and closes
	// that connection on Close; a Conn passed in is never closed by the adapter.
	Conn *nats.Conn
	// URL is the server URL used when Conn is nil. Default DefaultURL.
	URL string
	// Durable is the durable name of the pull consumer every subscription of a subject joins
	// (one consumer per stream, shared by every process with the same name). Required.
	Durable string
	// StreamName names the stream of a subject. Default StreamName (the package function):
	// the subject with every character other than A-Z, a-z, 0-9 and - escaped.
	StreamName func(subject string) string
	// AckWait is how long JetStream waits for an acknowledgement before it redelivers.
	// Default 30 s.
	AckWait time.Duration
	// ProcessingBudget is the longest a live consumer holds a message; it must be below half
	// of AckWait (see the type's documentation). Default 12 s, and 40 % of AckWait for
	// another AckWait.
	ProcessingBudget time.Duration
	// MaxDeliver is the consumer's cap on deliveries of one message. Default -1 (no cap). When
	// positive it must be at least 2, and Provision refuses a policy whose MaxAttempts is not
	// below it: one delivery past the last attempt stays for a dead-letter write that failed.
	// A message the broker stops delivering is neither retried nor dead-lettered by millrace.
	MaxDeliver int
	// MaxAckPending is the consumer's bound on unacknowledged messages, across all its
	// subscriptions; messages waiting for a delayed retry count against it. Default -1 (none).
	MaxAckPending int
	// Window is how many messages one subscription has in flight (handed out, not yet acked,
	// nacked or scheduled for retry); the client buffers up to Window more, whose AckWait
	// runs while they wait (see the type's documentation). Default 64; 1 handles a
	// subscription's messages one at a time in stream order (retries excepted). At most
	// MaxWindow (4096), and at most the consumer's max_request_batch when one is set (Subscribe
	// refuses a larger Window; its update of an existing consumer keeps the max_request_batch an
	// operator set).
	Window int
	// NackDelay is how long JetStream waits before it redelivers a message nacked without a
	// scheduled retry (the retry or dead-letter write failed, or a plain Watermill handler
	// failed). Default 1 s.
	NackDelay time.Duration
	// PingInterval is how often a connection the adapter dials (Conn nil) pings the server, two
	// unanswered pings closing it for a reconnect; it bounds how long a silent connection (a
	// dropped NAT entry, a partition) goes unnoticed. Default 2 s (nats.go's own is 2 min).
	PingInterval time.Duration
	// Logger receives the adapter's logs. Default slog.Default().
	Logger *slog.Logger
}

func configError(field, value, rule string) error {
	return &millrace.ConfigError{Field: "nats.Config." + field, Value: value, Rule: rule}
}

// Validate checks every field; the zero value is invalid only because Durable is required.
func (c Config) Validate() error {
	ackWait := c.ackWait()
	switch {
	case c.Durable == "":
		return configError("Durable", `""`, "is required")
	case !validName(c.Durable):
		return configError("Durable", strconv.Quote(c.Durable), "must be a JetStream name: no spaces, '.', '*', '>', '/' or '\\', at most 255 bytes")
	case c.Conn == nil && c.URL != "" && !strings.HasPrefix(c.URL, "nats://") && !strings.HasPrefix(c.URL, "tls://"):
		return configError("URL", strconv.Quote(c.URL), "must start with nats:// or tls://")
	case c.AckWait < 0:
		return configError("AckWait", c.AckWait.String(), "must not be negative (0 means "+DefaultAckWait.String()+")")
	case c.AckWait > 0 && c.AckWait < 10*time.Millisecond:
		return configError("AckWait", c.AckWait.String(), "must be at least 10ms")
	case c.ProcessingBudget < 0:
		return configError("ProcessingBudget", c.ProcessingBudget.String(), "must not be negative (0 means "+c.budget().String()+")")
	case 2*c.ProcessingBudget >= ackWait:
		return configError("ProcessingBudget", c.ProcessingBudget.String(),
			"must be below half of AckWait ("+ackWait.String()+"): a message can wait one budget in the pull buffer, and JetStream would hand a message whose handler still runs to another consumer")
	case c.MaxDeliver == 0 || c.MaxDeliver == -1:
	case c.MaxDeliver < 2:
		return configError("MaxDeliver", strconv.Itoa(c.MaxDeliver), "must be -1 (no cap), 0 (the default, -1) or at least 2")
	}
	switch {
	case c.MaxAckPending < -1:
		return configError("MaxAckPending", strconv.Itoa(c.MaxAckPending), "must be -1 (no bound), 0 (the default, -1) or positive")
	case c.Window < 0:
		return configError("Window", strconv.Itoa(c.Window), "must not be negative (0 means "+strconv.Itoa(DefaultWindow)+")")
	case c.Window > MaxWindow:
		return configError("Window", strconv.Itoa(c.Window), "must be at most "+strconv.Itoa(MaxWindow)+" (MaxWindow): a subscription buffers up to 2 x Window messages")
	case c.NackDelay < 0:
		return configError("NackDelay", c.NackDelay.String(), "must not be negative (0 means "+DefaultNackDelay.String()+")")
	case c.PingInterval < 0:
		return configError("PingInterval", c.PingInterval.String(), "must not be negative (0 means "+DefaultPingInterval.String()+")")
	}
	return nil
}

// ValidatePolicy refuses a policy the consumer's MaxDeliver cannot carry: JetStream must still
// deliver a message once past its last attempt, for a dead-letter write that failed.
func (c Config) ValidatePolicy(p millrace.RetryPolicy) error {
	if c.MaxDeliver > 0 && p.MaxAttempts >= c.MaxDeliver {
		return &millrace.ConfigError{Field: "RetryPolicy.MaxAttempts", Value: strconv.Itoa(p.MaxAttempts), Limit: true,
			Rule: "must be below nats.Config.MaxDeliver (" + strconv.Itoa(c.MaxDeliver) + "): JetStream would drop a message whose dead-letter write failed on its last attempt"}
	}
	return nil
}

func (c Config) ackWait() time.Duration {
	if c.AckWait == 0 {
		return DefaultAckWait
	}
	return c.AckWait
}

// budget is ProcessingBudget or its default: 40 % of AckWait (12 s for the default 30 s).
func (c Config) budget() time.Duration {
	if c.ProcessingBudget != 0 {
		return c.ProcessingBudget
	}
	return c.ackWait() * 2 / 5
}

func (c *Config) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.StreamName == nil {
		c.StreamName = StreamName
	}
	c.ProcessingBudget = c.budget()
	c.AckWait = c.ackWait()
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.NackDelay == 0 {
		c.NackDelay = DefaultNackDelay
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// StreamName is the default stream name of a subject: the subject with every byte other than
// A-Z, a-z, 0-9 and - written as _XX (its hex code), so distinct subjects get distinct names
// ("orders.created" is "orders_2Ecreated").
func StreamName(subject string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(subject); i++ {
		c := subject[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// validName reports whether s can name a JetStream stream or consumer.
func validName(s string) bool {
	return s != "" && len(s) <= 255 && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// validSubject reports whether s is a literal subject a stream can hold: dot-separated
// non-empty tokens, no wildcards, no whitespace.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\x00") {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}
