package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys. The messaging.* ones are OpenTelemetry's messaging semantic conventions;
// millrace.* are millrace's own.
const (
	// KeyMessagingSystem is the broker: the adapter's Capabilities.Broker ("redisstream",
	// "amqp", "kafka", "sqs", "nats", "memory").
	KeyMessagingSystem = attribute.Key("messaging.system")
	// KeyDestination is the topic the handler consumes.
	KeyDestination = attribute.Key("messaging.destination.name")
	// KeyConsumerGroup is the consumer group (or durable, queue) when the adapter names one.
	KeyConsumerGroup = attribute.Key("messaging.consumer.group.name")
	// KeyMessageID is the Watermill message UUID (spans only: unbounded cardinality).
	KeyMessageID = attribute.Key("messaging.message.id")
	// KeyHandler is the router handler's name.
	KeyHandler = attribute.Key("millrace.handler")
	// KeyOutcome is SUCCESS, DISCARD, RETRY or MALFORMED.
	KeyOutcome = attribute.Key("millrace.outcome")
	// KeyReason refines an outcome or a dead letter: see the package documentation.
	KeyReason = attribute.Key("millrace.reason")
	// KeyAttempt is the attempt number (spans only).
	KeyAttempt = attribute.Key("millrace.attempt")
	// KeyDelay is the retry delay chosen, in seconds (spans only).
	KeyDelay = attribute.Key("millrace.delay")
	// KeyNativeID is the broker's id of the delivery: entry ID, offset, sequence (spans only).
	KeyNativeID = attribute.Key("millrace.native_id")
	// KeyResult is an idempotency claim's result: acquired, done, busy, unavailable, lease_lost.
	KeyResult = attribute.Key("millrace.result")
)

// Outcome values of KeyOutcome.
const (
	OutcomeSuccess   = "SUCCESS"
	OutcomeDiscard   = "DISCARD"
	OutcomeRetry     = "RETRY"
	OutcomeMalformed = "MALFORMED"
)

// Reason values of KeyReason on deliveries.
const (
	// ReasonHandler: the handler returned this outcome (or nil for SUCCESS).
	ReasonHandler = "handler"
	// ReasonPanic: the handler panicked (RETRY).
	ReasonPanic = "panic"
	// ReasonTimeout: the handler ran past its budget (RETRY).
	ReasonTimeout = "timeout"
	// ReasonUndecodable: the adapter could not decode the delivery; the handler was not called
	// (MALFORMED).
	ReasonUndecodable = "undecodable"
	// ReasonOverLimit: the delivery arrived past MaxAttempts; the handler was not called (RETRY).
	ReasonOverLimit = "over_limit"
)
