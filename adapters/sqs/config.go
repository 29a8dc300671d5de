package sqs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/millrace/millrace"
)

// GiveUp says who moves a message that exhausted its attempts to the dead-letter queue.
type GiveUp uint8

const (
	// GiveUpSend (the default): the adapter sends the dead letter itself, with the failure context
	// (reason, attempts, last error, ...) as a message attribute, and deletes the original only
	// after SQS confirmed the send. A queue may still carry a RedrivePolicy as a safety net (for
	// a consumer that crashes on every receive), but its maxReceiveCount must equal MaxAttempts.
	GiveUpSend GiveUp = iota
	// GiveUpRedrive: the queue's native RedrivePolicy (maxReceiveCount = MaxAttempts, target = the
	// dead-letter queue) gives up. After the last attempt fails the adapter makes the message
	// visible again without deleting it, and SQS moves it to the dead-letter queue on the next
	// receive. The dead letter is then the original message exactly as SQS moved it: it carries no
	// millrace failure context. Discarded and malformed messages, which are given up on their
	// first attempt, are still sent by the adapter with the context.
	GiveUpRedrive
)

// String returns "send" or "redrive".
func (g GiveUp) String() string {
	switch g {
	case GiveUpSend:
		return "send"
	case GiveUpRedrive:
		return "redrive"
	default:
		return fmt.Sprintf("GiveUp(%d)", uint8(g))
	}
}

// SQS limits the adapter checks against (SQS developer guide, quotas).
const (
	// MaxVisibility is SQS's longest visibility timeout; ChangeMessageVisibility cannot extend a
	// message's invisibility beyond 12 h counted from its receive.
	MaxVisibility = 12 * time.Hour
	// MaxRetention is SQS's longest message retention period.
	MaxRetention = 14 * 24 * time.Hour
	// MinRetention is SQS's shortest message retention period.
	MinRetention = time.Minute
	// MaxWaitTime is SQS's longest long-polling wait.
	MaxWaitTime = 20 * time.Second
	// MaxAttributes is the number of message attributes SQS accepts per message.
	MaxAttributes = 10
	// MinVisibilityMargin is the least time Validate requires between ProcessingBudget and
	// VisibilityTimeout: after the handler returns, the retry (ChangeMessageVisibility) or the
	// dead-letter send and delete must still happen while the message is invisible. One second
	// covers calls to a nearby endpoint; leave more (a few seconds) against AWS.
	MinVisibilityMargin = time.Second
	// MaxReceiveBatch is the most messages one ReceiveMessage, DeleteMessageBatch or
	// ChangeMessageVisibilityBatch call carries (SQS's limit).
	MaxReceiveBatch = 10
)

// Defaults and limits of Config.Window and Config.Pollers.
const (
	// DefaultWindow is Config.Window's default: up to 32 messages of one subscription in flight.
	DefaultWindow = 32
	// MaxWindow is the largest Config.Window.
	MaxWindow = 1024
	// DefaultPollers is Config.Pollers' default.
	DefaultPollers = 2
	// MaxPollers is the largest Config.Pollers.
	MaxPollers = 64
)

