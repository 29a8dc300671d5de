package millrace

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// Capabilities is what an adapter declares about its broker. The router refuses at start-up a
// policy the adapter cannot honour, and the conformance suite skips only on these.
type Capabilities struct {
	// Broker names the adapter, e.g. "redisstream".
	Broker string
	// NativeAttemptCount is true when the broker counts deliveries itself.
	NativeAttemptCount bool
	// PerMessageDelay is true when any delay can be chosen per message; false when delays come
	// from fixed tiers declared at provisioning (one retry queue or topic per distinct delay).
	PerMessageDelay bool
	// MaxTiers bounds the number of distinct delays when PerMessageDelay is false; 0 = no bound.
	MaxTiers int
	// MaxDelay is the longest delay the broker can wait; 0 = no limit.
	MaxDelay time.Duration
	// DelayGranularity is the unit delays must be a multiple of (SQS: 1 s); 0 = any.
	DelayGranularity time.Duration
	// DeliveryLimit is the broker's own cap on deliveries (quorum queues); 0 = none.
	DeliveryLimit int
	// CarriesLastError is true when the previous attempt's error text reaches the next attempt.
	CarriesLastError bool
	// KnowsFirstAttempt is true when DecodeAttempt fills Attempt.FirstAttemptAt on every
	// delivery after the first, from the broker's own state or from millrace's retry headers
	// (the attempt middleware fills the first delivery's with its own time). A policy's
	// MaxElapsed is refused where it is false. See RetryPolicy for what each broker's time is.
	KnowsFirstAttempt bool
	// CarriesAttemptTrace is true when a retry brings the failed attempt's span context (the
	// metadata keys under HeaderAttemptTracePrefix, which telemetry writes on each delivery)
	// back with the next delivery, so that the next attempt's span links to the failed one's:
	// in the retry copy's headers, or in the adapter's retry state where the broker delivers
	// the original again. The conformance suite holds an adapter that declares it to the
	// links (TraceContextSurvivesRetries).
	CarriesAttemptTrace bool
}

// Disposition tells the retry middleware what to do with the original after a retry was scheduled.
type Disposition uint8

const (
	// AckOriginal: the retry lives in a new copy (retry topic, delayed republish); ack the original.
	AckOriginal Disposition = iota + 1
	// NackOriginal: the broker redelivers the original itself after the delay (Redis PEL reclaim,
	// RabbitMQ dead-letter to a TTL queue, SQS visibility timeout); the retry middleware nacks it
	// and never acks it.
	NackOriginal
)

// RetryRequest asks an adapter to deliver a message again later.
type RetryRequest struct {
	// Attempt is the attempt that just failed: the last one of its delivery
	// (Attempt.Delivery). A retry copy that carries its own history records
	// Attempt.NextDelivery(), not Number+1.
	Attempt Attempt
	// Delay is how long to wait before the next attempt.
	Delay time.Duration
	// Err is the failure, carried as the next attempt's LastError where the broker allows.
	Err error
	// FailedAt is when the attempt failed.
	FailedAt time.Time
}

// Adapter is the contract every broker package implements. It connects the broker's native
// retry state to millrace's Attempt, and performs retries and dead-lettering without blocking
// the messages behind the failed one.
type Adapter interface {
	// Capabilities declares what the broker can do.
	Capabilities() Capabilities
	// Publisher publishes to the broker.
	Publisher() message.Publisher
	// Subscriber consumes from the broker; its messages carry what DecodeAttempt needs.
	Subscriber() message.Subscriber
	// Provision declares the topology topic needs under policy (retry tiers, dead-letter
	// destination). It is idempotent.
	Provision(ctx context.Context, topic string, policy RetryPolicy) error
	// DecodeAttempt reads the attempt of a received message from native state and headers.
	// It never fails on untrusted input; MaxAttempts is filled in by the caller. Its Number
	// counts deliveries (the broker's delivery count, or the header a retry copy carries);
	// the attempt middleware turns it into an attempt number under RetryPolicy.Immediate.
	DecodeAttempt(msg *message.Message) Attempt
	// ScheduleRetry arranges a redelivery after req.Delay without blocking later messages.
	// On error the original must be left unacknowledged.
	ScheduleRetry(ctx context.Context, msg *message.Message, req RetryRequest) (Disposition, error)
	// DeadLetter writes rec to the poison destination of rec.OriginalTopic. Only a nil return
	// allows the original to be acknowledged.
	DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error
	// DeadLetterTopic names the poison destination of topic, readable through Subscriber.
	DeadLetterTopic(topic string) string
	// Close releases the adapter's connections.
	Close() error
}

// BudgetBounded is implemented by adapters whose broker hands a message to another consumer
// when its handler runs longer than some bound (the Redis reclaim idle time, the SQS visibility
// timeout). The router then refuses a longer processing budget, and uses MaxBudget when none
// is configured, so a handler can never outlive its claim on the message.
type BudgetBounded interface {
	// MaxBudget is the longest processing budget the adapter's configuration allows.
	MaxBudget() time.Duration
}