// Config configures the SQS adapter. Zero fields take the defaults shown; ProcessingBudget is
// required.
type Config struct {
	// Endpoint is the base URL of the SQS endpoint, e.g. "http://127.0.0.1:19324" for fauxqs,
	// LocalStack or ElasticMQ. Empty: the regional AWS endpoint of AWSConfig.
	Endpoint string
	// AWSConfig is the AWS SDK configuration (credentials, region, SDK retries, HTTP client), e.g.
	// from config.LoadDefaultConfig. Default nil: a configuration for a local endpoint with static
	// dummy credentials and Region; Endpoint is then required.
	AWSConfig *aws.Config
	// Region is used when AWSConfig is nil. Default "us-east-1".
	Region string

	// VisibilityTimeout is the queues' visibility timeout: how long a received message stays
	// hidden from other consumers while one handles it. Whole seconds, at most 12 h. Default 60 s
	// (the field report's production value). It must exceed ProcessingBudget by at least
	// MinVisibilityMargin, or a second consumer receives the message while the first still works
	// on it. It also bounds the retry delays:
	// Capabilities().MaxDelay is 12 h minus VisibilityTimeout.
	VisibilityTimeout time.Duration
	// ProcessingBudget is the longest a handler may run. Required, > 0 and at most
	// VisibilityTimeout - MinVisibilityMargin (1 s). Set it to the router's Config.Budget (the
	// handler's context deadline): the adapter cannot see the router's configuration, and only a
	// budget the router enforces makes this promise hold. Against AWS, leave a few seconds
	// between the two for the receive-to-handler latency and the retry or dead-letter call after
	// the handler returns.
	ProcessingBudget time.Duration

	// GiveUp says who moves exhausted messages to the dead-letter queue. Default GiveUpSend.
	GiveUp GiveUp
	// CreateQueues makes Provision (and Subscribe, for a queue that is missing) create missing
	// queues, and set the attributes millrace manages on existing ones (VisibilityTimeout, the
	// RedrivePolicy under GiveUpRedrive, a too-short MessageRetentionPeriod). Default false:
	// Provision only verifies the queues and returns a *MismatchError listing what differs.
	CreateQueues bool
	// DeadLetterSuffix is appended to a topic to name its dead-letter topic (and queue).
	// Default "-dlq".
	DeadLetterSuffix string
	// DeadLetterRetention is the MessageRetentionPeriod of dead-letter queues. Default 14 days,
	// the SQS maximum.
	DeadLetterRetention time.Duration
	// WaitTime is the long-polling wait of each receive. Whole seconds, at most 20 s. Default 20 s.
	// A negative value means 0 (short polling).
	WaitTime time.Duration
	// Window is how many messages one subscription holds at most: received and not yet settled
	// on SQS (handed to the consumer, or waiting for the delete after an ack). Their handlers run
	// in parallel. A poller reserves room in the Window before it receives, and asks for no
	// more messages than it reserved (at most MaxReceiveBatch, 10), so a received message never
	// waits for room. Default DefaultWindow (32); 1 to MaxWindow (1024), and at least Pollers.
	// It bounds what a crash repeats (see "Crashes" in the package documentation): 1 gives the
	// one-message-at-a-time behaviour of earlier versions.
	Window int
	// Pollers is how many ReceiveMessage calls one subscription keeps in flight. Default
	// DefaultPollers (2); 1 to MaxPollers (64), and at most Window (each poller needs room for
	// one message of the Window to receive).
	Pollers int
	// CallTimeout is the longest one HTTP request to SQS may take, a ReceiveMessage WaitTime
	// longer. Default DefaultCallTimeout (10 s); negative is refused. aws-sdk-go-v2's HTTP
	// client has no request timeout, so without one a request on a connection that went silent
	// (a firewall or NAT that dropped its state) would wait for ever. A request that passes it
	// fails, its connection and the client's idle ones are closed, and the SDK's retryer
	// retries it on a new connection. It applies to every SQS call the adapter and its
	// publisher make, whatever HTTP client AWSConfig brings. See "Connection loss" in the
	// package documentation.
	CallTimeout time.Duration
	// MessageGroup returns the MessageGroupId of a message the publisher sends to a FIFO queue
	// (a topic ending in ".fifo"; see "FIFO queues" in the package documentation). Default nil:
	// the message's metadata MetadataGroupID. A message whose group is empty or not valid for
	// SQS is refused with ErrMessageGroup. It is called for every message published; its result
	// is used only on a FIFO queue.
	MessageGroup func(msg *message.Message) string
	// Logger receives the adapter's logs. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = 60 * time.Second
	}
	if c.DeadLetterSuffix == "" {
		c.DeadLetterSuffix = "-dlq"
	}
	if c.DeadLetterRetention == 0 {
		c.DeadLetterRetention = MaxRetention
	}
	if c.WaitTime == 0 {
		c.WaitTime = MaxWaitTime
	}
	if c.WaitTime < 0 {
		c.WaitTime = 0
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Pollers == 0 {
		c.Pollers = DefaultPollers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after applying the defaults. Errors are
// *millrace.ConfigError naming the field, the value and the rule.
func (c Config) Validate() error {
	c.setDefaults()
	field := func(name string) string { return "sqs.Config." + name }
	switch {
	case c.AWSConfig == nil && c.Endpoint == "":
		return &millrace.ConfigError{Field: field("Endpoint"), Value: `""`,
			Rule: "is required when AWSConfig is nil (without AWSConfig the adapter has only dummy credentials, good for a local endpoint)"}
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > MaxVisibility || c.VisibilityTimeout%time.Second != 0:
		return &millrace.ConfigError{Field: field("VisibilityTimeout"), Value: c.VisibilityTimeout.String(),
			Rule: "must be whole seconds between 1s and 12h (SQS limits)"}
	case c.ProcessingBudget <= 0:
		return &millrace.ConfigError{Field: field("ProcessingBudget"), Value: c.ProcessingBudget.String(),
			Rule: "is required and must be positive: set it to the router's Config.Budget"}
	case c.VisibilityTimeout-c.ProcessingBudget < MinVisibilityMargin:
		return &millrace.ConfigError{Field: field("ProcessingBudget"), Value: c.ProcessingBudget.String(),
			Rule: fmt.Sprintf("must be at most sqs.Config.VisibilityTimeout (%s) minus %s (MinVisibilityMargin, for the retry or "+
				"dead-letter call after the handler), or a second consumer receives the message while the first still handles it",
				c.VisibilityTimeout, MinVisibilityMargin)}
	case c.GiveUp != GiveUpSend && c.GiveUp != GiveUpRedrive:
		return &millrace.ConfigError{Field: field("GiveUp"), Value: c.GiveUp.String(), Rule: "must be GiveUpSend or GiveUpRedrive"}
	case !validQueueChars(c.DeadLetterSuffix) || len(c.DeadLetterSuffix) > 40:
		return &millrace.ConfigError{Field: field("DeadLetterSuffix"), Value: c.DeadLetterSuffix,
			Rule: "may hold only letters, digits, '-' and '_' (SQS queue name characters), at most 40"}
	case c.DeadLetterRetention < MinRetention || c.DeadLetterRetention > MaxRetention || c.DeadLetterRetention%time.Second != 0:
		return &millrace.ConfigError{Field: field("DeadLetterRetention"), Value: c.DeadLetterRetention.String(),
			Rule: "must be whole seconds between 1m and 336h (SQS limits)"}
	case c.CallTimeout < 0:
		return &millrace.ConfigError{Field: field("CallTimeout"), Value: c.CallTimeout.String(),
			Rule: "must not be negative (0 means 10s)"}
	case c.WaitTime > MaxWaitTime || c.WaitTime%time.Second != 0:
		return &millrace.ConfigError{Field: field("WaitTime"), Value: c.WaitTime.String(),
			Rule: "must be whole seconds, at most 20s (SQS long-polling limit)"}
	case c.Window < 1 || c.Window > MaxWindow:
		return &millrace.ConfigError{Field: field("Window"), Value: fmt.Sprint(c.Window),
			Rule: fmt.Sprintf("must be between 1 and %d (MaxWindow); 0 means %d", MaxWindow, DefaultWindow)}
	case c.Pollers < 1 || c.Pollers > MaxPollers:
		return &millrace.ConfigError{Field: field("Pollers"), Value: fmt.Sprint(c.Pollers),
			Rule: fmt.Sprintf("must be between 1 and %d (MaxPollers); 0 means %d", MaxPollers, DefaultPollers)}
	case c.Pollers > c.Window:
		return &millrace.ConfigError{Field: field("Pollers"), Value: fmt.Sprint(c.Pollers),
			Rule: fmt.Sprintf("must be at most sqs.Config.Window (%d): each poller needs room for one message of the Window to receive", c.Window)}
	}
	return nil
}

// receiveTimeout bounds a receive: its long poll and CallTimeout. A receive is never cancelled
// otherwise, not even by Close.
func (c Config) receiveTimeout() time.Duration { return c.WaitTime + c.CallTimeout }

// ownCallTimeout bounds the calls the subscriber makes on its own, which Close does not cancel:
// the delete after an ack and the give-back of a message nobody took. Two CallTimeouts leave
// room for one SDK retry after a request that went unanswered.
func (c Config) ownCallTimeout() time.Duration { return 2 * c.CallTimeout }

// maxDelay is the longest retry delay the adapter can honour: ChangeMessageVisibility cannot
// hide a message beyond 12 h from its receive, and the retry is scheduled at most
// VisibilityTimeout after the receive (later, the message would already be visible again).
func (c Config) maxDelay() time.Duration { return MaxVisibility - c.VisibilityTimeout }

// CheckLease reports whether an idempotency lease of length lease fits policy's retry window,
// with the rule of the field report (and of the idempotency package): the lease must be
// positive and strictly less than policy.Window(), the shortest time from the first failure to
// the give-up. A longer lease, left behind by a consumer that died holding it, makes every
// redelivery see BUSY until the message is dead-lettered. Errors are *millrace.ConfigError.
func CheckLease(lease time.Duration, policy millrace.RetryPolicy) error {
	if err := policy.Validate(); err != nil {
		return err
	}
	if w := policy.Window(); lease <= 0 || lease >= w {
		return &millrace.ConfigError{Field: "lease TTL", Value: lease.String(),
			Rule: fmt.Sprintf("must be positive and strictly less than the retry window (MaxAttempts-1) x delay = %s "+
				"(RetryPolicy.Window() of %d attempts); a consumer that dies holding a longer lease makes every "+
				"redelivery see BUSY and the message is dead-lettered", w, policy.MaxAttempts)}
	}
	return nil
}
